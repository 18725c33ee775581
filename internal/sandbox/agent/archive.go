package agent

import (
	"archive/tar"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Archive transfers copy directory trees into and out of a sandbox whose files are not on the host (a pod): the
// host places a session's resources in a staging copy on its own disk, copies them in when it provisions the
// sandbox, and copies the outputs and memory stores back before it collects them. A transfer is a tar stream in
// chunks of at most ArchiveChunk bytes (Request.Data, Response.Data), one request per chunk, each sent once the
// previous one is answered; every request of a transfer carries the same ArchiveInput but for its Seq. The agent
// runs one transfer at a time: a transfer starts at Seq 0 (aborting the one under way), and a request that is not
// the next of the transfer under way is refused, so that an aborted transfer fails rather than starts again.
const (
	// ArchivePutTool extracts a tar stream under ArchiveInput.Dir (made if missing). Each request carries the
	// next chunk; the one with ArchiveInput.Last set is answered once the extraction has ended, with its error
	// if it failed.
	ArchivePutTool = "archive_put"
	// ArchiveGetTool answers each request with the next chunk of a tar stream of ArchiveInput.Dir (its files,
	// directories and links, none followed); Response.EOF marks the last.
	ArchiveGetTool = "archive_get"
	// ArchiveChunk is the most Data one request or response of a transfer carries.
	ArchiveChunk = 1 << 20
)

// ArchiveInput is the input of every request of a transfer.
type ArchiveInput struct {
	// Transfer names the transfer (unique per sandbox): its requests all carry it.
	Transfer string `json:"transfer"`
	// Seq numbers the transfer's requests from 0.
	Seq int `json:"seq,omitempty"`
	// Dir is the absolute directory in the sandbox.
	Dir string `json:"dir"`
	// Keep (put) are paths relative to Dir that are left as they are if they exist when the transfer starts:
	// nothing at or under them is written (what an agent did to a resource of a workspace that outlives its
	// sandboxes stays). Directories not under a kept path are merged; files are replaced.
	Keep []string `json:"keep,omitempty"`
	// ReadOnly (put): what is written, and Dir itself, have no write permission (the sandbox's user owns
	// them, so this is a guard against mistakes, not a boundary).
	ReadOnly bool `json:"read_only,omitempty"`
	// Last (put): this request carries the stream's last chunk.
	Last bool `json:"last,omitempty"`
	// Abort ends the transfer under way, if it is this one; it is answered at once.
	Abort bool `json:"abort,omitempty"`
}

// ExtractOptions bound and shape an extraction (ExtractTar).
type ExtractOptions struct {
	Keep     []string // as ArchiveInput.Keep
	ReadOnly bool     // as ArchiveInput.ReadOnly
	// MaxBytes and MaxEntries, when positive, bound the files' bytes and the number of entries, and with them
	// the stream as a whole (MaxBytes and maxEntryBytes an entry): a stream past any fails the extraction.
	MaxBytes   int64
	MaxEntries int
}

// Bounds on every entry of an extracted stream: a name (a tar's PAX header may carry one of a megabyte) and its
// depth (each path's cost grows with it), and what an entry may take of a bounded stream besides its file's bytes.
const (
	maxNameBytes  = 4096
	maxNameDepth  = 128
	maxEntryBytes = 16 << 10
)

// ErrArchiveTooLarge is the failure of an extraction past ExtractOptions' bounds.
var ErrArchiveTooLarge = errors.New("archive too large")

// ExtractTar extracts the tar stream r under dir (which exists), without following a link out of it: regular
// files, directories and symbolic links; other entries are skipped. Names must be local paths of at most
// maxNameBytes and maxNameDepth segments. Modes keep their permission bits only; modification times are the
// entries'. It stops when ctx ends.
func ExtractTar(ctx context.Context, dir string, r io.Reader, opt ExtractOptions) error {
	if opt.MaxBytes > 0 && opt.MaxEntries > 0 {
		r = &capReader{r: r, left: opt.MaxBytes + int64(opt.MaxEntries+2)*maxEntryBytes}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	kept := map[string]bool{}
	for _, k := range opt.Keep {
		k = path.Clean(k)
		if _, err := root.Lstat(k); err == nil {
			kept[k] = true
		}
	}
	isKept := func(name string) bool {
		for p := name; p != "." && p != "/"; p = path.Dir(p) {
			if kept[p] {
				return true
			}
		}
		return false
	}
	type dirTime struct {
		name  string
		mtime time.Time
	}
	var dirs []dirTime
	var n int64
	entries := 0
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if entries++; opt.MaxEntries > 0 && entries > opt.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrArchiveTooLarge, opt.MaxEntries)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q is not a local path", h.Name)
		}
		if len(name) > maxNameBytes || strings.Count(name, "/") >= maxNameDepth {
			return fmt.Errorf("%w: an entry's name of %d bytes and %d segments (at most %d and %d)", ErrArchiveTooLarge,
				len(name), strings.Count(name, "/")+1, maxNameBytes, maxNameDepth)
		}
		if isKept(name) {
			continue
		}
		perm := fs.FileMode(h.Mode) & fs.ModePerm
		if opt.ReadOnly {
			perm &^= 0o222
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, dirTime{name, h.ModTime})
		case tar.TypeReg:
			if n += h.Size; opt.MaxBytes > 0 && n > opt.MaxBytes {
				return fmt.Errorf("%w: more than %d bytes", ErrArchiveTooLarge, opt.MaxBytes)
			}
			if err := writeEntry(root, name, perm, tr); err != nil {
				return err
			}
			_ = root.Chtimes(name, h.ModTime, h.ModTime)
		case tar.TypeSymlink:
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return err
			}
			if err := root.RemoveAll(name); err != nil {
				return err
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		}
	}
	// Last, deepest first: a directory's time and mode once nothing more is written in it.
	slices.Reverse(dirs)
	if opt.ReadOnly {
		dirs = append(dirs, dirTime{name: "."}) // nothing is added to a read-only tree either
	}
	for _, d := range dirs {
		if !d.mtime.IsZero() {
			_ = root.Chtimes(d.name, d.mtime, d.mtime)
		}
		if opt.ReadOnly {
			if err := root.Chmod(d.name, 0o555); err != nil {
				return err
			}
		}
	}
	return nil
}

