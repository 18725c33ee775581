// Package bwrap is the default sandbox backend on Linux: one bubblewrap sandbox per session, running the
// in-sandbox agent. The form follows docs/research (sandbox-lab.md): bwrap runs as an unprivileged host uid of
// its own (never root: root-run bwrap keeps capabilities or host kuid 0), in new user (no nested ones), pid,
// mount, network, ipc, uts and cgroup namespaces, with a read-only /usr, a minimal /etc (never /etc/shadow), /workspace bound
// read-write, a private /tmp, no capabilities, and an environment that holds only the sandbox's variables
// (bwrap's pid 1 keeps its caller's environment, readable at /proc/1/environ). bwrap's arguments travel on a
// pipe (--args), so /proc/1/cmdline shows no host path. Processes die with the server (--die-with-parent).
// Limits are cgroup v1 groups the sandbox is put into before the agent starts (--block-fd). Networking goes
// through a per-sandbox egress proxy on a Unix socket; the sandbox has no network of its own.
package bwrap

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/egress"
)

// Config configures the Provider.
type Config struct {
	// AgentPath is the host path of the static corral-sandbox-agent binary. Required.
	AgentPath string
	// BwrapPath is the bubblewrap binary; default "bwrap" on PATH.
	BwrapPath string
	// UIDBase and UIDCount are the range of host uids (and gids) sandboxes run as, one per live sandbox. They
	// must belong to no host user. Defaults: 200000 and 10000.
	UIDBase, UIDCount int
	// StateDir holds per-sandbox runtime files (the egress proxy's socket). It is created 0711. Default: a
	// directory under os.TempDir().
	StateDir string
	// CgroupRoot is where the cgroup v1 hierarchies are mounted; default /sys/fs/cgroup. With NoCgroups set
	// no limits are enforced (MemoryBytes, Pids and CPUQuota are ignored).
	CgroupRoot string
	NoCgroups  bool
	// Logger receives the sandboxes' lifecycle; default discards.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.AgentPath == "" {
		return errors.New("bwrap: AgentPath is required")
	}
	if !filepath.IsAbs(c.AgentPath) {
		return fmt.Errorf("bwrap: AgentPath %q must be absolute", c.AgentPath)
	}
	if c.UIDBase < 1000 || c.UIDCount < 1 {
		return fmt.Errorf("bwrap: uid range %d+%d is invalid", c.UIDBase, c.UIDCount)
	}
	return nil
}

// Provider provisions bubblewrap sandboxes.
type Provider struct {
	cfg   Config
	bwrap string
}

var _ sandbox.Provider = (*Provider)(nil)

// Available reports whether bubblewrap can be found (bwrapPath, or "bwrap" on PATH).
func Available(bwrapPath string) error {
	if _, err := exec.LookPath(cmp.Or(bwrapPath, "bwrap")); err != nil {
		return fmt.Errorf("bwrap: bubblewrap not found: %w", err)
	}
	return nil
}

// New returns a Provider for cfg.
func New(cfg Config) (*Provider, error) {
	cfg.BwrapPath = cmp.Or(cfg.BwrapPath, "bwrap")
	cfg.UIDBase = cmp.Or(cfg.UIDBase, 200000)
	cfg.UIDCount = cmp.Or(cfg.UIDCount, 10000)
	cfg.CgroupRoot = cmp.Or(cfg.CgroupRoot, cgroup.DefaultRoot)
	cfg.StateDir = cmp.Or(cfg.StateDir, filepath.Join(os.TempDir(), fmt.Sprintf("corral-bwrap-%d", os.Getpid())))
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	bw, err := exec.LookPath(cfg.BwrapPath)
	if err != nil {
		return nil, fmt.Errorf("bwrap: bubblewrap not found: %w", err)
	}
	if fi, err := os.Stat(cfg.AgentPath); err != nil {
		return nil, fmt.Errorf("bwrap: agent binary: %w", err)
	} else if fi.Mode().Perm()&0o005 != 0o005 {
		return nil, fmt.Errorf("bwrap: agent binary %s must be readable and executable by others (mode %v)", cfg.AgentPath, fi.Mode().Perm())
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("bwrap: the server must run as root to start sandboxes under their own uids")
	}
	if !cfg.NoCgroups {
		if err := cgroup.Available(cfg.CgroupRoot); err != nil {
			return nil, fmt.Errorf("bwrap: %w (set NoCgroups to run without limits)", err)
		}
	}
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	// bwrap resolves the bind sources (the proxy socket under StateDir, the agent) as the sandbox uid.
	for _, path := range []string{filepath.Join(cfg.StateDir, "x"), cfg.AgentPath} {
		if err := agent.CheckSearchable(path); err != nil {
			return nil, fmt.Errorf("bwrap: %w", err)
		}
	}
	return &Provider{cfg: cfg, bwrap: bw}, nil
}

// Name returns "bwrap".
func (p *Provider) Name() string { return "bwrap" }

