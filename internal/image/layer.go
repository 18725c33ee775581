package image

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/volume"
	"golang.org/x/sys/unix"
)

// Defaults of LayerConfig.
const (
	// DefaultGoVersion is the Go toolchain an environment with go packages gets (Debian's golang-go is 1.19,
	// too old for most modules): golang.org/toolchain from the Go module proxy, at /usr/local/go.
	DefaultGoVersion = "go1.26.8"
	// DefaultNpmVersion is the npm an environment with npm packages gets (Debian's nodejs runs it).
	DefaultNpmVersion = "10.9.2"
	// DefaultBuildTimeout bounds one layer's build (corral serve --image-build-timeout).
	DefaultBuildTimeout = 30 * time.Minute
	// DefaultBuildDiskBytes bounds what one layer's build writes (corral serve --image-build-disk).
	DefaultBuildDiskBytes = 8 << 30
	// DefaultBuildMemoryBytes and DefaultBuildPids bound a build's processes (LayerConfig.CgroupRoot).
	DefaultBuildMemoryBytes = 4 << 30
	DefaultBuildPids        = 4096
	// DefaultBuilderUID is the first of the 65536 host uids a build's user namespace maps (root inside is
	// this uid outside): apart from the sandboxes' ranges (bwrap 200000, oci 300000, worker 400000).
	DefaultBuilderUID = 500000
)

// hostCABundle is the host's CA bundle, LayerConfig.CAFile's default.
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// builderUIDs is the size of the builder's uid and gid maps.
const builderUIDs = 65536

// LayerConfig says how package layers are built.
type LayerConfig struct {
	// Dir is the image cache (the base's BaseConfig.Dir): layers go under Dir/images/<key>/rootfs. Required.
	Dir string
	// Agent is the in-sandbox agent binary, which bridges the builder's proxy socket (agent.BridgeExecArg).
	// Required.
	Agent string
	// Registries are where the managers fetch packages (nil: the defaults); the builder may reach their hosts
	// and nothing else.
	Registries *Registries
	// Suite is the base's Debian release, for an apt mirror's sources.list (default DefaultSuite).
	Suite string
	// GoVersion is the Go toolchain of environments with go packages (default DefaultGoVersion).
	GoVersion string
	// NpmVersion is the npm of environments with npm packages, from the npm registry, run by Debian's nodejs
	// (default DefaultNpmVersion).
	NpmVersion string
	// CAFile is the CA bundle (PEM, a host file) the builder's clients trust: default the host's
	// /etc/ssl/certs/ca-certificates.crt when it exists (the roots the server trusts, the operator's own CAs
	// included), else the base's own.
	CAFile string
	// Timeout and DiskBytes bound a build (defaults DefaultBuildTimeout, DefaultBuildDiskBytes). The disk
	// limit needs loop devices and mkfs.ext4 (a build's writes go to an image of that size); without them a
	// build runs unbounded in disk, and the log says so.
	Timeout   time.Duration
	DiskBytes int64
	// CgroupRoot, if set, is where the cgroup v1 hierarchies are mounted (cgroup.DefaultRoot): each build then
	// runs in a group of its own limited to MemoryBytes and Pids (defaults DefaultBuildMemoryBytes,
	// DefaultBuildPids), so that a package's scripts cannot take the host's memory or processes. Empty: a build
	// has its time and disk limits only.
	CgroupRoot  string
	MemoryBytes int64
	Pids        int
	// AllowInternal are host:port pairs of registries on internal addresses the builder may reach (the
	// operator's --egress-allow-internal; tests' local indexes).
	AllowInternal []string
	// Bwrap is the bubblewrap binary (default "bwrap" on PATH).
	Bwrap string
	// BuilderUID is the first host uid of the builder's user namespace (default DefaultBuilderUID).
	BuilderUID int
	// Log receives the builds' output at debug level and their start and end at info.
	Log *slog.Logger
}

