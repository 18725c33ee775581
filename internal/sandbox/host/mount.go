package host

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// The mounts a backend stages on the host for a sandbox are made here, so that the rules they follow (private,
// never suid or devices, detached once the sandbox holds its own copy) are written once.

// BindMount binds src onto dst in the host's mount namespace, read-only if ro, without suid or devices. The
// mount is private, so that unmounting it later cannot propagate into the sandbox's copy.
func BindMount(src, dst string, ro bool) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := syscall.Mount("", dst, "", syscall.MS_PRIVATE, ""); err != nil {
		_ = Unmount(dst)
		return fmt.Errorf("make %s private: %w", dst, err)
	}
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_NOSUID | syscall.MS_NODEV)
	if ro {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount("", dst, "", flags, ""); err != nil {
		_ = Unmount(dst)
		return fmt.Errorf("remount %s: %w", dst, err)
	}
	return nil
}

// MountTmp mounts a private tmpfs of size bytes and inodes inodes, mode 1777, without suid or devices, at dir
// (which exists): a sandbox's /tmp, bounded in size and inodes.
func MountTmp(dir string, size, inodes int64) error {
	opts := fmt.Sprintf("mode=1777,size=%d,nr_inodes=%d", size, inodes)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_PRIVATE, ""); err != nil {
		_ = Unmount(dir)
		return fmt.Errorf("make /tmp private: %w", err)
	}
	return nil
}

// Unmount detaches the mount at path; a path that is not (or no longer) a mount is no error.
func Unmount(path string) error {
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// MountsUnder lists the mount points below dir, deepest first.
func MountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// StateSource is the source of the tmpfs MountState makes: it marks the mounts a provider may detach at its
// state directory (never one an operator made there) and names nothing of the host in a sandbox's mount table.
const StateSource = "corral-state"

// MountState mounts a private tmpfs (root's, of mode perm, without suid or devices) at dir, a provider's state
// directory, after detaching the ones a server that is gone left there (StateSource). A sandbox's mount table
// (/proc/self/mountinfo) shows each bind's root as its path from the root of its filesystem: what a provider
// stages for its sandboxes there (their /etc, the agent, the proxy socket, an OCI root) then shows as a path in
// this tmpfs, never where the state directory is on the host (/run/corral-bwrap/s-..., the data directory).
func MountState(dir string, perm os.FileMode) error {
	if err := UnmountState(dir); err != nil {
		return err
	}
	if err := syscall.Mount(StateSource, dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("mode=%#o", perm.Perm())); err != nil {
		return fmt.Errorf("mount state dir %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_PRIVATE, ""); err != nil {
		_ = Unmount(dir)
		return fmt.Errorf("make state dir %s private: %w", dir, err)
	}
	return nil
}

// UnmountState detaches the state tmpfs (MountState) at dir, and with it everything mounted beneath; the
// directory itself stays. None is no error.
func UnmountState(dir string) error {
	for range 16 { // tmpfs stacked by servers that crashed without a sweep
		if !stateMountedAt(dir) {
			return nil
		}
		if err := Unmount(dir); err != nil {
			return err
		}
	}
	return fmt.Errorf("unmount state dir %s: still mounted", dir)
}

// stateMountedAt reports whether the topmost mount at dir is a state tmpfs (StateSource).
func stateMountedAt(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	top := ""
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(g) > 1 && f[4] == dir {
			top = g[0] + " " + g[1] // later lines are mounted later: the last one is on top
		}
	}
	return top == "tmpfs "+StateSource
}

// mountImage mounts the image at rootfs at dst as a read-only overlay without suid or devices: a filesystem
// of its own, so that a sandbox's mount table shows its directories as /usr, /etc..., never the image's path on
// the host (the data directory). The overlay's options, which mountinfo shows too, name its layers as
// /proc/self/fd/<n> (descriptors of the image and of empty, an empty directory: an overlay without an upper
// layer takes two lower ones), never by their host paths.
func mountImage(rootfs, empty, dst string) error {
	var fds []*os.File
	defer func() {
		for _, f := range fds {
			f.Close()
		}
	}()
	var layers []string
	for _, dir := range []string{rootfs, empty} {
		f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		fds = append(fds, f)
		layers = append(layers, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())))
	}
	flags := uintptr(syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV)
	if err := syscall.Mount("overlay", dst, "overlay", flags, "lowerdir="+strings.Join(layers, ":")); err != nil {
		return fmt.Errorf("mount image %s: %w", rootfs, err)
	}
	if err := syscall.Mount("", dst, "", syscall.MS_PRIVATE, ""); err != nil {
		_ = syscall.Unmount(dst, syscall.MNT_DETACH)
		return fmt.Errorf("make image %s private: %w", rootfs, err)
	}
	return nil
}