// Provision starts a sandbox for r and returns once its agent is running.
func (p *Provider) Provision(ctx context.Context, r *sandbox.Recipe) (_ sandbox.Sandbox, err error) {
	if r.WorkspaceDir == "" || !filepath.IsAbs(r.WorkspaceDir) {
		return nil, fmt.Errorf("bwrap: workspace %q must be an absolute path", r.WorkspaceDir)
	}
	uid, err := agent.AllocUID(p.cfg.UIDBase, p.cfg.UIDCount, r.SessionID)
	if err != nil {
		return nil, err
	}
	var cleanup []func() error
	cleanup = append(cleanup, func() error { agent.FreeUID(uid); return nil })
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				_ = cleanup[i]()
			}
		}
	}()
	if err := agent.PrepareWorkspace(r.WorkspaceDir, uid, true); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	name := "bwrap-" + randomID()
	args := p.baseArgs(r)

	// Networking: a proxy of the sandbox's own, on a socket only the sandbox uid can connect to.
	stateDir := filepath.Join(p.cfg.StateDir, name)
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	cleanup = append(cleanup, func() error { return os.RemoveAll(stateDir) })
	if err := os.Chown(stateDir, uid, uid); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	sock := filepath.Join(stateDir, "proxy.sock")
	proxy, err := egress.Listen(sock, uid, uid, egress.PolicyFor(r.Environment.Networking), p.cfg.Logger.With("sandbox", name))
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cleanup = append(cleanup, proxy.Close)
	args = append(args, "--ro-bind", sock, agent.ProxySocketPath)

	var group *cgroup.Group
	limits := agent.WithDefaults(r.Limits)
	if !p.cfg.NoCgroups {
		group, err = cgroup.New(p.cfg.CgroupRoot, name, cgroup.Limits{MemoryBytes: limits.MemoryBytes, Pids: limits.Pids, CPUQuota: limits.CPUQuota})
		if err != nil {
			return nil, fmt.Errorf("bwrap: %w", err)
		}
		cleanup = append(cleanup, group.Remove)
	}

	argsR, argsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	defer argsR.Close()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		argsW.Close()
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	defer infoR.Close()
	blockR, blockW, err := os.Pipe()
	if err != nil {
		argsW.Close()
		infoW.Close()
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	defer blockW.Close()
	// fds in the child: 3 = args, 4 = info, 5 = block.
	args = append(args, "--info-fd", "4", "--block-fd", "5")
	var argv bytes.Buffer
	for _, a := range args {
		argv.WriteString(a)
		argv.WriteByte(0)
	}
	// The arguments are far below a pipe's capacity, so writing them before bwrap starts cannot block.
	_, werr := argsW.Write(argv.Bytes())
	argsW.Close()
	if werr != nil {
		infoW.Close()
		blockR.Close()
		return nil, fmt.Errorf("bwrap: write args: %w", werr)
	}

	// Options come from the pipe; bwrap takes the command from its own argv.
	cmd := exec.Command(p.bwrap, "--args", "3", "--", agent.BinPath)
	cmd.Env = agent.SandboxEnv()
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{argsR, infoW, blockR}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
		Setpgid:    true,
	}
	proc, err := agent.StartProcess(cmd)
	infoW.Close()
	blockR.Close()
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cleanup = append(cleanup, func() error { proc.Stop(); return nil })
	childPID, err := readChildPID(ctx, infoR, proc)
	if err != nil {
		return nil, fmt.Errorf("bwrap: sandbox did not start: %w", err)
	}
	if group != nil {
		if err := group.Add(childPID); err != nil {
			return nil, fmt.Errorf("bwrap: %w", err)
		}
	}
	if _, err := blockW.Write([]byte{1}); err != nil {
		return nil, fmt.Errorf("bwrap: start agent: %w", err)
	}
	blockW.Close()
	p.cfg.Logger.Debug("sandbox started", "sandbox", name, "session", r.SessionID, "uid", uid, "pid", childPID)
	// The cleanups run in reverse on Close; the agent process is killed first by the Sandbox itself.
	teardown := make([]func() error, 0, len(cleanup))
	for i := len(cleanup) - 1; i >= 0; i-- {
		teardown = append(teardown, cleanup[i])
	}
	return agent.NewSandbox(proc, r.Limits, group, teardown...), nil
}

// readChildPID reads bwrap's --info-fd JSON for the host pid of the sandbox's pid 1.
func readChildPID(ctx context.Context, info io.Reader, proc *agent.Process) (int, error) {
	type reply struct {
		pid int
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		var v struct {
			ChildPID int `json:"child-pid"`
		}
		err := json.NewDecoder(info).Decode(&v)
		ch <- reply{v.ChildPID, err}
	}()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err != nil || r.pid <= 0 {
			<-proc.Exited()
			return 0, fmt.Errorf("no child pid (%v): %s", r.err, proc.Stderr())
		}
		return r.pid, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-t.C:
		return 0, errors.New("timed out waiting for bwrap")
	}
}

// baseArgs is the sandbox's namespace and mount set, without the command.
func (p *Provider) baseArgs(r *sandbox.Recipe) []string {
	args := []string{
		"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
		"--hostname", "sandbox",
		"--uid", "1000", "--gid", "1000",
		"--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr",
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin", "lib32", "libx32"} {
		if target, err := os.Readlink("/" + l); err == nil {
			args = append(args, "--symlink", target, "/"+l)
		} else if fi, err := os.Stat("/" + l); err == nil && fi.IsDir() {
			args = append(args, "--ro-bind", "/"+l, "/"+l)
		}
	}
	args = append(args, "--dir", "/etc")
	for _, f := range agent.EtcFiles {
		if _, err := os.Stat("/etc/" + f); err == nil {
			args = append(args, "--ro-bind", "/etc/"+f, "/etc/"+f)
		}
	}
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/tmp",
		"--bind", r.WorkspaceDir, agent.Workspace,
		"--dir", "/.corral",
		"--ro-bind", p.cfg.AgentPath, agent.BinPath,
		"--chdir", agent.Workspace,
	)
	return args
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
