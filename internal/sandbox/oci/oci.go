// Package oci is the sandbox backend on an OCI runtime (runc, or crun where it works): one container per
// session, generated from a bundle (see WriteBundle), running the in-sandbox agent as an unprivileged uid of
// its own with no capabilities. The container is created with `runc create` (whose stdio become the agent's
// protocol pipes), limited through linux.resources in a cgroup path the provider chooses, then started; Close
// deletes it. Networking goes through a per-sandbox egress proxy socket, as for bwrap.
package oci

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/egress"
)

// Config configures the Provider.
type Config struct {
	// AgentPath is the static corral-sandbox-agent binary. Required.
	AgentPath string
	// Runtime is the OCI runtime binary; default "runc".
	Runtime string
	// RuntimeArgs are global flags put before the runtime's command (for runsc: --platform=..., --network=none).
	RuntimeArgs []string
	// Name is the backend's name; default "oci".
	Name string
	// RuntimeRoot is the runtime's state directory (--root); default /run/corral-<name>/<pid>. Containers
	// outlive a server that crashes; New deletes those left in the default roots of servers that are gone.
	RuntimeRoot string
	// StateDir holds the bundles; default <os.TempDir()>/corral-<name>/s-<random>, with a link <pid>.<n> to
	// it (the sandbox's mount table shows the path, not the server's pid), swept likewise.
	StateDir string
	// UIDBase and UIDCount are the host uids the containers run as; defaults 300000 and 10000.
	UIDBase, UIDCount int
	// NoCgroups leaves the container's cgroups to the runtime and enforces no memory, pids or CPU limits.
	NoCgroups bool
	// CgroupRoot is where cgroup v1 is mounted, to read back the limits hit; default /sys/fs/cgroup.
	CgroupRoot string
	// RuntimeTasks is how many tasks the runtime itself keeps in the container's cgroup (gVisor's sentry
	// threads, gofer and stub processes; none for runc). They are added to the pids limit, so that the
	// runtime's own threads never count against the sandbox's processes.
	RuntimeTasks int
	// AllowClone3 leaves clone3 allowed in the sandbox's seccomp profile. runsc answers a denied call with
	// EPERM whatever errno the profile gives (google/gvisor#14688), and glibc (>= 2.34) creates threads with
	// clone3 and falls back to clone only on ENOSYS, so under gVisor denying clone3 breaks every program that
	// starts a thread (git's sideband, Python threads). There a clone3 with CLONE_NEWUSER makes a user
	// namespace of gVisor's own kernel, not of the host's.
	AllowClone3 bool
	// Logger; default discards.
	Logger *slog.Logger
}

// Provider provisions OCI containers.
type Provider struct {
	cfg     Config
	runtime string
	agent   string // the agent binary staged in StateDir (stageAgent)
}

var _ sandbox.Provider = (*Provider)(nil)

// Available reports whether the runtime binary exists.
func Available(runtime string) error {
	if _, err := exec.LookPath(cmp.Or(runtime, "runc")); err != nil {
		return fmt.Errorf("oci: runtime not found: %w", err)
	}
	return nil
}

