// Package volume gives each session's workspace a filesystem of its own, bounded in bytes and in inodes: a
// sparse ext4 image beside the workspace (<root>/.<session>.img), loop-mounted nosuid,nodev at the workspace
// directory (<root>/<session>) while the session has a sandbox. A sandbox that fills its workspace gets
// ENOSPC at its quota, and the filesystem that holds the server's data (and its database) loses at most the
// image's size. It implements the sandbox port's Volumes (sandbox.PoolConfig.Volumes).
//
// The loop device is bound with LOOP_CONFIGURE and autoclear, so that it is released as soon as the last mount
// of the image goes (a sandbox's mount namespace may hold the filesystem a little longer than the host). A
// mounted image is held under an exclusive flock: a second server process on the same data directory uses
// the mount it finds without mounting the image twice, and a mount whose lock is free is a leftover of a
// server that is gone, which New unmounts. Nothing here runs inside a sandbox or touches a cgroup: mkfs.ext4
// is a child of the server.
package volume

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/sandbox"
)

// Defaults of corral serve's --sandbox-disk, --sandbox-inodes and --sandbox-disk-reserve.
const (
	DefaultSizeBytes    = 4 << 30
	DefaultInodes       = 262144
	DefaultReserveBytes = 2 << 30
	// DefaultHeadroomBytes is --sandbox-disk-headroom's default: a mounted workspace costs the reserve check
	// what it uses plus at most 256 MiB, so that a machine mounts as many as its disk holds.
	DefaultHeadroomBytes = 256 << 20
)

// Config configures Volumes.
type Config struct {
	// Root is the directory of the workspaces (sandbox.PoolConfig.WorkspaceRoot). Required.
	Root string
	// SizeBytes is each workspace's size; default DefaultSizeBytes. At least 8 MiB.
	SizeBytes int64
	// Inodes is each workspace's number of inodes (files, directories, links); default DefaultInodes.
	Inodes int64
	// ReserveBytes is the free space the filesystem of Root keeps whatever the sandboxes write: a workspace is
	// mounted only if the free space, less what the mounted workspaces (this one included) may still grow by
	// (their quota less what their image already takes, divided by Overcommit), stays at least ReserveBytes.
	// Otherwise Attach fails with ErrReserve and the session's tool calls say why. 0 means
	// DefaultReserveBytes; negative means no check at all.
	ReserveBytes int64
	// HeadroomBytes bounds what the reserve check counts of a mounted workspace's unused quota: a workspace
	// costs the admission what its sparse image takes plus at most this much (re-measured at every check, so a
	// workspace that grows costs more). Default DefaultHeadroomBytes; SizeBytes or more is strict: a mounted
	// workspace costs its whole quota, and the mounted ones can never fill the filesystem below ReserveBytes.
	HeadroomBytes int64
	// Overcommit divides the growth the reserve check counts: 1 (the default) is strict, so that the mounted
	// workspaces can never fill the filesystem below ReserveBytes; 4 lets four times as many workspaces be
	// mounted on the bet that at most a quarter of their quotas is used.
	Overcommit float64
	// Mkfs is the mkfs.ext4 binary; default "mkfs.ext4" on PATH (e2fsprogs).
	Mkfs string
	// Logger receives the mounts and their failures; default discards.
	Logger *slog.Logger
}

// Volumes mounts the sessions' workspace images. It is safe for concurrent use.
type Volumes struct {
	cfg  Config
	mkfs string

	mu       sync.Mutex
	entries  map[string]*entry
	attached map[string]bool // the workspaces mounted (by this process or another) that this one uses

	admit sync.Mutex // serialises the reserve check with the mount it admits

	reclaim atomic.Pointer[func() bool] // SetReclaim's
}

// entry is one workspace directory: its lock and how many Attach calls hold it.
type entry struct {
	mu     sync.Mutex
	refs   int
	lock   *os.File // the image, flocked, while this process owns the mount
	shared bool     // mounted by another live process: used, never unmounted here
	plain  bool     // a directory from before quotas (not empty, no image): used as is
}

var _ sandbox.Volumes = (*Volumes)(nil)

// ErrReserve is returned (wrapped) by Attach when the filesystem of the workspaces is below its reserve. It is a
// sandbox.ErrNoRoom: the Pool then reaps its idle sandboxes to give their room to the session that needs it.
var ErrReserve error = reserveError{}

type reserveError struct{}

