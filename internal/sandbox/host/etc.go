package host

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Bounds of CopyEtc: an image's /etc holds what the packages a user listed put there. Debian's base has about
// 500 entries and 1.4 MiB.
const (
	maxEtcEntries = 20000
	maxEtcBytes   = 64 << 20
)

// CopyEtc copies the entries names (all of them when names is nil) of the /etc that src opens into dst, which
// it creates: only what any user may read, with its permission bits (so /etc/shadow and /etc/ssl/private stay
// out), symbolic links as links (they resolve in the sandbox), nothing else (devices, sockets, fifos). Nothing
// is followed out of src. It refuses an /etc of more than 20,000 entries or 64 MiB.
func CopyEtc(dst string, src *os.Root, names []string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return fmt.Errorf("copy /etc: %w", err)
	}
	if names == nil {
		ents, err := readDir(src, ".")
		if err != nil {
			return fmt.Errorf("copy /etc: %w", err)
		}
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	c := etcCopy{src: src, dst: dst}
	for _, name := range names {
		if err := c.copy(name); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // not on this host
			}
			return fmt.Errorf("copy /etc/%s: %w", name, err)
		}
	}
	return nil
}

type etcCopy struct {
	src     *os.Root
	dst     string
	entries int
	bytes   int64
}

func (c *etcCopy) copy(name string) error {
	if c.entries++; c.entries > maxEtcEntries {
		return fmt.Errorf("more than %d entries", maxEtcEntries)
	}
	fi, err := c.src.Lstat(name)
	if err != nil {
		return err
	}
	dst := filepath.Join(c.dst, name)
	perm := fi.Mode().Perm()
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := c.src.Readlink(name)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if perm&0o005 != 0o005 { // not listable by others: the sandbox could not read it either
			return nil
		}
		if err := os.Mkdir(dst, perm); err != nil {
			return err
		}
		ents, err := readDir(c.src, name)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := c.copy(filepath.Join(name, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		if perm&0o004 == 0 {
			return nil
		}
		if c.bytes += fi.Size(); c.bytes > maxEtcBytes {
			return fmt.Errorf("more than %d MiB", maxEtcBytes>>20)
		}
		in, err := c.src.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, io.LimitReader(in, fi.Size())); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	return nil // devices, sockets, fifos: not for a sandbox
}

func readDir(r *os.Root, name string) ([]fs.DirEntry, error) {
	d, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir(-1)
}
