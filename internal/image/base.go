// Package image builds the root filesystems sandboxes run on: a minimal Debian base, made once per server from
// Debian's packages and shared read-only by every sandbox, and (next) the environments' package layers on it.
package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultInclude are the packages the base adds to debootstrap's minbase: the usual tools an agent expects.
var DefaultInclude = []string{"bash", "ca-certificates", "coreutils", "curl", "git", "python3"}

// Defaults of BaseConfig.
const (
	DefaultSuite  = "bookworm"
	DefaultMirror = "http://deb.debian.org/debian"
)

// BaseConfig says which base to build and where.
type BaseConfig struct {
	// Dir is the image cache: the base is built under Dir/base/<id>/rootfs. Required.
	Dir string
	// Suite, Mirror and Include pick the Debian release, the mirror and the packages added to minbase
	// (defaults: DefaultSuite, DefaultMirror, DefaultInclude).
	Suite   string
	Mirror  string
	Include []string
	// Debootstrap is the debootstrap binary (default: "debootstrap" on PATH).
	Debootstrap string
	// Log receives debootstrap's output line by line at debug level, and the build's start, its progress
	// (every Progress) and its end at info.
	Log *slog.Logger
	// Progress is how often a build in progress logs "still building the base image" with the time it has
	// taken and debootstrap's last step (default DefaultBaseProgress; negative: never).
	Progress time.Duration
}

// DefaultBaseProgress is how often a base build logs its progress (BaseConfig.Progress): a first start builds
// it for one to five minutes, and sandboxes wait for it meanwhile.
const DefaultBaseProgress = 15 * time.Second

func (c *BaseConfig) defaults() error {
	if c.Dir == "" {
		return errors.New("image: BaseConfig.Dir is required")
	}
	if c.Suite == "" {
		c.Suite = DefaultSuite
	}
	if c.Mirror == "" {
		c.Mirror = DefaultMirror
	}
	if len(c.Include) == 0 {
		c.Include = DefaultInclude
	}
	if c.Debootstrap == "" {
		c.Debootstrap = "debootstrap"
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Progress == 0 {
		c.Progress = DefaultBaseProgress
	}
	return nil
}

// BaseID is the content address of the base c describes: a hash of the release, the mirror and the sorted
// package list. Two servers with the same settings build the same base id.
func BaseID(c BaseConfig) (string, error) {
	if err := c.defaults(); err != nil {
		return "", err
	}
	inc := slices.Clone(c.Include)
	slices.Sort(inc)
	inc = slices.Compact(inc)
	h := sha256.New()
	fmt.Fprintf(h, "corral-base/v1\x00debootstrap\x00minbase\x00%s\x00%s\x00%s", c.Suite, c.Mirror, strings.Join(inc, ","))
	return "base-" + hex.EncodeToString(h.Sum(nil))[:24], nil
}

// Base is a built base root filesystem.
type Base struct {
	ID     string
	RootFS string // the read-only root directory
}

// ErrNoDebootstrap means debootstrap is not installed.
var ErrNoDebootstrap = errors.New("debootstrap is not installed: apt-get install debootstrap")

// EnsureBase returns the base c describes, building it first if the cache does not hold it. A build happens in
// a temporary directory renamed into place when complete, under a lock file, so concurrent callers (in this
// process or others sharing Dir) build it once and nothing half-built is ever returned.
func EnsureBase(ctx context.Context, c BaseConfig) (Base, error) {
	id, err := BaseID(c)
	if err != nil {
		return Base{}, err
	}
	_ = c.defaults()
	final := filepath.Join(c.Dir, "base", id)
	b := Base{ID: id, RootFS: filepath.Join(final, "rootfs")}
	if done(final) {
		return b, nil
	}
	if _, err := exec.LookPath(c.Debootstrap); err != nil {
		return Base{}, fmt.Errorf("image: %w (%v)", ErrNoDebootstrap, err)
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "base"), 0o755); err != nil {
		return Base{}, fmt.Errorf("image: %w", err)
	}
	lock := filepath.Join(c.Dir, "base", id+".lock")
	unlock, ok := tryLock(lock)
	if !ok {
		c.Log.Info("waiting for the base image another process sharing the image cache is building", "id", id, "dir", c.Dir)
		if unlock, err = lockFile(ctx, lock); err != nil {
			return Base{}, err
		}
	}
	defer unlock()
	if done(final) { // built by whoever held the lock before us
		return b, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(c.Dir, "base"), ".build-"+id+"-")
	if err != nil {
		return Base{}, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Base{}, fmt.Errorf("image: %w", err)
	}
	start := time.Now()
	c.Log.Info("building the base image (once per image cache, a few minutes): sandboxes wait for it", "id", id,
		"suite", c.Suite, "mirror", c.Mirror, "include", strings.Join(c.Include, ","), "dir", c.Dir)
	root := filepath.Join(tmp, "rootfs")
	step := &stepWriter{}
	stop := progress(c, id, start, step)
	err = debootstrap(ctx, c, root, step)
	stop()
	if err != nil {
		c.Log.Error("the base image build failed", "id", id, "took", time.Since(start).Round(time.Millisecond), "step", step.String())
		return Base{}, err
	}
	if err := trim(root); err != nil {
		return Base{}, fmt.Errorf("image: trim the base: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "done"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return Base{}, fmt.Errorf("image: %w", err)
	}
	_ = os.RemoveAll(final) // a leftover without its done marker
	if err := os.Rename(tmp, final); err != nil {
		return Base{}, fmt.Errorf("image: %w", err)
	}
	c.Log.Info("built the base image", "id", id, "took", time.Since(start).Round(time.Millisecond))
	return b, nil
}

// done reports whether dir holds a complete build (its done marker is written last, before the rename).
func done(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "done"))
	return err == nil
}