// New returns a Provider for cfg.
func New(cfg Config) (*Provider, error) {
	cfg.Runtime = cmp.Or(cfg.Runtime, "runc")
	cfg.Name = cmp.Or(cfg.Name, "oci")
	pid := strconv.Itoa(os.Getpid())
	runBase, stateBase := "/run/corral-"+cfg.Name, filepath.Join(os.TempDir(), "corral-"+cfg.Name)
	if cfg.RuntimeRoot == "" {
		cfg.RuntimeRoot = filepath.Join(runBase, pid)
	}
	// A sandbox's mount table shows the host paths of its rootfs and binds, so the default bundle directory
	// has a neutral name; a link <pid>.<n> to it says whose it is (sweep).
	linkState := cfg.StateDir == ""
	if linkState {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		cfg.StateDir = filepath.Join(stateBase, neutralPrefix+hex.EncodeToString(b))
	}
	cfg.UIDBase = cmp.Or(cfg.UIDBase, 300000)
	cfg.UIDCount = cmp.Or(cfg.UIDCount, 10000)
	cfg.CgroupRoot = cmp.Or(cfg.CgroupRoot, cgroup.DefaultRoot)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AgentPath == "" || !filepath.IsAbs(cfg.AgentPath) {
		return nil, fmt.Errorf("oci: AgentPath %q must be an absolute path", cfg.AgentPath)
	}
	if cfg.UIDBase < 1000 || cfg.UIDCount < 1 {
		return nil, fmt.Errorf("oci: uid range %d+%d is invalid", cfg.UIDBase, cfg.UIDCount)
	}
	rt, err := exec.LookPath(cfg.Runtime)
	if err != nil {
		return nil, fmt.Errorf("oci: runtime not found: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("oci: the server must run as root to run containers")
	}
	if !cfg.NoCgroups {
		if err := cgroup.Available(cfg.CgroupRoot); err != nil {
			return nil, fmt.Errorf("oci: %w (set NoCgroups to run without limits)", err)
		}
	}
	for _, d := range []string{cfg.RuntimeRoot, cfg.StateDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
	}
	if linkState {
		link := filepath.Join(stateBase, fmt.Sprintf("%s.%d", pid, providers.Add(1)))
		_ = os.Remove(link) // a link a server of the same pid left before the host rebooted
		if err := os.Symlink(filepath.Base(cfg.StateDir), link); err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
	}
	agentBin, err := stageAgent(cfg.StateDir, cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, runtime: rt, agent: agentBin}
	p.sweep(runBase, stateBase)
	return p, nil
}

// Name returns the configured name ("oci" by default).
func (p *Provider) Name() string { return p.cfg.Name }

// Tools are the in-sandbox agent's built-in tools.
func (p *Provider) Tools() []sandbox.Tool { return agent.Tools() }

// sweep deletes the containers, and removes the runtime roots and bundles, that servers which are gone left in
// the default locations.
func (p *Provider) sweep(runBase, stateBase string) {
	ents, _ := os.ReadDir(runBase)
	for _, e := range ents {
		if !deadPID(e.Name()) {
			continue
		}
		root := filepath.Join(runBase, e.Name())
		out, err := p.runtimeCmdRoot(context.Background(), root, "list", "-q").Output()
		if err != nil {
			continue // leave what cannot be listed
		}
		for _, id := range strings.Fields(string(out)) {
			_ = p.runtimeCmdRoot(context.Background(), root, "delete", "--force", id).Run()
		}
		_ = syscall.Unmount(filepath.Join(root, "null-netns"), syscall.MNT_DETACH) // runsc --network=none
		_ = os.RemoveAll(root)
	}
	// Bundles hold no host mounts: the containers' mounts live in their own namespaces. They are in the
	// directories that links <pid>.<n> of dead pids point to, in directories named <pid> (as servers before
	// the links made them), and in neutral directories no link points to that are over a minute old (a
	// server that died between making one and its link).
	ents, _ = os.ReadDir(stateBase)
	linked := map[string]bool{}
	for _, e := range ents {
		path := filepath.Join(stateBase, e.Name())
		target, lerr := os.Readlink(path)
		if lerr == nil {
			linked[target] = true
		}
		if owner, _, _ := strings.Cut(e.Name(), "."); !deadPID(owner) {
			continue
		}
		if lerr == nil {
			_ = os.Remove(path)
			if !strings.Contains(target, "/") {
				_ = os.RemoveAll(filepath.Join(stateBase, target))
			}
			continue
		}
		_ = os.RemoveAll(path)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), neutralPrefix) || linked[e.Name()] {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			_ = os.RemoveAll(filepath.Join(stateBase, e.Name()))
		}
	}
}

