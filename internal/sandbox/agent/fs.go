package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/apitype"
)

const (
	// maxFileBytes caps what read and edit load whole, as the reference's default.
	maxFileBytes = 256 * 1024
	// maxPDFBytes caps a PDF returned by read (as a document block: the model reads its text and pages).
	maxPDFBytes = 10 * 1024 * 1024
)

// imageTypes maps the file extensions read returns as image blocks to their media types.
var imageTypes = map[string]string{
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
}

// decodeStrict decodes a tool's JSON input into v. The input must be a JSON object; unknown fields are ignored,
// as the reference does, and a field of the wrong type is named in the error.
func decodeStrict(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return errors.New("input must be a JSON object")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %q must be of type %s, not %s", te.Field, jsonType(te.Type.Kind().String()), te.Value)
		}
		return err
	}
	return nil
}

func jsonType(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "int", "int64":
		return "integer"
	case "slice":
		return "array"
	}
	return goKind
}

// fsErrorMessage maps a filesystem error to a message without host paths, like the reference.
func fsErrorMessage(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file or directory"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case errors.Is(err, syscall.ENOTDIR):
		return "not a directory"
	case errors.Is(err, syscall.EISDIR):
		return "is a directory"
	case errors.Is(err, syscall.ELOOP):
		return "too many levels of symbolic links"
	case errors.Is(err, syscall.ENOSPC):
		return "no space left on device (the disk or file quota of this filesystem is used up)"
	case errors.Is(err, syscall.EDQUOT):
		return "disk quota exceeded"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return "i/o error"
}

// resolvePath resolves p against the workspace. When cfg.Confine is set, the symlink-resolved result must lie
// inside the workspace.
func resolvePath(cfg *Config, p string) (string, error) {
	abs := filepath.Clean(p)
	if !filepath.IsAbs(p) {
		abs = filepath.Join(cfg.Workspace, p)
	}
	if !cfg.Confine {
		return abs, nil
	}
	root, err := filepath.EvalSymlinks(cfg.Workspace)
	if err != nil {
		return "", fmt.Errorf("workspace: %s", fsErrorMessage(err))
	}
	real, err := canonicalize(abs)
	if err != nil {
		return "", fmt.Errorf("path %q: %s", p, fsErrorMessage(err))
	}
	if real != root && !strings.HasPrefix(real, strings.TrimSuffix(root, "/")+"/") {
		return "", fmt.Errorf("path %q is outside the session's working directory", p)
	}
	return real, nil
}

// canonicalize resolves every symlink of abs, including a dangling leaf, keeping a missing tail so that paths
// about to be created resolve too.
func canonicalize(abs string) (string, error) {
	var tail []string
	prefix := abs
	for hops := 0; ; {
		real, err := filepath.EvalSymlinks(prefix)
		if err == nil {
			for i := len(tail) - 1; i >= 0; i-- {
				real = filepath.Join(real, tail[i])
			}
			return real, nil
		}
		fi, lerr := os.Lstat(prefix)
		switch {
		case lerr == nil && fi.Mode()&os.ModeSymlink != 0:
			if hops++; hops > 40 {
				return "", syscall.ELOOP
			}
			dest, err := os.Readlink(prefix)
			if err != nil {
				return "", err
			}
			if !filepath.IsAbs(dest) {
				dest = filepath.Join(filepath.Dir(prefix), dest)
			}
			prefix = filepath.Clean(dest)
		case lerr == nil:
			return "", err
		case errors.Is(lerr, fs.ErrNotExist), errors.Is(lerr, syscall.ENOTDIR):
			parent := filepath.Dir(prefix)
			if parent == prefix {
				return "", lerr
			}
			tail = append(tail, filepath.Base(prefix))
			prefix = parent
		default:
			return "", lerr
		}
	}
}

type readInput struct {
	FilePath  string  `json:"file_path"`
	ViewRange []int64 `json:"view_range"`
}

