package skills_test

import (
	"archive/zip"
	"bytes"
	"errors"
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
func zipOf(t *testing.T, entries []struct {
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
	} {
		if err := addZip(z); !errors.Is(err, skills.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