// stageAgent puts the agent binary into dir, a hard link where dir is on the binary's filesystem and a copy
// otherwise, and returns its path. A sandbox's mount table shows each bind's source path, and the binary may
// live in the data directory (corral serve copies itself to <data>/bin); dir's path says nothing.
func stageAgent(dir, agentPath string) (string, error) {
	dst := filepath.Join(dir, "agent")
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("oci: stage agent: %w", err)
	}
	if err := os.Link(agentPath, dst); err == nil {
		return dst, nil
	}
	in, err := os.Open(agentPath)
	if err != nil {
		return "", fmt.Errorf("oci: stage agent: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", fmt.Errorf("oci: stage agent: %w", err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("oci: stage agent: %w", err)
	}
	return dst, nil
}

// neutralPrefix starts the names of default bundle directories; the links to them are named <pid>.<n>.
const neutralPrefix = "s-"

// providers numbers the Providers of this process, for the links to their default StateDirs.
var providers atomic.Int64

// deadPID reports whether name is the pid of a process that no longer exists.
func deadPID(name string) bool {
	pid, err := strconv.Atoi(name)
	return err == nil && pid > 0 && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH
}

// runtimeCmd builds a runtime command with the global flags.
func (p *Provider) runtimeCmd(ctx context.Context, args ...string) *exec.Cmd {
	return p.runtimeCmdRoot(ctx, p.cfg.RuntimeRoot, args...)
}

func (p *Provider) runtimeCmdRoot(ctx context.Context, root string, args ...string) *exec.Cmd {
	full := append(append([]string{"--root", root}, p.cfg.RuntimeArgs...), args...)
	cmd := exec.CommandContext(ctx, p.runtime, full...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return cmd
}

// Provision creates and starts a container for r.
func (p *Provider) Provision(ctx context.Context, r *sandbox.Recipe) (_ sandbox.Sandbox, err error) {
	uid, cleanup, err := agent.Claim(r, p.cfg.UIDBase, p.cfg.UIDCount)
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	defer func() {
		if err != nil {
			cleanup.Run()
		}
	}()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "corral-" + hex.EncodeToString(b)
	dir := filepath.Join(p.cfg.StateDir, name)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	cleanup.Add(func() error { return os.RemoveAll(dir) })
	sockDir := filepath.Join(dir, "run")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if err := os.Chown(sockDir, uid, uid); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	sock := filepath.Join(sockDir, "proxy.sock")
	proxy, err := egress.Listen(egress.Config{Path: sock, UID: uid, GID: uid, Policy: egress.PolicyFor(r.Environment.Networking),
		Egress: r.Egress, Logger: p.cfg.Logger.With("sandbox", name)})
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	cleanup.Add(proxy.Close)

	limits := agent.WithDefaults(r.Limits)
	spec := BundleSpec{UID: uid, WorkspaceDir: r.WorkspaceDir, AgentPath: p.agent, ProxySocket: sock,
		Env: agent.EnvFor(r.Egress), AllowClone3: p.cfg.AllowClone3, Mounts: agent.SessionMounts(r)}
	if spec.CABundle, err = agent.CABundle(r.Egress); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	var group *cgroup.Group
	if !p.cfg.NoCgroups {
		spec.CgroupsPath = "/corral/" + name
		spec.MemoryBytes, spec.Pids, spec.CPUQuota = limits.MemoryBytes, limits.Pids+p.cfg.RuntimeTasks, limits.CPUQuota
		group = cgroup.Open(p.cfg.CgroupRoot, spec.CgroupsPath, cgroup.Limits{MemoryBytes: spec.MemoryBytes, Pids: spec.Pids, CPUQuota: spec.CPUQuota})
	}
	if err := WriteBundle(dir, spec); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	// runc create hands its stdio to the container's process and exits; the pipes then lead to the agent.
	cmd := p.runtimeCmd(context.Background(), "create", "--bundle", dir, name)
	proc, err := agent.StartProcess(cmd)
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	cleanup.Add(func() error { proc.Stop(); return nil })
	cleanup.Add(func() error {
		out, err := p.runtimeCmd(context.Background(), "delete", "--force", name).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "not exist") {
			return fmt.Errorf("oci: delete %s: %v: %s", name, err, out)
		}
		return nil
	})
	if group != nil {
		cleanup.Add(group.Remove)
	}
	select {
	case <-proc.Exited():
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-proc.Exited()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-proc.Exited()
		return nil, errors.New("oci: create timed out")
	}
	if !cmd.ProcessState.Success() {
		return nil, fmt.Errorf("oci: %s create: %v: %s", p.cfg.Runtime, cmd.ProcessState, proc.Stderr())
	}
	if out, err := p.runtimeCmd(ctx, "start", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("oci: %s start: %v: %s", p.cfg.Runtime, err, out)
	}
	p.cfg.Logger.Debug("container started", "container", name, "session", r.SessionID, "uid", uid)
	return agent.NewSandbox(proc, r.Limits, group, cleanup.Reversed()...), nil
}