// progress logs, every c.Progress until stop is called, that the base id is still being built, for how long,
// and at which step.
func progress(c BaseConfig, id string, start time.Time, step *stepWriter) (stop func()) {
	if c.Progress < 0 {
		return func() {}
	}
	quit := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(c.Progress)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				c.Log.Info("still building the base image", "id", id, "elapsed", time.Since(start).Round(time.Second), "step", step.String())
			}
		}
	}()
	return func() { close(quit); <-ended }
}

// debootstrap runs debootstrap into root; its output goes to the log and to step, and its last lines into the
// error.
func debootstrap(ctx context.Context, c BaseConfig, root string, step *stepWriter) error {
	args := []string{"--variant=minbase", "--include=" + strings.Join(c.Include, ","), c.Suite, root, c.Mirror}
	cmd := exec.CommandContext(ctx, c.Debootstrap, args...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}
	tail := &tailWriter{max: 4096}
	cmd.Stdout = io.MultiWriter(tail, step, logWriter{c.Log})
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("image: debootstrap %s: %w", c.Suite, ctx.Err())
		}
		return fmt.Errorf("image: debootstrap %s from %s: %v: %s", c.Suite, c.Mirror, err, strings.TrimSpace(tail.String()))
	}
	return nil
}

// trim removes what a base must not carry: downloaded archives, apt lists, logs, the build host's resolv.conf
// and hostname.
func trim(root string) error {
	for _, glob := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*", "var/log/*.log", "var/log/apt/*"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			return err
		}
		for _, p := range m {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
	}
	for _, f := range []string{"etc/resolv.conf", "etc/hostname"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// lockFile takes an exclusive flock on path, waiting for it (and giving up when ctx ends).
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("image: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("image: waiting for the build lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return string(t.b) }

// stepWriter keeps the last complete line of debootstrap's output that names a step ("I: Retrieving
// Packages", "I: Extracting bash..."), without its "I: " prefix; safe for concurrent use.
type stepWriter struct {
	mu      sync.Mutex
	partial []byte
	last    string
}

func (w *stepWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
		if s, ok := strings.CutPrefix(line, "I: "); ok && s != "" {
			w.last = s
		}
	}
	if len(w.partial) > 4096 { // a line that never ends: not a step
		w.partial = w.partial[:0]
	}
	return len(p), nil
}

func (w *stepWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// logWriter sends each write (a line or a few, as a child flushes them) to the log at debug level.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Debug("image build", "output", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