func (reserveError) Error() string        { return "the server's disk is nearly full" }
func (reserveError) Is(target error) bool { return target == sandbox.ErrNoRoom }

// Available reports whether workspace images can be mounted here: root, loop devices and mkfs.ext4. (A kernel
// without ext4 makes the first mount fail, with the reason.)
func Available(mkfs string) error {
	_, err := available(mkfs)
	return err
}

// available is Available that returns the mkfs it found.
func available(mkfs string) (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("workspace quotas need root (to mount the workspace images)")
	}
	path, err := lookMkfs(mkfs)
	if err != nil {
		return "", fmt.Errorf("workspace quotas need mkfs.ext4 (e2fsprogs): %w", err)
	}
	f, err := os.OpenFile("/dev/loop-control", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("workspace quotas need loop devices: %w", err)
	}
	f.Close()
	return path, nil
}

// lookMkfs finds mkfs (default mkfs.ext4) on PATH, or in the sbin directories a non-root PATH may lack.
func lookMkfs(mkfs string) (string, error) {
	p, err := exec.LookPath(cmp.Or(mkfs, "mkfs.ext4"))
	if err == nil || mkfs != "" {
		return p, err
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, serr := os.Stat(p); serr == nil {
			return p, nil
		}
	}
	return "", err
}

// New returns Volumes for cfg after checking Available, and unmounts the images of Root that a server that
// is gone left mounted.
func New(cfg Config) (*Volumes, error) {
	if cfg.Root == "" || !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("volume: Root %q must be an absolute path", cfg.Root)
	}
	cfg.SizeBytes = cmp.Or(cfg.SizeBytes, DefaultSizeBytes)
	cfg.Inodes = cmp.Or(cfg.Inodes, DefaultInodes)
	cfg.ReserveBytes = cmp.Or(cfg.ReserveBytes, DefaultReserveBytes)
	cfg.Overcommit = cmp.Or(cfg.Overcommit, 1)
	cfg.HeadroomBytes = cmp.Or(cfg.HeadroomBytes, DefaultHeadroomBytes)
	if cfg.HeadroomBytes < 0 {
		return nil, fmt.Errorf("volume: HeadroomBytes %d must not be negative", cfg.HeadroomBytes)
	}
	if cfg.Overcommit < 1 {
		return nil, fmt.Errorf("volume: Overcommit %v must be at least 1", cfg.Overcommit)
	}
	if cfg.SizeBytes < 8<<20 {
		return nil, fmt.Errorf("volume: a workspace of %d bytes is too small (at least 8 MiB)", cfg.SizeBytes)
	}
	if cfg.Inodes < 64 {
		return nil, fmt.Errorf("volume: %d inodes are too few (at least 64)", cfg.Inodes)
	}
	// mkfs.ext4 refuses inode tables (256 bytes an inode) as big as the filesystem; past half of it, a
	// workspace is mostly tables. Say so now rather than at every workspace's first mount.
	if tables := cfg.Inodes * 256; tables > cfg.SizeBytes/2 {
		return nil, fmt.Errorf("volume: %d inodes take %d MiB of inode tables (256 bytes each), more than half of a %d MiB workspace: fewer inodes or a bigger workspace",
			cfg.Inodes, tables>>20, cfg.SizeBytes>>20)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	mkfs, err := available(cfg.Mkfs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Root, 0o711); err != nil {
		return nil, fmt.Errorf("volume: %w", err)
	}
	v := &Volumes{cfg: cfg, mkfs: mkfs, entries: map[string]*entry{}, attached: map[string]bool{}}
	v.sweep()
	return v, nil
}

// SizeBytes and Inodes are each workspace's quota.
func (v *Volumes) SizeBytes() int64 { return v.cfg.SizeBytes }
func (v *Volumes) Inodes() int64    { return v.cfg.Inodes }

// imagePath is the image of workspace dir: hidden beside it, out of every sandbox's reach.
func imagePath(dir string) string {
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".img")
}

