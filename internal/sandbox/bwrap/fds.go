package bwrap

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeOnExec marks every descriptor of the server from 3 up close-on-exec, so that bwrap, and through it
// the sandbox, gets only the descriptors its exec.Cmd hands it: stdio and ExtraFiles, which the child dups
// into place (dup2 clears the flag on the copy). Go opens its own descriptors close-on-exec; this is for
// those the server inherited without the flag from whatever started it (a supervisor, a CI runner, a wrapper
// script), or that code outside Go's os package opened without it. It runs before every start, as such a
// descriptor can appear at any time; the flag changes nothing for the server's own use of a descriptor.
func closeOnExec() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("bwrap: close_range: %w", err)
	}
	// Kernels before 5.11: one descriptor at a time.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("bwrap: list descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The directory's own descriptor is gone by now: EBADF is a descriptor closed meanwhile.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("bwrap: close-on-exec %d: %w", fd, err)
		}
	}
	return nil
}

// writeClose writes b to the pipe f and closes it. What reads the pipe may not run yet (bwrap reads its
// arguments and its filter once it has started, and the parked process of a start kept ready becomes bwrap only
// once told to), so the pipe is first made to hold b: a recipe with many mounts can give bwrap more arguments
// than a pipe holds by default (64 KiB), and the write would wait for a reader that waits for it.
func writeClose(f *os.File, b []byte) error {
	err := fitPipe(f, len(b))
	if err == nil {
		_, err = f.Write(b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fitPipe grows the pipe f's buffer to hold n bytes if it holds fewer.
func fitPipe(f *os.File, n int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) {
		size, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		switch {
		case err != nil:
			opErr = fmt.Errorf("pipe size: %w", err)
		case n > size:
			if _, err := unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n); err != nil {
				opErr = fmt.Errorf("a pipe of %d bytes for %d: %w", size, n, err)
			}
		}
	}); err != nil {
		return err
	}
	return opErr
}