func execRead(raw json.RawMessage, cfg *Config) result {
	var in readInput
	if err := decodeStrict(raw, &in); err != nil {
		return errorf("invalid read input: %v", err)
	}
	if in.FilePath == "" {
		return errorf("read: file_path is required")
	}
	if len(in.ViewRange) != 0 && len(in.ViewRange) != 2 {
		return errorf("read: view_range must be [start_line, end_line]")
	}
	path, err := resolvePath(cfg, in.FilePath)
	if err != nil {
		return errorf("read: %v", err)
	}
	// Stat before open: the size cap stops a huge file from exhausting memory, and FIFOs and devices are refused
	// before open can block on them.
	info, err := os.Stat(path)
	if err != nil {
		return errorf("read %s: %s", in.FilePath, fsErrorMessage(err))
	}
	if !info.Mode().IsRegular() {
		return errorf("read: %s is not a regular file", in.FilePath)
	}
	if mt, ok := imageTypes[strings.ToLower(filepath.Ext(path))]; ok && len(in.ViewRange) == 0 {
		return readImage(path, in.FilePath, mt, info.Size())
	}
	if strings.EqualFold(filepath.Ext(path), ".ipynb") && len(in.ViewRange) == 0 {
		return readNotebook(path, in.FilePath)
	}
	if strings.EqualFold(filepath.Ext(path), ".pdf") && len(in.ViewRange) == 0 {
		return readPDF(path, in.FilePath, info.Size())
	}
	if info.Size() > maxFileBytes {
		if len(in.ViewRange) == 0 {
			return errorf("read: %s is %d bytes, exceeds %d-byte limit. Use the view_range parameter to read specific line ranges, e.g. view_range: [1, 500].",
				in.FilePath, info.Size(), maxFileBytes)
		}
		return readRange(path, in.FilePath, in.ViewRange[0], in.ViewRange[1])
	}
	data, over, err := readFileAtMost(path, maxFileBytes)
	if err != nil {
		return errorf("read %s: %s", in.FilePath, fsErrorMessage(err))
	}
	if over {
		if len(in.ViewRange) == 0 {
			return errorf("read: %s holds more than the %d-byte limit. Use the view_range parameter to read specific line ranges, e.g. view_range: [1, 500].",
				in.FilePath, maxFileBytes)
		}
		return readRange(path, in.FilePath, in.ViewRange[0], in.ViewRange[1])
	}
	if len(in.ViewRange) == 0 {
		return textResult(string(data))
	}
	lines := strings.Split(string(data), "\n")
	start := max(0, int(in.ViewRange[0])-1)
	if start >= len(lines) {
		return textResult("")
	}
	end := len(lines)
	if e := int(in.ViewRange[1]); e > 0 && e < end {
		end = e
	}
	if end < start {
		return textResult("")
	}
	return textResult(strings.Join(lines[start:end], "\n"))
}

func readImage(path, name, mediaType string, size int64) result {
	if size > MaxImageBytes {
		return errorf("read: image %s is %d bytes, exceeds %d-byte limit", name, size, MaxImageBytes)
	}
	data, over, err := readFileAtMost(path, MaxImageBytes)
	if err != nil {
		return errorf("read %s: %s", name, fsErrorMessage(err))
	}
	if over {
		return errorf("read: image %s exceeds %d-byte limit", name, MaxImageBytes)
	}
	src, _ := json.Marshal(apitype.ImageSource{Type: apitype.SourceBase64, MediaType: mediaType, Data: base64.StdEncoding.EncodeToString(data)})
	return result{images: []apitype.ContentBlock{{Type: apitype.ContentImage, Source: src}}}
}

// readPDF returns a PDF as a document block, as the hosted tool does: the model reads its text and sees its
// pages. What is not a PDF (no %PDF- header) is refused.
func readPDF(path, name string, size int64) result {
	if size > maxPDFBytes {
		return errorf("read: PDF %s is %d bytes, exceeds %d-byte limit; extract its text with bash (e.g. pdftotext) instead", name, size, maxPDFBytes)
	}
	data, over, err := readFileAtMost(path, maxPDFBytes)
	if err != nil {
		return errorf("read %s: %s", name, fsErrorMessage(err))
	}
	if over {
		return errorf("read: PDF %s exceeds %d-byte limit", name, maxPDFBytes)
	}
	if !bytes.HasPrefix(data, []byte("%PDF-")) {
		return errorf("read: %s is not a PDF (no %%PDF- header)", name)
	}
	src, _ := json.Marshal(apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "application/pdf", Data: base64.StdEncoding.EncodeToString(data)})
	return result{text: fmt.Sprintf("PDF %s (%d bytes): its text and pages follow as a document.", name, len(data)),
		images: []apitype.ContentBlock{{Type: apitype.ContentDocument, Source: src}}}
}