// sweep unmounts the workspaces under Root whose image no live process holds: a crashed server's.
func (v *Volumes) sweep() {
	ents, err := os.ReadDir(v.cfg.Root)
	if err != nil {
		return
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok || !strings.HasPrefix(name, ".") || e.IsDir() {
			continue
		}
		dir := filepath.Join(v.cfg.Root, strings.TrimPrefix(name, "."))
		if !isMount(dir) {
			continue
		}
		lock, err := lockImage(imagePath(dir))
		if err != nil {
			continue // held: another live server's mount
		}
		if err := unmount(dir); err != nil {
			v.cfg.Logger.Warn("workspace left mounted by a server that is gone could not be unmounted", "dir", dir, "session", sessionOf(dir), "err", err)
		} else {
			v.cfg.Logger.Info("unmounted a workspace a server that is gone left mounted", "dir", dir, "session", sessionOf(dir))
		}
		lock.Close()
	}
}

func (v *Volumes) entry(dir string) *entry {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.entries[dir]
	if e == nil {
		e = &entry{}
		v.entries[dir] = e
	}
	return e
}

// Attach makes dir, a workspace directory under Root, the mount point of the workspace's image, creating
// the image on the workspace's first use. Each Attach is undone by one Detach; the image is mounted once
// however many hold it.
func (v *Volumes) Attach(ctx context.Context, dir string) error {
	if filepath.Dir(dir) != filepath.Clean(v.cfg.Root) {
		return fmt.Errorf("workspace quota: %s is not a workspace of %s", dir, v.cfg.Root)
	}
	e := v.entry(dir)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refs > 0 {
		e.refs++
		return nil
	}
	if err := v.attach(ctx, dir, e); err != nil {
		return fmt.Errorf("workspace quota: %w", err)
	}
	e.refs = 1
	return nil
}

func (v *Volumes) attach(ctx context.Context, dir string, e *entry) error {
	img := imagePath(dir)
	if _, err := os.Lstat(img); errors.Is(err, fs.ErrNotExist) {
		if plain, err := nonEmptyDir(dir); err != nil {
			return err
		} else if plain {
			// Files from before quotas: mounting over them would hide them.
			v.cfg.Logger.Warn("workspace from before quotas has no image: it is used without a quota", "dir", dir, "session", sessionOf(dir))
			e.plain = true
			return nil
		}
	} else if err != nil {
		return err
	}
	v.admit.Lock()
	defer v.admit.Unlock()
	created := false // checked against the reserve just now, under admit
	if _, err := os.Lstat(img); errors.Is(err, fs.ErrNotExist) {
		if err := v.checkReserve(dir); err != nil {
			return err
		}
		if err := v.create(ctx, img); err != nil {
			return err
		}
		created = true
	}
	lock, err := lockImage(img)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		if isMount(dir) {
			e.shared = true // another live server process mounted it
			v.setAttached(dir, true)
			return nil
		}
		return errors.New("the workspace image is held by another process that has not mounted it")
	}
	if err != nil {
		return err
	}
	if isMount(dir) {
		// Our lock is free, so this mount is a leftover (a crashed server's, adopted here).
		e.lock = lock
		v.setAttached(dir, true)
		return nil
	}
	if !created {
		if err := v.checkReserve(dir); err != nil {
			lock.Close()
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		lock.Close()
		return err
	}
	if err := mountImage(img, dir); err != nil {
		lock.Close()
		return err
	}
	// mkfs leaves lost+found; /workspace starts empty (e2fsck recreates it if it ever needs it).
	_ = os.Remove(filepath.Join(dir, "lost+found"))
	e.lock = lock
	v.setAttached(dir, true)
	v.cfg.Logger.Debug("workspace mounted", "dir", dir, "session", sessionOf(dir))
	return nil
}

func (v *Volumes) setAttached(dir string, on bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if on {
		v.attached[dir] = true
	} else {
		delete(v.attached, dir)
	}
}

// checkReserve refuses to mount workspace dir when the free space of Root's filesystem, less what the mounted
// workspaces and dir may still grow by (divided by Overcommit), would be below ReserveBytes.
func (v *Volumes) checkReserve(dir string) error {
	if v.cfg.ReserveBytes < 0 {
		return nil
	}
	free, err := freeBytes(v.cfg.Root)
	if err != nil {
		return err
	}
	others, n := v.promised(dir)
	this := v.growth(dir)
	if free-int64(float64(others+this)/v.cfg.Overcommit) < v.cfg.ReserveBytes {
		return fmt.Errorf("%w: %d MiB free, the %d mounted workspaces are counted for %d MiB more and this one for %d MiB "+
			"(what each may still grow by, at most --sandbox-disk-headroom %d MiB, divided by --sandbox-disk-overcommit %g), "+
			"and --sandbox-disk-reserve %d MiB must stay free; no workspace can be mounted until space is freed, idle sandboxes "+
			"are reaped or sessions end (or lower --sandbox-disk-reserve or --sandbox-disk-headroom, raise --sandbox-disk-overcommit)",
			ErrReserve, free>>20, n, others>>20, this>>20, v.cfg.HeadroomBytes>>20, v.cfg.Overcommit, v.cfg.ReserveBytes>>20)
	}
	return nil
}

