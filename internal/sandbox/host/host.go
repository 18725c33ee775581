package host

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
)

// CheckSearchable reports an error unless every ancestor of path can be searched by any uid.
func CheckSearchable(path string) error {
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by the sandbox uid (mode %v); make it 0711 or wider", d, fi.Mode().Perm())
		}
		if d == "/" {
			return nil
		}
	}
}

// EtcFiles are the host /etc entries bound read-only into a sandbox: enough for the dynamic loader, user and
// host lookups, TLS roots and time zones. Nothing else of /etc is visible.
var EtcFiles = []string{"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group",
	"nsswitch.conf", "hosts", "ssl", "ca-certificates", "localtime", "mime.types"}

// SandboxEnv is the whole environment a sandbox starts with: nothing of the server's.
func SandboxEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + agent.Workspace,
		"USER=user",
		"LANG=C.UTF-8",
		"TERM=dumb",
		"TMPDIR=/tmp",
	}
}

// PrepareWorkspace makes dir (created 0700 if missing) belong to uid:uid, every entry beneath it too, so that
// a sandbox under a new uid can use the workspace a previous one left. Symlinks are re-owned, not followed.
func PrepareWorkspace(dir string, uid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("workspace: %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == uid {
		return nil
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, uid)
	})
	if err != nil {
		return fmt.Errorf("workspace: chown: %w", err)
	}
	return os.Chmod(dir, 0o700)
}

// Undo is the teardown of a sandbox being built, one step per resource it took. Run undoes them, newest
// first, when provisioning fails; Reversed gives them newest first to the Sandbox's Close when it succeeds.
type Undo []func() error

// Add records a step.
func (u *Undo) Add(f func() error) { *u = append(*u, f) }

// Reversed returns the steps newest first.
func (u Undo) Reversed() []func() error {
	out := make([]func() error, len(u))
	for i, f := range u {
		out[len(u)-1-i] = f
	}
	return out
}

// Run runs the steps newest first, ignoring their errors: it cleans up after a failure.
func (u Undo) Run() {
	for _, f := range u.Reversed() {
		_ = f()
	}
}

// OwnerGone reports whether the process that made something at time made (a state directory's link named for
// its pid) is gone: no process has that pid, or the one that has it started after made, so the pid was reused
// (a server restarted in a container often gets the pid its killed predecessor had). It never reports a live
// owner gone; a pid reused within a second or two of made looks alive.
func OwnerGone(pid int, made time.Time) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return true
	}
	started, ok := processStart(pid)
	return ok && started.After(made.Add(2*time.Second))
}

// processStart reads when pid started, from /proc/<pid>/stat (clock ticks since boot, at the usual 100 Hz) and
// the boot time in /proc/stat.
func processStart(pid int) (time.Time, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return time.Time{}, false
	}
	// The command name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64) // field 22, starttime
	if err != nil {
		return time.Time{}, false
	}
	sys, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(sys), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(boot, 0).Add(time.Duration(ticks) * 10 * time.Millisecond), true
		}
	}
	return time.Time{}, false
}

// ReplaceLink makes link a symlink to target, replacing whatever a process of the same pid left there (a server
// killed before this one got its pid): a stale link must not make a backend unavailable.
func ReplaceLink(target, link string) error {
	var err error
	for range 3 {
		if err = os.Symlink(target, link); !errors.Is(err, fs.ErrExist) {
			return err
		}
		if rerr := os.Remove(link); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return rerr
		}
	}
	return err
}

// RemovePaths removes each path (a file, a link or an empty directory); one that does not exist is no error.
func RemovePaths(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PrepareSessionDir makes dirs' session directory ready to bind for r's sandbox (nothing without one):
// uploads and skills belong to the host (0755, the placed files 0444: the sandbox reads, never writes, them),
// outputs to uid. Of r's memory stores (Recipe.MemoryDirs), a read_write one's directory belongs to uid like the
// outputs, a read_only one's to the host (the placement writes it 0755 and 0444 and it is bound read-only).
func PrepareSessionDir(r *sandbox.Recipe, dirs sandbox.HostDirs, uid int) error {
	if dirs.Session == "" {
		return nil
	}
	if !filepath.IsAbs(dirs.Session) {
		return fmt.Errorf("session directory %q must be an absolute path", dirs.Session)
	}
	mems, _ := r.MemoryDirs()
	mk := []string{dirs.Uploads(), dirs.Skills()}
	if len(mems) > 0 {
		mk = append(mk, dirs.Memory())
	}
	for _, d := range mk {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("session directory: %w", err)
		}
	}
	if err := os.Chmod(dirs.Session, 0o711); err != nil {
		return fmt.Errorf("session directory: %w", err)
	}
	for _, m := range mems {
		d := filepath.Join(dirs.Memory(), m.Name)
		if m.ReadOnly {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("memory store directory: %w", err)
			}
			continue
		}
		if err := PrepareWorkspace(d, uid); err != nil {
			return fmt.Errorf("memory store directory: %w", err)
		}
	}
	return PrepareWorkspace(dirs.Outputs(), uid)
}

// Mount is a bind of a host directory into a sandbox.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// SessionMounts are the binds of dirs' session directory for r's sandbox (none without one): uploads read-only
// at sandbox.UploadsMount, outputs read-write at sandbox.OutputsMount, skills read-only at sandbox.SkillsMount,
// and each memory store of r (Recipe.MemoryDirs) at its mount path, read-only if its access is read_only.
func SessionMounts(r *sandbox.Recipe, dirs sandbox.HostDirs) []Mount {
	if dirs.Session == "" {
		return nil
	}
	ms := []Mount{
		{Source: dirs.Uploads(), Target: sandbox.UploadsMount, ReadOnly: true},
		{Source: dirs.Outputs(), Target: sandbox.OutputsMount},
		{Source: dirs.Skills(), Target: sandbox.SkillsMount, ReadOnly: true},
	}
	mems, _ := r.MemoryDirs()
	for _, m := range mems {
		ms = append(ms, Mount{Source: filepath.Join(dirs.Memory(), m.Name), Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return ms
}

// StagedAgent is the name of the agent binary's copy in a provider's state directory (StageAgent).
const StagedAgent = "agent"

// StageAgent puts the agent binary into dir, a hard link where dir is on the binary's filesystem and a copy
// otherwise, and returns its path. A sandbox's mount table shows each bind's source path, and the binary may
// live in the data directory (corral serve copies itself to <data>/bin); dir's path says nothing.
func StageAgent(dir, agentPath string) (string, error) {
	dst := filepath.Join(dir, StagedAgent)
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("stage agent: %w", err)
	}
	if err := os.Link(agentPath, dst); err == nil {
		return dst, nil
	}
	in, err := os.Open(agentPath)
	if err != nil {
		return "", fmt.Errorf("stage agent: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", fmt.Errorf("stage agent: %w", err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("stage agent: %w", err)
	}
	return dst, nil
}
