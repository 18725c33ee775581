package skills_test

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/skills"
)

const skillMD = "---\nname: csv-tools\ndescription: \"Reads and writes CSV files.\"\n---\n# CSV tools\nUse pandas.\n"

func build(t *testing.T, files map[string]string) (*skills.Meta, []byte, error) {
	t.Helper()
	var buf bytes.Buffer
	b := skills.NewBuilder(&buf)
	for name, content := range files {
		if err := b.Add(name, strings.NewReader(content)); err != nil {
			return nil, nil, err
		}
	}
	m, err := b.Close()
	return m, buf.Bytes(), err
}

func TestBuildAndExtract(t *testing.T) {
	t.Parallel()
	m, z, err := build(t, map[string]string{"csv/SKILL.md": skillMD, "csv/scripts/read.py": "print(1)\n"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "csv-tools" || m.Description != "Reads and writes CSV files." || m.Top != "csv" {
		t.Fatalf("meta %+v", m)
	}
	dir := filepath.Join(t.TempDir(), "csv-tools")
	if err := skills.Extract(bytes.NewReader(z), int64(len(z)), dir); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "scripts", "read.py"))
	if err != nil || string(got) != "print(1)\n" {
		t.Fatalf("extracted %q, %v", got, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "SKILL.md")); fi == nil || fi.Mode().Perm() != 0o444 {
		t.Fatalf("SKILL.md: %v", fi)
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	for name, files := range map[string]map[string]string{
		"dotdot":          {"s/SKILL.md": skillMD, "s/../escape": "x"},
		"absolute":        {"/etc/passwd": "x"},
		"backslash":       {"s\\SKILL.md": skillMD},
		"top-level file":  {"SKILL.md": skillMD},
		"two tops":        {"a/SKILL.md": skillMD, "b/x": "x"},
		"no SKILL.md":     {"s/README.md": "x"},
		"no front matter": {"s/SKILL.md": "# no front matter\n"},
		"unclosed":        {"s/SKILL.md": "---\nname: a\ndescription: b\n"},
		"bad name":        {"s/SKILL.md": "---\nname: Not A Slug\ndescription: b\n---\n"},
		"no description":  {"s/SKILL.md": "---\nname: ok\n---\n"},
	} {
		if _, _, err := build(t, files); !errors.Is(err, skills.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// zipOf writes a zip with the entries; a mode other than 0 is set on the entry.
func zipOf(t testing.TB, entries []struct {
	name string
	mode fs.FileMode
	data []byte
}) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.mode != 0 {
			h.SetMode(e.mode)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type entry = struct {
	name string
	mode fs.FileMode
	data []byte
}

func TestAddZip(t *testing.T) {
	t.Parallel()
	addZip := func(z []byte) error {
		var out bytes.Buffer
		b := skills.NewBuilder(&out)
		if err := b.AddZip(bytes.NewReader(z), int64(len(z))); err != nil {
			return err
		}
		_, err := b.Close()
		return err
	}
	ok := zipOf(t, []entry{{name: "s/", mode: fs.ModeDir | 0o755}, {name: "s/SKILL.md", data: []byte(skillMD)}})
	if err := addZip(ok); err != nil {
		t.Fatalf("a good zip: %v", err)
	}
	for name, z := range map[string][]byte{
		"symlink":  zipOf(t, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/link", mode: fs.ModeSymlink | 0o777, data: []byte("/etc/passwd")}}),
		"zip slip": zipOf(t, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/../../x", data: []byte("x")}}),
		"absolute": zipOf(t, []entry{{name: "/s/SKILL.md", data: []byte(skillMD)}}),
		// 40 MiB of zeros deflate to a few tens of KiB: the expansion is bounded, whatever the header says.
		"bomb":      zipOf(t, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/zeros", data: make([]byte, 40<<20)}}),
		"not a zip": []byte("PK but not really"),
		// A file and a directory of one name (found by FuzzSkillZip): Extract could not unpack both.
		"file, then a directory of its name": zipOf(t, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/a", data: []byte("x")}, {name: "s/a/b/c", data: []byte("y")}}),
		"directory, then a file of its name": zipOf(t, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/a/b/c", data: []byte("y")}, {name: "s/a/b", data: []byte("x")}}),
	} {
		if err := addZip(z); !errors.Is(err, skills.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// FuzzSkillZip: a hostile zip, uploaded (AddZip and Close) and unpacked (Extract). Neither panics, and whatever
// the archive's headers claim: an upload refused is ErrInvalid; an upload accepted is a skill whose files keep the
// path rules, the file count and the expanded size, and which Extract unpacks into exactly those files; Extract of
// the raw archive writes nothing outside its directory, and at most MaxFiles files and MaxTotalBytes bytes (one
// byte more in a file it then refuses).
func FuzzSkillZip(f *testing.F) {
	for _, z := range [][]byte{
		zipOf(f, []entry{{name: "s/", mode: fs.ModeDir | 0o755}, {name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/lib/a.py", data: []byte("x")}}),
		zipOf(f, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/link", mode: fs.ModeSymlink | 0o777, data: []byte("/etc/passwd")}}),
		zipOf(f, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/../../x", data: []byte("x")}}),
		zipOf(f, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/SKILL.md", data: []byte(skillMD)}}),
		zipOf(f, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "t/x", data: []byte("x")}}),
		zipOf(f, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/a", data: []byte("x")}, {name: "s/a/b", data: []byte("y")}}),
		zipOf(f, []entry{{name: "s/SKILL.md", data: []byte(skillMD)}, {name: "s/zeros", data: make([]byte, 1<<20)}}),
		zipOf(f, []entry{{name: "SKILL.md", data: []byte(skillMD)}}),
		zipOf(f, []entry{{name: "s\\SKILL.md", data: []byte(skillMD)}}),
		zipOf(f, []entry{{name: "s/fifo", mode: fs.ModeNamedPipe | 0o644}}),
		[]byte("PK\x05\x06" + strings.Repeat("\x00", 18)),
		[]byte("not a zip"),
	} {
		f.Add(z)
	}
	f.Fuzz(checkZip)
}

// FuzzSkillFiles: FuzzSkillZip with well-formed zips of fuzzed entries, one a line of paths: a path, or a path
// and "@" and a digit, the entry's kind (0 a file, 1 a directory, 2 a symbolic link, 3 a named pipe). An entry's
// content is its line.
func FuzzSkillFiles(f *testing.F) {
	for _, s := range []string{"s/SKILL.md\ns/a.py", "s/SKILL.md\ns/@1\ns/lib/@1\ns/lib/x", "s/SKILL.md\ns/a\ns/a/b",
		"s/SKILL.md\ns/a/b\ns/a", "s/SKILL.md\ns/l@2", "s/SKILL.md\ns/p@3", "s/SKILL.md\ns/./a\ns//b", "s/SKILL.md\nt/SKILL.md",
		"s/SKILL.md\ns/SKILL.md", "s/SKILL.md\ns/a@1\ns/a", "s/SKILL.md\ns/é\ns/e\u0301"} {
		f.Add(s)
	}
	kinds := []fs.FileMode{0, fs.ModeDir | 0o755, fs.ModeSymlink | 0o777, fs.ModeNamedPipe | 0o644}
	f.Fuzz(func(t *testing.T, lines string) {
		var entries []entry
		for i, line := range strings.Split(lines, "\n") {
			if i == 2*skills.MaxFiles+2 {
				break
			}
			name, kind := line, 0
			if j := strings.LastIndexByte(line, '@'); j >= 0 && j == len(line)-2 && line[j+1] >= '0' && line[j+1] <= '3' {
				name, kind = line[:j], int(line[j+1]-'0')
			}
			if len(name) > 2*skills.MaxPathLen {
				continue // longer than any path a skill takes; zip refuses a name over 64 KiB
			}
			data := []byte(line)
			switch {
			case kind == 1 || strings.HasSuffix(name, "/"):
				data = nil // zip writes no data for a directory
			case strings.HasSuffix(name, "SKILL.md"):
				data = []byte(skillMD)
			}
			entries = append(entries, entry{name: name, mode: kinds[kind], data: data})
		}
		checkZip(t, zipOf(t, entries))
	})
}

// checkZip is the check of FuzzSkillZip and FuzzSkillFiles.
func checkZip(t *testing.T, z []byte) {
	var out bytes.Buffer
	b := skills.NewBuilder(&out)
	err := b.AddZip(bytes.NewReader(z), int64(len(z)))
	var m *skills.Meta
	if err == nil {
		m, err = b.Close()
	}
	if err != nil && !errors.Is(err, skills.ErrInvalid) {
		t.Fatalf("upload refused with %v, not ErrInvalid", err)
	}
	if err == nil {
		checkBuilt(t, m, out.Bytes())
	}
	// The raw archive, unpacked as if a stored skill were hostile.
	root := t.TempDir()
	dir := filepath.Join(root, "skill")
	xerr := skills.Extract(bytes.NewReader(z), int64(len(z)), dir)
	n, total := 0, int64(0)
	if werr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && p != dir && !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("Extract wrote %s, outside %s", p, dir)
		}
		if d.Type()&fs.ModeSymlink != 0 || !d.IsDir() && !d.Type().IsRegular() {
			t.Fatalf("Extract made %s, a %v", p, d.Type())
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n, total = n+1, total+info.Size()
		}
		return nil
	}); werr != nil {
		t.Fatal(werr)
	}
	limit := int64(skills.MaxTotalBytes)
	if xerr != nil {
		limit++
	}
	if n > skills.MaxFiles || total > limit {
		t.Fatalf("Extract (%v) wrote %d files, %d bytes", xerr, n, total)
	}
}

// checkBuilt checks a skill the Builder accepted: its zip's entries keep the rules and limits, and Extract
// unpacks exactly them.
func checkBuilt(t *testing.T, m *skills.Meta, z []byte) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatalf("accepted, but the built zip does not read: %v", err)
	}
	if len(zr.File) == 0 || len(zr.File) > skills.MaxFiles || m.Name == "" || m.Top == "" {
		t.Fatalf("accepted %d files as %+v", len(zr.File), m)
	}
	want := map[string][]byte{}
	var total int64
	for _, f := range zr.File {
		top, err := skills.CheckPath(f.Name)
		if err != nil || top != m.Top || want[f.Name] != nil {
			t.Fatalf("accepted %q (top %q of %q, %v, twice %v)", f.Name, top, m.Top, err, want[f.Name] != nil)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		want[f.Name], total = data, total+int64(len(data))
	}
	if total > skills.MaxTotalBytes || want[m.Top+"/SKILL.md"] == nil {
		t.Fatalf("accepted %d bytes; SKILL.md %v", total, want[m.Top+"/SKILL.md"] != nil)
	}
	dir := filepath.Join(t.TempDir(), "built")
	if err := skills.Extract(bytes.NewReader(z), int64(len(z)), dir); err != nil {
		t.Fatalf("accepted, but Extract refuses the built zip: %v", err)
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(dir, strings.TrimPrefix(name, m.Top+"/")))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s unpacked as %q (%v), want %q", name, got, err, data)
		}
	}
}