// readRange streams lines [startLine, endLine] (1-based, inclusive; endLine <= 0 means to the end) of a file too
// large to load whole, capping the selection at maxFileBytes.
func readRange(path, name string, startLine, endLine int64) result {
	start := max(0, startLine-1)
	end := int64(1 << 62)
	if endLine > 0 {
		end = endLine
	}
	if end <= start {
		return textResult("")
	}
	f, err := os.Open(path)
	if err != nil {
		return errorf("read %s: %s", name, fsErrorMessage(err))
	}
	defer f.Close()
	var (
		out   []byte
		line  int64
		chunk = make([]byte, 64*1024)
	)
	for line < end {
		n, rerr := f.Read(chunk)
		b := chunk[:n]
		for len(b) > 0 && line < end {
			nl := bytes.IndexByte(b, '\n')
			seg := b
			if nl >= 0 {
				seg = b[:nl]
			}
			if line >= start {
				out = append(out, seg...)
				if nl >= 0 && line+1 < end {
					out = append(out, '\n')
				}
				if len(out) > maxFileBytes {
					return errorf("read: view_range [%d, %d] of %s exceeds %d-byte limit. Narrow the view_range to read a smaller portion.",
						startLine, endLine, name, maxFileBytes)
				}
			}
			if nl < 0 {
				break
			}
			line++
			b = b[nl+1:]
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return errorf("read %s: %s", name, fsErrorMessage(rerr))
		}
	}
	return textResult(string(out))
}

// readFileAtMost reads a file, reporting over once it yields more than limit bytes (files under /proc report
// a size of 0).
func readFileAtMost(path string, limit int64) ([]byte, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	return data, int64(len(data)) > limit, err
}

type writeInput struct {
	FilePath *string `json:"file_path"`
	Content  *string `json:"content"`
}

func execWrite(raw json.RawMessage, cfg *Config) result {
	var in writeInput
	if err := decodeStrict(raw, &in); err != nil {
		return errorf("invalid write input: %v", err)
	}
	if in.FilePath == nil || *in.FilePath == "" {
		return errorf("write: file_path is required")
	}
	if in.Content == nil {
		return errorf("write: content is required")
	}
	path, err := resolvePath(cfg, *in.FilePath)
	if err != nil {
		return errorf("write: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return errorf("write %s: mkdir: %s", *in.FilePath, fsErrorMessage(err))
	}
	if err := atomicWriteFile(path, []byte(*in.Content)); err != nil {
		return errorf("write %s: %s", *in.FilePath, fsErrorMessage(err))
	}
	return textResult(fmt.Sprintf("wrote %d bytes to %s", len(*in.Content), *in.FilePath))
}

type editInput struct {
	FilePath   string  `json:"file_path"`
	OldString  string  `json:"old_string"`
	NewString  *string `json:"new_string"`
	ReplaceAll bool    `json:"replace_all"`
}

func execEdit(raw json.RawMessage, cfg *Config) result {
	var in editInput
	if err := decodeStrict(raw, &in); err != nil {
		return errorf("invalid edit input: %v", err)
	}
	if in.FilePath == "" {
		return errorf("edit: file_path is required")
	}
	if in.OldString == "" {
		return errorf("edit: old_string is required")
	}
	if in.NewString == nil {
		return errorf("edit: new_string is required")
	}
	path, err := resolvePath(cfg, in.FilePath)
	if err != nil {
		return errorf("edit: %v", err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return errorf("edit %s: %s", in.FilePath, fsErrorMessage(err))
	}
	if !info.Mode().IsRegular() {
		return errorf("edit: %s is not a regular file", in.FilePath)
	}
	if info.Size() > maxFileBytes {
		return errorf("edit: %s is %d bytes, exceeds %d-byte limit. The edit tool loads the whole file and cannot modify a file this large.",
			in.FilePath, info.Size(), maxFileBytes)
	}
	data, over, err := readFileAtMost(path, maxFileBytes)
	if err != nil {
		return errorf("edit %s: %s", in.FilePath, fsErrorMessage(err))
	}
	if over {
		return errorf("edit: %s holds more than the %d-byte limit. The edit tool loads the whole file and cannot modify a file this large.",
			in.FilePath, maxFileBytes)
	}
	content := string(data)
	count := strings.Count(content, in.OldString)
	if count == 0 {
		return errorf("edit: old_string not found in %s", in.FilePath)
	}
	if count > 1 && !in.ReplaceAll {
		return errorf("edit: old_string appears %d times in %s (must be unique)", count, in.FilePath)
	}
	n := 1
	if in.ReplaceAll {
		n = -1
	}
	updated := strings.Replace(content, in.OldString, *in.NewString, n)
	if err := atomicWriteFile(path, []byte(updated)); err != nil {
		return errorf("edit %s: %s", in.FilePath, fsErrorMessage(err))
	}
	return textResult(fmt.Sprintf("edited %s (%d replacement(s))", in.FilePath, count))
}

// atomicWriteFile writes data beside path and renames it over path, keeping an existing file's permissions.
func atomicWriteFile(path string, data []byte) error {
	perm := os.FileMode(0o644)
	if info, err := os.Stat(path); err == nil {
		perm = info.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".corral-write-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
