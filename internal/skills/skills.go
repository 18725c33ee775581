// Package skills checks and packs the files of a skill (the Skills API): every file under one top-level
// directory that holds a SKILL.md with a front matter naming the skill and describing it. An upload, as
// multipart files or as one zip, becomes a normalised zip through a Builder, which refuses paths that leave the
// skill's directory (.., absolute paths, backslashes), links and devices, and bounds the files' number and
// their expanded size whatever the archive's headers claim (zip bombs). Extract unpacks a stored zip into a
// directory under the same rules, through an os.Root.
package skills

import (
	"archive/zip"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"
)

// Limits of a skill.
const (
	MaxFiles       = 500
	MaxTotalBytes  = 30 << 20 // the files, expanded
	MaxArchive     = 30 << 20 // an uploaded zip, compressed
	maxSkillMD     = 1 << 20
	MaxNameLen     = 64
	MaxDescription = 1024
	MaxPathLen     = 512
)

// ErrInvalid marks what a client sent wrong; its message says what.
var ErrInvalid = errors.New("invalid skill")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Meta is what a skill's SKILL.md says of it.
type Meta struct {
	Name        string // kebab-case slug: the directory the skill is mounted under
	Description string
	// Top is the top-level directory of the uploaded files.
	Top string
}

// Builder packs a skill's files into a zip.
type Builder struct {
	zw      *zip.Writer
	top     string
	files   int
	total   int64
	seen    map[string]bool // the files
	dirs    map[string]bool // the directories under top the files are in
	skillMD []byte
}

// NewBuilder returns a Builder writing to w.
func NewBuilder(w io.Writer) *Builder {
	return &Builder{zw: zip.NewWriter(w), seen: map[string]bool{}, dirs: map[string]bool{}}
}

// CheckPath validates a file's path in a skill: relative, slash-separated, clean, no "..", no backslash or
// control character, under a top-level directory. It returns the top-level directory.
func CheckPath(name string) (string, error) {
	switch {
	case name == "" || len(name) > MaxPathLen:
		return "", invalid("path %q: empty or longer than %d bytes", name, MaxPathLen)
	case !utf8.ValidString(name) || strings.ContainsAny(name, "\\\x00") || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", invalid("path %q: backslashes and control characters are not allowed", name)
	case strings.HasPrefix(name, "/"):
		return "", invalid("path %q: absolute paths are not allowed", name)
	case path.Clean(name) != name:
		return "", invalid("path %q is not clean (., .., or repeated slashes)", name)
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == ".." || seg == "." {
			return "", invalid("path %q leaves the skill's directory", name)
		}
	}
	top, rest, ok := strings.Cut(name, "/")
	if !ok || rest == "" {
		return "", invalid("path %q: every file must be under the skill's top-level directory (e.g. my-skill/SKILL.md)", name)
	}
	return top, nil
}

// Add adds one file, read from r (at most what is left of MaxTotalBytes).
func (b *Builder) Add(name string, r io.Reader) error {
	top, err := CheckPath(name)
	if err != nil {
		return err
	}
	if b.top == "" {
		b.top = top
	} else if top != b.top {
		return invalid("path %q: all files must be under one top-level directory (%s/)", name, b.top)
	}
	if b.seen[name] {
		return invalid("path %q given twice", name)
	}
	// A file and a directory of one name cannot both be unpacked.
	if b.dirs[name] {
		return invalid("path %q is a file and a directory", name)
	}
	for d := path.Dir(name); d != top; d = path.Dir(d) {
		if b.seen[d] {
			return invalid("path %q is under %q, a file", name, d)
		}
	}
	for d := path.Dir(name); d != top; d = path.Dir(d) {
		b.dirs[d] = true
	}
	b.seen[name] = true
	if b.files++; b.files > MaxFiles {
		return invalid("more than %d files", MaxFiles)
	}
	w, err := b.zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate})
	if err != nil {
		return err
	}
	var md *bytes.Buffer
	if name == top+"/SKILL.md" {
		md = &bytes.Buffer{}
		w = io.MultiWriter(w, &capped{md, maxSkillMD})
	}
	n, err := io.Copy(w, io.LimitReader(r, MaxTotalBytes-b.total+1))
	if err != nil {
		return err
	}
	if b.total += n; b.total > MaxTotalBytes {
		return invalid("the files expand to more than %d bytes", MaxTotalBytes)
	}
	if md != nil {
		b.skillMD = md.Bytes()
	}
	return nil
}