// promised is what the mounted workspaces other than except may still grow by, and how many they are.
func (v *Volumes) promised(except string) (int64, int) {
	v.mu.Lock()
	dirs := make([]string, 0, len(v.attached))
	for d := range v.attached {
		if d != except {
			dirs = append(dirs, d)
		}
	}
	v.mu.Unlock()
	var sum int64
	for _, d := range dirs {
		sum += v.growth(d)
	}
	return sum, len(dirs)
}

// freeBytes is the space of dir's filesystem an unprivileged writer may still take.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// CheckSpace fails with ErrReserve when the filesystem of dir is below the reserve: its free space, less what
// the mounted workspaces may still grow by when dir is on their filesystem, is under ReserveBytes. The Files
// API's storage calls it as it writes (files.Service.SetSpace), so that uploads and the outputs collected from
// sessions count against the reserve as the workspaces do. Before it fails, it has the reclaimer (SetReclaim:
// the Pool reaps its longest idle sandbox, whose volumes then stop counting) make room, one sandbox at a time,
// as Attach's refusal does: idle sessions never hold the reserve against an active one's files.
func (v *Volumes) CheckSpace(dir string) error {
	err := v.checkSpace(dir)
	for errors.Is(err, ErrReserve) {
		reclaim := v.reclaim.Load()
		if reclaim == nil || !(*reclaim)() {
			break
		}
		err = v.checkSpace(dir)
	}
	return err
}

// SetReclaim gives CheckSpace a way to make room: reclaim frees what it can of the admission (the Pool: its
// longest idle sandbox, NewPool calls it) and reports whether it freed anything. nil removes it.
func (v *Volumes) SetReclaim(reclaim func() bool) {
	if reclaim == nil {
		v.reclaim.Store(nil)
		return
	}
	v.reclaim.Store(&reclaim)
}

// checkSpace is CheckSpace without the reclaimer.
func (v *Volumes) checkSpace(dir string) error {
	if v.cfg.ReserveBytes < 0 {
		return nil
	}
	free, err := freeBytes(dir)
	if err != nil {
		return fmt.Errorf("disk reserve: %w", err)
	}
	var others int64
	var n int
	if sameFilesystem(dir, v.cfg.Root) {
		others, n = v.promised("")
	}
	if free-int64(float64(others)/v.cfg.Overcommit) < v.cfg.ReserveBytes {
		return fmt.Errorf("%w: %d MiB free where %s is, the %d mounted workspaces may still grow by %d MiB (overcommit %g), "+
			"and the reserve of %d MiB must stay free (--sandbox-disk-reserve)", ErrReserve, free>>20, dir, n, others>>20,
			v.cfg.Overcommit, v.cfg.ReserveBytes>>20)
	}
	return nil
}