// capReader fails a read past its bound.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(b []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("%w: the stream runs past its bound", ErrArchiveTooLarge)
	}
	n, err := c.r.Read(b[:min(int64(len(b)), c.left)])
	c.left -= int64(n)
	return n, err
}

// writeEntry writes one regular file, replacing whatever is at name (a link is replaced, not followed).
func writeEntry(root *os.Root, name string, perm fs.FileMode, r io.Reader) error {
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	if fi, err := root.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		if err := root.RemoveAll(name); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, perm|0o200)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(name, perm) // the mode whatever the umask, and read-only once written
	}
	return err
}

// WriteTar writes dir's tree to w as a tar stream: regular files, directories and symbolic links (not followed),
// in lexical order; other entries are left out. A file that changes size while it is read fails the stream.
func WriteTar(ctx context.Context, dir string, w io.Writer) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		fi, err := root.Lstat(name)
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = root.Readlink(name); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil // devices, pipes and sockets are not copied
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = name, 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// transfer is the archive transfer under way in the agent.
type transfer struct {
	name string
	next int            // the Seq of its next request
	pw   *io.PipeWriter // put: chunks in, to the extraction
	pr   *io.PipeReader // get: chunks out, from WriteTar
	done chan error     // put: the extraction's result
	stop context.CancelFunc
}

func (t *transfer) abort() {
	err := errors.New("transfer aborted")
	if t.pw != nil {
		t.pw.CloseWithError(err)
	}
	if t.pr != nil {
		t.pr.CloseWithError(err)
	}
	t.stop()
}

// transfers holds the agent's one transfer.
type transfers struct {
	mu  sync.Mutex
	cur *transfer
}

// take returns the transfer of in's request: a new one (with start) at Seq 0, which aborts the one under way, or
// the one under way if in is its next request; else an error (the transfer was aborted by another, or a request
// was lost).
func (ts *transfers) take(in ArchiveInput, start func(ctx context.Context, t *transfer)) (*transfer, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if in.Seq != 0 {
		if t := ts.cur; t != nil && t.name == in.Transfer && t.next == in.Seq {
			t.next++
			return t, nil
		}
		return nil, fmt.Errorf("transfer %s is not under way at request %d (another transfer aborted it?)", in.Transfer, in.Seq)
	}
	if ts.cur != nil {
		ts.cur.abort()
	}
	ctx, stop := context.WithCancel(context.Background())
	t := &transfer{name: in.Transfer, next: 1, stop: stop}
	start(ctx, t)
	ts.cur = t
	return t, nil
}