func (c *LayerConfig) defaults() error {
	if c.Dir == "" || c.Agent == "" {
		return errors.New("image: LayerConfig.Dir and Agent are required")
	}
	if c.Registries == nil {
		c.Registries = &Registries{}
	}
	c.Suite = cmp.Or(c.Suite, DefaultSuite)
	c.GoVersion = cmp.Or(c.GoVersion, DefaultGoVersion)
	c.NpmVersion = cmp.Or(c.NpmVersion, DefaultNpmVersion)
	if c.CAFile == "" {
		if fi, err := os.Stat(hostCABundle); err == nil && fi.Mode().IsRegular() {
			c.CAFile = hostCABundle
		}
	}
	c.Timeout = cmp.Or(c.Timeout, DefaultBuildTimeout)
	c.DiskBytes = cmp.Or(c.DiskBytes, DefaultBuildDiskBytes)
	c.MemoryBytes = cmp.Or(c.MemoryBytes, DefaultBuildMemoryBytes)
	c.Pids = cmp.Or(c.Pids, DefaultBuildPids)
	c.Bwrap = cmp.Or(c.Bwrap, "bwrap")
	c.BuilderUID = cmp.Or(c.BuilderUID, DefaultBuilderUID)
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Layer is a built image: a base with an environment's packages, flattened into one read-only tree.
type Layer struct {
	Key    string
	RootFS string
}

// LayerKey is the key of the layer of l on the base baseID as c builds it (Key with c's toolchain versions).
func LayerKey(c LayerConfig, baseID string, l List) string {
	c.GoVersion = cmp.Or(c.GoVersion, DefaultGoVersion)
	c.NpmVersion = cmp.Or(c.NpmVersion, DefaultNpmVersion)
	return l.Key(baseID, c.GoVersion, c.NpmVersion)
}

// LayerDir is the directory of the layer key in the cache dir (its rootfs and done marker).
func LayerDir(dir, key string) string { return filepath.Join(dir, "images", key) }

// Built reports whether the cache dir holds the complete layer key.
func Built(dir, key string) bool { return done(LayerDir(dir, key)) }

// EnsureLayer returns the layer of list l on base, building it first if the cache does not hold it. The build
// runs in a sandbox (bubblewrap, in a user namespace whose root is an unprivileged host uid, no network but a
// proxy that reaches the registries of l's managers only) on an overlay of the base; its upper directory is
// flattened with the base's files (hard links) into a temporary tree renamed into place, under a lock file, so
// concurrent callers build it once and nothing half-built is ever returned. A failure is a *BuildError naming
// the package.
func EnsureLayer(ctx context.Context, c LayerConfig, base Base, l List) (Layer, error) {
	if err := c.defaults(); err != nil {
		return Layer{}, err
	}
	if err := l.Validate(); err != nil {
		return Layer{}, err
	}
	key := l.Key(base.ID, c.GoVersion, c.NpmVersion)
	final := LayerDir(c.Dir, key)
	layer := Layer{Key: key, RootFS: filepath.Join(final, "rootfs")}
	if done(final) {
		return layer, nil
	}
	images := filepath.Join(c.Dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		return Layer{}, fmt.Errorf("image: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(images, key+".lock"))
	if err != nil {
		return Layer{}, err
	}
	defer unlock()
	if done(final) {
		return layer, nil
	}
	start := time.Now()
	c.Log.Info("building an image", "key", key, "base", base.ID, "packages", l.String())
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if err := build(ctx, c, base, l, key, final); err != nil {
		c.Log.Warn("image build failed", "key", key, "err", err)
		return Layer{}, err
	}
	c.Log.Info("built an image", "key", key, "took", time.Since(start).Round(time.Millisecond))
	return layer, nil
}

// String is the list as one line, manager by manager.
func (l List) String() string {
	var parts []string
	for _, m := range l.Managers() {
		parts = append(parts, m+": "+strings.Join(l[m], " "))
	}
	return strings.Join(parts, "; ")
}

// build builds layer key into final.
func build(ctx context.Context, c LayerConfig, base Base, l List, key, final string) error {
	lower, err := builderBase(ctx, c, base)
	if err != nil {
		return &BuildError{Message: err.Error()}
	}
	images := filepath.Join(c.Dir, "images")
	tmp, err := os.MkdirTemp(images, ".build-"+key+"-")
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	// The build's writes: a volume of DiskBytes when volumes work here, else a directory.
	scratch := filepath.Join(c.Dir, "builds", filepath.Base(tmp))
	if err := os.MkdirAll(filepath.Dir(scratch), 0o711); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	vols, verr := buildVolumes(c)
	if verr == nil {
		if err := vols.Attach(ctx, scratch); err != nil {
			return &BuildError{Message: fmt.Sprintf("the build's disk (%d MiB): %v", c.DiskBytes>>20, err)}
		}
	} else {
		c.Log.Warn("image build without a disk limit", "reason", verr)
		if err := os.Mkdir(scratch, 0o700); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	}
	defer func() {
		if verr == nil {
			_ = vols.Remove(scratch)
		}
		_ = os.RemoveAll(scratch)
	}()
	upper, work := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	}
	if err := os.Lchown(upper, c.BuilderUID, c.BuilderUID); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	st, err := newStage(c, key)
	if err != nil {
		return &BuildError{Message: fmt.Sprintf("the builder's staging directory: %v", err)}
	}
	defer st.remove()
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + ",redirect_dir=off,index=off,metacopy=off,xino=off"
	if err := syscall.Mount("overlay", st.root(), "overlay", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return &BuildError{Message: fmt.Sprintf("overlay mount: %v", err)}
	}
	if err := runBuild(ctx, c, l, st); err != nil {
		return err
	}
	if err := syscall.Unmount(st.root(), 0); err != nil {
		return fmt.Errorf("image: unmount the build's overlay: %w", err)
	}
	root := filepath.Join(tmp, "rootfs")
	if err := flatten(base.RootFS, upper, root, c.BuilderUID, c.DiskBytes); err != nil {
		return &BuildError{Message: fmt.Sprintf("storing the layer: %v", err)}
	}
	manifest, _ := json.MarshalIndent(map[string]any{"key": key, "base": base.ID, "go": c.GoVersion, "packages": l}, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "packages.json"), append(manifest, '\n'), 0o644); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "done"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	_ = os.RemoveAll(final) // a leftover without its done marker
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

var (
	volsMu sync.Mutex
	vols   = map[string]*volume.Volumes{}
)

// buildVolumes are the disk-limited volumes of the builds under c.Dir/builds (one per cache dir and size).
func buildVolumes(c LayerConfig) (*volume.Volumes, error) {
	volsMu.Lock()
	defer volsMu.Unlock()
	k := fmt.Sprintf("%s\x00%d", c.Dir, c.DiskBytes)
	if v := vols[k]; v != nil {
		return v, nil
	}
	sweepStages(c.CgroupRoot) // before the volumes' sweep: their stale overlays hold the volumes' mounts
	if err := volume.Available(""); err != nil {
		return nil, err
	}
	v, err := volume.New(volume.Config{Root: filepath.Join(c.Dir, "builds"), SizeBytes: c.DiskBytes,
		Inodes: max(c.DiskBytes/8192, 65536), ReserveBytes: -1, Logger: c.Log})
	if err != nil {
		return nil, err
	}
	vols[k] = v
	return v, nil
}

// StageRoot holds the builders' staging directories (stage), on a path every uid may traverse.
var StageRoot = "/run/corral-image-builds"

// stage is one build's staging directory, StageRoot/<key>-<random>, mode 0711: the overlay the builder runs on
// (root), the agent (a bind mount of LayerConfig.Agent), the proxy's directory (run, the builder's) and the CA
// bundle, where the builder's root (an unprivileged host uid) reaches them whatever the modes of the
// directories that hold the cache and the agent. A lock file, held while the build runs, tells a live stage
// from one a killed server left (sweepStages).
type stage struct {
	dir  string
	lock *os.File
}

func newStage(c LayerConfig, key string) (*stage, error) {
	sweepStages(c.CgroupRoot)
	if err := os.MkdirAll(StageRoot, 0o711); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(StageRoot, key+"-")
	if err != nil {
		return nil, err
	}
	st := &stage{dir: dir}
	fail := func(err error) (*stage, error) { st.remove(); return nil, err }
	// The lock file takes its name only once it is locked: a sweep (another server's, or another build's) that
	// found it unlocked would remove the stage being made.
	if st.lock, err = os.OpenFile(filepath.Join(dir, "lock.new"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		return fail(err)
	}
	if err := syscall.Flock(int(st.lock.Fd()), syscall.LOCK_EX); err != nil {
		return fail(err)
	}
	if err := os.Rename(filepath.Join(dir, "lock.new"), filepath.Join(dir, "lock")); err != nil {
		return fail(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fail(err)
	}
	for _, d := range []string{st.root(), st.run()} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(st.root(), 0o755); err != nil {
		return fail(err)
	}
	if err := os.Lchown(st.run(), c.BuilderUID, c.BuilderUID); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(st.agent(), nil, 0o500); err != nil {
		return fail(err)
	}
	if err := syscall.Mount(c.Agent, st.agent(), "", syscall.MS_BIND, ""); err != nil {
		return fail(fmt.Errorf("bind the agent: %w", err))
	}
	_ = syscall.Mount("", st.agent(), "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, "")
	if c.CAFile != "" {
		ca, err := os.ReadFile(c.CAFile)
		if err != nil {
			return fail(fmt.Errorf("the CA bundle: %w", err))
		}
		if err := os.WriteFile(st.ca(), ca, 0o444); err != nil {
			return fail(err)
		}
	}
	return st, nil
}

// buildGroup is the name of the cgroup of the build staged in dir.
func buildGroup(dir string) string { return "build-" + filepath.Base(dir) }

func (st *stage) root() string  { return filepath.Join(st.dir, "root") }
func (st *stage) run() string   { return filepath.Join(st.dir, "run") }
func (st *stage) agent() string { return filepath.Join(st.dir, "agent") }
func (st *stage) ca() string    { return filepath.Join(st.dir, "ca.pem") }

// remove unmounts what the stage holds and removes it.
func (st *stage) remove() {
	_ = syscall.Unmount(st.root(), syscall.MNT_DETACH)
	_ = syscall.Unmount(st.agent(), syscall.MNT_DETACH)
	_ = os.RemoveAll(st.dir)
	if st.lock != nil {
		st.lock.Close()
	}
}

// sweepStages removes the stages of builds whose process is gone (their lock is free): a server killed
// mid-build leaves their mounts. The build volumes under them are volume.New's to sweep.
func sweepStages(cgroupRoot string) {
	entries, _ := os.ReadDir(StageRoot)
	for _, e := range entries {
		dir := filepath.Join(StageRoot, e.Name())
		f, err := os.Open(filepath.Join(dir, "lock")) // no lock file yet: a stage being made
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if cgroupRoot != "" { // the dead build's group, and whatever still runs in it
				if g, err := cgroup.Existing(cgroupRoot, buildGroup(dir)); err == nil {
					g.Kill()
					_ = g.Remove()
				}
			}
			(&stage{dir: dir}).remove()
		}
		f.Close()
	}
}

// builderBase returns the copy of base the builds use as their overlay's lower layer: the same tree owned by
// the builder's uids (uid n of the base is BuilderUID+n), so that root in the builder's user namespace owns
// what root owns in the base. Made once per base and builder uid, under a lock.
func builderBase(ctx context.Context, c LayerConfig, base Base) (string, error) {
	dir := filepath.Join(c.Dir, "builder", fmt.Sprintf("%s-%d", base.ID, c.BuilderUID))
	root := filepath.Join(dir, "rootfs")
	if done(dir) {
		return root, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", err
	}
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if done(dir) {
		return root, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".copy-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", base.RootFS, filepath.Join(tmp, "rootfs")).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("copy the base for the builder: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if err := shift(filepath.Join(tmp, "rootfs"), c.BuilderUID); err != nil {
		return "", fmt.Errorf("the builder's base: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "done"), nil, 0o644); err != nil {
		return "", err
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return root, nil
}

// shift adds by to the owner and group of every file under root, keeping the modes (a chown clears set-id
// bits).
func shift(root string, by int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if int(st.Uid) >= by {
			return nil
		}
		if err := os.Lchown(p, int(st.Uid)+by, int(st.Gid)+by); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			return unix.Chmod(p, st.Mode&0o7777)
		}
		return nil
	})
}

// goArch is the toolchain's architecture name.
var goArch = runtime.GOARCH

// tail returns the last n bytes of s, from a line start where possible.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return s
}

var _ io.Writer = (*tailWriter)(nil)
