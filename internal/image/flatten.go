package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// buildOnly are the paths of a build's upper directory that are the builder's, not the layer's: the mount
// points bwrap made and the scratch directories.
var buildOnly = map[string]bool{".corral": true, "tmp": true, "var/tmp": true, "root/.cache": true, "root/.npm": true,
	"root/go": true, "root/.cargo": true, "root/.gem": true, "root/.local/share/gem": true, "usr/local/cargo/registry": true}

// flatten makes dst the base tree with the overlay upper directory applied: the base's files as hard links
// (shared, read-only), directories created anew, the upper's files copied (without set-id bits), its
// whiteouts and opaque directories applied. Owners in the upper directory are the builder's (shifted by
// uidShift) and are shifted back. What the upper directory holds is copied within limit bytes (its files'
// apparent sizes: a sparse file costs what it would cost written out, and a file hard-linked under several
// names is linked again, not copied per name), so that a build within its disk limit cannot make a layer
// that fills the host's disk. dst must not exist.
func flatten(base, upper, dst string, uidShift int, limit int64) error {
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			return mkdirLike(target, &st, 0)
		}
		return os.Link(p, target)
	})
	if err != nil {
		return fmt.Errorf("link the base: %w", err)
	}
	var copied int64
	links := map[[2]uint64]string{} // the layer's first name of each upper inode with more than one name
	err = filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(upper, p)
		if rel == "." {
			return nil
		}
		if buildOnly[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			if st.Rdev == 0 { // a whiteout: the file is deleted
				return os.RemoveAll(target)
			}
		case unix.S_IFDIR:
			opaque := make([]byte, 1)
			if n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", opaque); err == nil && n == 1 && opaque[0] == 'y' {
				if err := os.RemoveAll(target); err != nil {
					return err
				}
			}
			if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
				if err := os.Remove(target); err != nil {
					return err
				}
			}
			return mkdirLike(target, &st, uidShift)
		}
		if err := os.RemoveAll(target); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			id := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[id]; ok {
				return os.Link(first, target)
			}
			if copied += st.Size; copied > limit {
				return fmt.Errorf("the layer is larger than the build's disk limit (%d MiB)", limit>>20)
			}
			if st.Nlink > 1 {
				links[id] = target
			}
		}
		return copyEntry(p, target, &st, uidShift)
	})
	if err != nil {
		return fmt.Errorf("apply the layer: %w", err)
	}
	return nil
}

// unshift maps a builder's id back (ids outside the builder's range stay).
func unshift(id uint32, by int) int {
	if by > 0 && int(id) >= by && int(id) < by+builderUIDs {
		return int(id) - by
	}
	return int(id)
}

// mkdirLike makes (or updates) directory target with st's mode and owner.
func mkdirLike(target string, st *unix.Stat_t, uidShift int) error {
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Lchown(target, unshift(st.Uid, uidShift), unshift(st.Gid, uidShift)); err != nil {
		return err
	}
	return unix.Chmod(target, st.Mode&0o7777)
}

// copyEntry copies the non-directory src (a regular file, link, device, fifo or socket) to target with its
// mode but its set-id bits, owner and times.
func copyEntry(src, target string, st *unix.Stat_t, uidShift int) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
	case unix.S_IFLNK:
		dest, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(dest, target); err != nil {
			return err
		}
	default:
		if err := unix.Mknod(target, st.Mode, int(st.Rdev)); err != nil {
			return err
		}
	}
	if err := os.Lchown(target, unshift(st.Uid, uidShift), unshift(st.Gid, uidShift)); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		// Without set-id bits: a sandbox never honours them (its mounts are nosuid, it runs with no_new_privs),
		// and a setuid-root file a package script made would be one on the host, in the cache directory.
		if err := unix.Chmod(target, st.Mode&0o1777); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
}