// end forgets t if it is the transfer under way, and aborts it.
func (ts *transfers) end(t *transfer) {
	ts.mu.Lock()
	if ts.cur == t {
		ts.cur = nil
	}
	ts.mu.Unlock()
	t.abort()
}

// abort ends the transfer named name, if it is under way.
func (ts *transfers) abort(name string) {
	ts.mu.Lock()
	t := ts.cur
	ts.mu.Unlock()
	if t != nil && t.name == name {
		ts.end(t)
	}
}

// archive runs one request of an archive transfer.
func (s *Server) archive(req Request) Response {
	fail := func(format string, a ...any) Response {
		return Response{ID: req.ID, Content: errorf(format, a...).blocks(DefaultOutputCap), IsError: true}
	}
	var in ArchiveInput
	if err := json.Unmarshal(req.Input, &in); err != nil {
		return fail("invalid input: %v", err)
	}
	if in.Transfer == "" || !filepath.IsAbs(in.Dir) {
		return fail("a transfer needs a name and an absolute directory")
	}
	if in.Abort {
		s.xfer.abort(in.Transfer)
		return Response{ID: req.ID, Content: textResult("aborted").blocks(DefaultOutputCap)}
	}
	if req.Tool == ArchiveGetTool {
		return s.archiveGet(req, in, fail)
	}
	if len(req.Data) > ArchiveChunk {
		return fail("a chunk carries at most %d bytes", ArchiveChunk)
	}
	t, err := s.xfer.take(in, func(ctx context.Context, t *transfer) {
		pr, pw := io.Pipe()
		t.pw, t.done = pw, make(chan error, 1)
		go func() {
			err := os.MkdirAll(in.Dir, 0o755)
			if err == nil {
				err = ExtractTar(ctx, in.Dir, pr, ExtractOptions{Keep: in.Keep, ReadOnly: in.ReadOnly})
			}
			if err == nil {
				_, err = io.Copy(io.Discard, pr) // the tar's padding after its end
			}
			pr.CloseWithError(cmp.Or(err, errors.New("extraction ended")))
			t.done <- err
		}()
	})
	if err != nil {
		return fail("%v", err)
	}
	if t.pw == nil {
		s.xfer.end(t)
		return fail("transfer %s is not a put", in.Transfer)
	}
	if _, err := t.pw.Write(req.Data); err != nil {
		s.xfer.end(t)
		return fail("extracting under %s: %v", in.Dir, waitErr(t.done, err))
	}
	if !in.Last {
		return Response{ID: req.ID, Content: textResult("ok").blocks(DefaultOutputCap)}
	}
	t.pw.Close()
	err = <-t.done
	s.xfer.end(t)
	if err != nil {
		return fail("extracting under %s: %v", in.Dir, err)
	}
	return Response{ID: req.ID, Content: textResult("ok").blocks(DefaultOutputCap)}
}

// archiveGet answers one request of a get with the stream's next chunk.
func (s *Server) archiveGet(req Request, in ArchiveInput, fail func(string, ...any) Response) Response {
	t, err := s.xfer.take(in, func(tctx context.Context, t *transfer) {
		pr, pw := io.Pipe()
		t.pr = pr
		go func() { pw.CloseWithError(cmp.Or(WriteTar(tctx, in.Dir, pw), io.EOF)) }()
	})
	if err != nil {
		return fail("%v", err)
	}
	if t.pr == nil {
		s.xfer.end(t)
		return fail("transfer %s is not a get", in.Transfer)
	}
	buf := make([]byte, ArchiveChunk)
	n, err := io.ReadFull(t.pr, buf)
	switch {
	case err == nil:
		return Response{ID: req.ID, Data: buf[:n]}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		s.xfer.end(t)
		return Response{ID: req.ID, Data: buf[:n], EOF: true}
	default:
		s.xfer.end(t)
		return fail("reading %s: %v", in.Dir, err)
	}
}

// waitErr is the extraction's own error once it has ended (the reason a write into it failed), or err.
func waitErr(done <-chan error, err error) error {
	select {
	case e := <-done:
		if e != nil {
			return e
		}
	case <-time.After(time.Second):
	}
	return err
}