// capped keeps the first n bytes written to it.
type capped struct {
	b *bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if k := min(len(p), c.n-c.b.Len()); k > 0 {
		c.b.Write(p[:k])
	}
	return len(p), nil
}

// AddZip adds the files of an uploaded zip: directories are skipped; links and other special files are
// refused; each entry is read for real, so a header that lies about its size gains nothing.
func (b *Builder) AddZip(ra io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(ra, size)
	if err != nil {
		return invalid("not a zip archive: %v", err)
	}
	if len(zr.File) > 2*MaxFiles {
		return invalid("more than %d entries", 2*MaxFiles)
	}
	for _, f := range zr.File {
		mode := f.Mode()
		if mode.IsDir() || strings.HasSuffix(f.Name, "/") {
			continue
		}
		if !mode.IsRegular() {
			return invalid("%q is a %s: only regular files are allowed", f.Name, modeKind(mode))
		}
		rc, err := f.Open()
		if err != nil {
			return invalid("%q: %v", f.Name, err)
		}
		err = b.Add(f.Name, rc)
		rc.Close()
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				err = invalid("%q: %v", f.Name, err) // a corrupt entry
			}
			return err
		}
	}
	return nil
}

func modeKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	}
	return "special file"
}

// Close finishes the zip and returns the skill's metadata from its SKILL.md.
func (b *Builder) Close() (*Meta, error) {
	if err := b.zw.Close(); err != nil {
		return nil, err
	}
	if b.files == 0 {
		return nil, invalid("no files")
	}
	if b.skillMD == nil {
		return nil, invalid("no %s/SKILL.md: a skill's top-level directory must hold its SKILL.md", b.top)
	}
	m, err := ParseSkillMD(b.skillMD)
	if err != nil {
		return nil, err
	}
	m.Top = b.top
	return m, nil
}

// ParseSkillMD reads the front matter of a SKILL.md: a block between "---" lines at its start with at least
// name (a kebab-case slug) and description.
func ParseSkillMD(data []byte) (*Meta, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxSkillMD)
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "---" {
		return nil, invalid("SKILL.md must start with a front matter (a line ---, name: and description:, a line ---)")
	}
	fields := map[string]string{}
	closed := false
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "---" {
			closed = true
			break
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
			continue // nested values and continuation lines are not read
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
			v = v[1 : len(v)-1]
		}
		fields[strings.TrimSpace(k)] = v
	}
	if !closed {
		return nil, invalid("SKILL.md: the front matter is not closed by a line ---")
	}
	m := &Meta{Name: fields["name"], Description: fields["description"]}
	if !isSlug(m.Name) {
		return nil, invalid("SKILL.md: name %q must be 1 to %d lower-case letters, digits and hyphens", m.Name, MaxNameLen)
	}
	if m.Description == "" || len(m.Description) > MaxDescription {
		return nil, invalid("SKILL.md: description is required, at most %d bytes", MaxDescription)
	}
	return m, nil
}

func isSlug(s string) bool {
	if s == "" || len(s) > MaxNameLen || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Extract unpacks a skill's zip (as a Builder wrote it) into dir, dropping the top-level directory: dir gets
// SKILL.md and the rest. Files are written 0444 through an os.Root, under the Builder's
// rules and limits again (the zip is re-read as if hostile).
func Extract(ra io.ReaderAt, size int64, dir string) error {
	zr, err := zip.NewReader(ra, size)
	if err != nil {
		return fmt.Errorf("skills: %w", err)
	}
	if len(zr.File) > MaxFiles {
		return fmt.Errorf("skills: more than %d files", MaxFiles)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("skills: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("skills: %w", err)
	}
	defer root.Close()
	var total int64
	for _, f := range zr.File {
		if !f.Mode().IsRegular() {
			return fmt.Errorf("skills: %q is not a regular file", f.Name)
		}
		if _, err := CheckPath(f.Name); err != nil {
			return fmt.Errorf("skills: %w", err)
		}
		_, rel, _ := strings.Cut(f.Name, "/")
		if d := path.Dir(rel); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("skills: %w", err)
			}
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("skills: %w", err)
		}
		out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err == nil {
			var n int64
			n, err = io.Copy(out, io.LimitReader(rc, MaxTotalBytes-total+1))
			total += n
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err == nil && total > MaxTotalBytes {
				err = fmt.Errorf("expands to more than %d bytes", MaxTotalBytes)
			}
		}
		rc.Close()
		if err != nil {
			return fmt.Errorf("skills: %s: %w", f.Name, err)
		}
	}
	return nil
}
