package host

import (
	"errors"
	"fmt"
	"os"
	"sort"
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

// bindReadOnly binds src (recursively) at dst, private, read-only, without suid or devices.
func bindReadOnly(src, dst string) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := syscall.Mount("", dst, "", syscall.MS_PRIVATE|syscall.MS_REC, ""); err != nil {
		_ = syscall.Unmount(dst, syscall.MNT_DETACH)
		return fmt.Errorf("make %s private: %w", dst, err)
	}
	if err := syscall.Mount("", dst, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
		_ = syscall.Unmount(dst, syscall.MNT_DETACH)
		return fmt.Errorf("remount %s read-only: %w", dst, err)
	}
	return nil
}