// sameFilesystem reports whether a and b are on one filesystem.
func sameFilesystem(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// growth is how much more of the filesystem the reserve check counts workspace dir's image may take: its size
// less what it takes, at most HeadroomBytes.
func (v *Volumes) growth(dir string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(imagePath(dir), &st); err != nil {
		return min(v.cfg.SizeBytes, v.cfg.HeadroomBytes)
	}
	return min(max(0, max(st.Size, v.cfg.SizeBytes)-st.Blocks*512), v.cfg.HeadroomBytes)
}

// create makes a sparse image of SizeBytes with an ext4 filesystem of Inodes inodes at img, atomically.
func (v *Volumes) create(ctx context.Context, img string) error {
	tmp := img + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(v.cfg.SizeBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// -m 0: no blocks reserved for root (the sandbox is never root on it); lazy init keeps the image sparse;
	// -N fixes the inode count, which is the inode quota.
	cmd := exec.CommandContext(ctx, v.mkfs, "-q", "-F", "-t", "ext4", "-m", "0", "-N", strconv.FormatInt(v.cfg.Inodes, 10),
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", "workspace", tmp)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, img); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// lockImage opens img and takes its exclusive flock without waiting.
func lockImage(img string) (*os.File, error) {
	f, err := os.OpenFile(img, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// mountImage binds image file img to a free loop device with autoclear and mounts it at dir. The device gets
// an open file of its own: it keeps it while mounted, and a flock on it would outlive the server.
func mountImage(img, dir string) error {
	const flags, opts = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOATIME, "errors=remount-ro"
	// The filesystem of an earlier mount may live on after the host unmounted it, in the mount namespace of a
	// sandbox that is still going away (gVisor's gofer, a bwrap sandbox being killed), its loop device bound
	// until then. A second device would give the image a second filesystem over the first's unwritten state:
	// the files the session wrote last would be lost, and the image corrupted. Mounting the same device again
	// gives the same filesystem. (If autoclear releases it meanwhile, the mount fails and a new device is set up.)
	if dev := boundLoop(img); dev != "" {
		if err := unix.Mount(dev, dir, "ext4", flags, opts); err == nil {
			return nil
		}
	}
	f, err := os.OpenFile(img, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer ctl.Close()
	// Another process may take the free device between the two calls: try again with the next one.
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("no free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, os.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], "corral-workspace")
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) && attempt < 16 {
			loop.Close()
			continue
		}
		if err != nil {
			loop.Close()
			return fmt.Errorf("configure %s: %w", dev, err)
		}
		// The mount holds the device; closing ours lets autoclear release it when the last mount goes.
		err = unix.Mount(dev, dir, "ext4", flags, opts)
		loop.Close()
		if err != nil {
			return fmt.Errorf("mount %s: %w", dev, err)
		}
		return nil
	}
}

// boundLoop is the loop device bound to image file img, "" if none.
func boundLoop(img string) string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		// A file deleted since (" (deleted)") is another image than the one now at img.
		if err == nil && strings.TrimSpace(string(b)) == img {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// Detach undoes one Attach of dir; the last one unmounts the image (the files stay in it).
func (v *Volumes) Detach(dir string) error {
	e := v.entry(dir)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refs == 0 {
		return nil
	}
	e.refs--
	if e.refs > 0 {
		return nil
	}
	return v.release(dir, e)
}

// release unmounts dir if this process owns its mount, and forgets the entry's state.
func (v *Volumes) release(dir string, e *entry) error {
	e.refs = 0
	e.shared, e.plain = false, false
	v.setAttached(dir, false)
	if e.lock == nil {
		return nil
	}
	err := unmount(dir)
	e.lock.Close()
	e.lock = nil
	if err != nil {
		return fmt.Errorf("workspace quota: %w", err)
	}
	return nil
}

// Remove unmounts and deletes the image of dir, whose session is gone, whoever holds it. The Pool then
// removes the directory. Idempotent.
func (v *Volumes) Remove(dir string) error {
	e := v.entry(dir)
	e.mu.Lock()
	defer e.mu.Unlock()
	err := v.release(dir, e)
	if isMount(dir) {
		err = errors.Join(err, unmount(dir))
	}
	v.mu.Lock()
	delete(v.entries, dir)
	v.mu.Unlock()
	if rerr := os.Remove(imagePath(dir)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("workspace quota: remove: %w", err)
	}
	return nil
}

// Close unmounts every image this process mounted, whatever still holds it. Idempotent.
func (v *Volumes) Close() error {
	v.mu.Lock()
	dirs := make(map[string]*entry, len(v.entries))
	for d, e := range v.entries {
		dirs[d] = e
	}
	v.mu.Unlock()
	var errs []error
	for d, e := range dirs {
		e.mu.Lock()
		errs = append(errs, v.release(d, e))
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}

// unmount unmounts dir: at once when nothing of this namespace uses it, else detached (what a sandbox still
// holds goes when the sandbox does, and autoclear then frees the loop device).
func unmount(dir string) error {
	err := unix.Unmount(dir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

// isMount reports whether dir is a mount point (its device differs from its parent's).
func isMount(dir string) bool {
	var st, pst unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &pst) != nil {
		return false
	}
	return st.Dev != pst.Dev
}

// nonEmptyDir reports whether dir is a directory with entries.
func nonEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return len(names) > 0, nil
}

// sessionOf is the session whose workspace or session directory dir is (named for the session, as the sandbox
// pool lays them out), or "" for another directory: log lines about a session carry its id.
func sessionOf(dir string) string {
	if base := filepath.Base(dir); strings.HasPrefix(base, "sesn_") {
		return base
	}
	return ""
}
