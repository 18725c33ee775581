// Package bwrap is the default sandbox backend on Linux: one bubblewrap sandbox per session, running the
// in-sandbox agent. The form follows docs/research (sandbox-lab.md): bwrap runs as an unprivileged host uid of
// its own (never root: root-run bwrap keeps capabilities or host kuid 0), in new user (no nested ones), pid,
// mount, network, ipc, uts and cgroup namespaces, under the seccomp filter of package seccomp (the oci
// backend's deny list), with a read-only /usr, a minimal /etc (never /etc/shadow), /workspace bound
// read-write, a private /tmp, no capabilities, and an environment that holds only the sandbox's variables
// (bwrap's pid 1 keeps its caller's environment, readable at /proc/1/environ). bwrap's arguments travel on a
// pipe (--args), so /proc/1/cmdline shows no host path. Processes die with the server (--die-with-parent).
// Limits are cgroup v1 groups the sandbox is born in (a start kept ready: warm.go) or put into before the
// agent starts (--block-fd). Networking goes through a per-sandbox egress proxy on a Unix socket; the sandbox
// has no network of its own.
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
	"github.com/corralhq/corral/internal/sandbox/host"
	"github.com/corralhq/corral/internal/sandbox/seccomp"
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
	// StateDir holds a directory per sandbox: the egress proxy's socket, and, while the sandbox starts, bind
	// mounts of the workspace and the agent, so that those need not be reachable by the sandbox uid where they
	// are. New mounts a tmpfs of the provider's there (host.MountState), so that a sandbox's mount table shows
	// paths in it rather than StateDir's. It must be searchable by every uid (it is created 0711, its ancestors are checked) and belong to
	// one Provider. Default: /run/corral-bwrap/s-<random>, or under os.TempDir() without /run, with a link
	// <pid>.<n> to it (n numbers the Providers of the process): the sandbox's mount table shows the path, not
	// the server's pid. Directories of servers that are gone are swept (mounts detached) by New.
	StateDir string
	// CgroupRoot is where the cgroup v1 hierarchies are mounted; default /sys/fs/cgroup. With NoCgroups set
	// no limits are enforced (MemoryBytes, Pids and CPUQuota are ignored).
	CgroupRoot string
	NoCgroups  bool
	// CPUShare is the cpu.shares of the group all sandboxes run in, beside the server's own tasks (1024 each):
	// 0 means cgroup.DefaultShare; a negative value leaves the kernel's default (1024: the sandboxes together
	// weigh as much as one task of the server). Each sandbox's own group has the default weight, so sandboxes
	// share what the group gets fairly among themselves. CPUIdle also marks the group idle (cpu.idle): its
	// sandboxes then run only on CPU time nothing else wants, and starve on a saturated host.
	CPUShare int
	CPUIdle  bool
	// Warm is how many starts the provider keeps ready: processes parked in cgroups of their own, so that a
	// sandbox's start need not move its processes into its groups, which waits for an RCU grace period in the
	// kernel (warm.go). Each is an idle process of the agent binary, made again in the background as one is
	// taken; a start with none ready starts cold. 0 keeps one; a negative value none. None with NoCgroups, or
	// with an agent binary that has no spawn mode (probeSpawn). bwrap's own process is then in the sandbox's
	// groups too, counted in its limits, where a cold start puts only the sandbox's processes.
	Warm int
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
	cfg     Config
	link    string // the link <pid>.<n> to a default StateDir; "" for one the caller gave
	owned   bool   // StateDir was made by New (the default), so Close removes it
	bwrap   string
	etc     string    // the staged minimal /etc (stageEtc)
	agent   string    // the staged agent binary (stageAgent)
	seccomp []byte    // the seccomp filter (seccomp.Program)
	kit     *host.Kit // stages each sandbox on the host
	warm    *warmer   // the starts kept ready; nil for none
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
	var link string
	owned := cfg.StateDir == ""
	if owned {
		var err error
		if cfg.StateDir, link, err = defaultStateDir(cfg.reapGroup); err != nil {
			return nil, err
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	bw, err := checkHost(&cfg)
	if err != nil {
		return nil, err
	}
	// Staging mounts live only while a sandbox starts; a server that crashed then left some. A StateDir
	// belongs to one server, so none of them is in use.
	for _, m := range host.MountsUnder(cfg.StateDir) {
		_ = host.Unmount(m)
	}
	if err := host.RemoveStagedImages(filepath.Join(cfg.StateDir, stagedImages)); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	// What is staged for the sandboxes is on a tmpfs of the provider's own: their mount tables show paths in it,
	// not where StateDir is on the host.
	if err := host.MountState(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o711); err != nil {
		_ = host.UnmountState(cfg.StateDir)
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	p, err := newOnState(cfg, link, owned, bw)
	if err != nil {
		_ = host.UnmountState(cfg.StateDir)
		if owned {
			_ = host.RemovePaths(cfg.StateDir, link)
		}
		return nil, err
	}
	return p, nil
}

// newOnState is the rest of New once the state tmpfs is mounted at cfg.StateDir.
func newOnState(cfg Config, link string, owned bool, bw string) (*Provider, error) {
	// bwrap resolves its bind sources as the sandbox uid: they are all staged under StateDir.
	if err := host.CheckSearchable(filepath.Join(cfg.StateDir, "x")); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	filter, err := seccomp.Program()
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	etc, err := stageEtc(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	agentBin, err := host.StageAgent(cfg.StateDir, cfg.AgentPath)
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	kit := &host.Kit{UIDBase: cfg.UIDBase, UIDCount: cfg.UIDCount, StateDir: cfg.StateDir, Prefix: "bwrap-",
		Images: host.NewImages(filepath.Join(cfg.StateDir, stagedImages)), Logger: cfg.Logger}
	p := &Provider{cfg: cfg, link: link, owned: owned, bwrap: bw, etc: etc, agent: agentBin, seccomp: filter, kit: kit}
	if n := cmp.Or(cfg.Warm, 1); n > 0 && !cfg.NoCgroups {
		if err := probeSpawn(agentBin); err != nil {
			cfg.Logger.Warn("bwrap: the agent binary cannot keep starts ready (an older release?); sandboxes start cold",
				"agent", cfg.AgentPath, "err", err)
		} else {
			p.warm = newWarmer(n, p.newWarm, cfg.Logger)
		}
	}
	return p, nil
}

// defaultStateDir makes a default StateDir, /run/corral-bwrap/s-<random> (or under os.TempDir() without /run),
// and the link <pid>.<n> to it, after sweeping those of servers that are gone (reap removes their sandboxes'
// groups).
func defaultStateDir(reap func(box string)) (dir, link string, err error) {
	base := "/run/corral-bwrap"
	if _, err := os.Stat("/run"); err != nil {
		base = filepath.Join(os.TempDir(), "corral-bwrap")
	}
	sweep(base, reap)
	if err := os.MkdirAll(base, 0o711); err != nil {
		return "", "", fmt.Errorf("bwrap: state dir: %w", err)
	}
	if err := os.Chmod(base, 0o711); err != nil {
		return "", "", fmt.Errorf("bwrap: state dir: %w", err)
	}
	// One directory per Provider, not per process: New detaches every mount under its StateDir, which
	// would pull the staged workspace from under another Provider's starting sandbox in this process.
	// A sandbox's mount table shows the host paths its binds come from, so the directory has a neutral
	// name; a link named for the server's pid says whose it is (sweep).
	dir = filepath.Join(base, neutralPrefix+randomID())
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", "", fmt.Errorf("bwrap: state dir: %w", err)
	}
	link = filepath.Join(base, fmt.Sprintf("%d.%d", os.Getpid(), providers.Add(1)))
	if err := host.ReplaceLink(filepath.Base(dir), link); err != nil {
		_ = os.Remove(dir)
		return "", "", fmt.Errorf("bwrap: state dir: %w", err)
	}
	return dir, link, nil
}

// checkHost checks what the provider needs of the host (bubblewrap, a readable agent binary, root, and the
// cgroups unless NoCgroups), sweeps the groups of sandboxes that are gone, sets the sandboxes' CPU weight and
// returns bubblewrap's path.
func checkHost(cfg *Config) (string, error) {
	bw, err := exec.LookPath(cfg.BwrapPath)
	if err != nil {
		return "", fmt.Errorf("bwrap: bubblewrap not found: %w", err)
	}
	if fi, err := os.Stat(cfg.AgentPath); err != nil {
		return "", fmt.Errorf("bwrap: agent binary: %w", err)
	} else if fi.Mode().Perm()&0o005 != 0o005 {
		return "", fmt.Errorf("bwrap: agent binary %s must be readable and executable by others (mode %v)", cfg.AgentPath, fi.Mode().Perm())
	}
	if os.Geteuid() != 0 {
		return "", errors.New("bwrap: the server must run as root to start sandboxes under their own uids")
	}
	if !cfg.NoCgroups {
		if err := cgroup.Available(cfg.CgroupRoot); err != nil {
			return "", fmt.Errorf("bwrap: %w (set NoCgroups to run without limits)", err)
		}
		cgroup.Sweep(cfg.CgroupRoot, "bwrap-", time.Minute)
		if err := fairShare(cfg.CgroupRoot, cfg.CPUShare, cfg.CPUIdle); err != nil {
			return "", fmt.Errorf("bwrap: %w", err)
		}
	}
	return bw, nil
}

// fairShare sets the CPU weight of the group every sandbox's group is made in (Config.CPUShare, CPUIdle).
func fairShare(root string, share int, idle bool) error {
	parent, err := cgroup.Parent()
	if err != nil {
		return err
	}
	return cgroup.SetShare(root, parent, cgroup.Share(share), idle)
}

// reapGroup kills and removes the cgroups of a sandbox named name (its state directory's name) that a server
// which is gone left.
func (c *Config) reapGroup(name string) {
	if c.NoCgroups || !strings.HasPrefix(name, "bwrap-") {
		return
	}
	if g, err := cgroup.Existing(c.CgroupRoot, name); err == nil {
		_ = g.Remove()
	}
}

// Close removes what the provider keeps on the host once its sandboxes are closed: the staged /etc and agent,
// the state directories of sandboxes that were not closed (killing their cgroups), the state tmpfs
// (host.MountState), and a default StateDir with its link. The server calls it on Stop; a server that crashed
// leaves them to the next New's sweep. Idempotent.
func (p *Provider) Close() error {
	p.warm.close()
	var errs []error
	for _, m := range host.MountsUnder(p.cfg.StateDir) {
		errs = append(errs, host.Unmount(m))
	}
	boxes, _ := os.ReadDir(p.cfg.StateDir)
	for _, b := range boxes {
		if !b.IsDir() || !strings.HasPrefix(b.Name(), "bwrap-") {
			continue
		}
		p.cfg.reapGroup(b.Name())
		dir := filepath.Join(p.cfg.StateDir, b.Name())
		errs = append(errs, removeShallow(filepath.Join(dir, "corral")), removeShallow(dir))
	}
	if err := os.RemoveAll(filepath.Join(p.cfg.StateDir, "etc")); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, p.kit.Images.Close(), host.RemovePaths(filepath.Join(p.cfg.StateDir, host.StagedAgent)),
		host.UnmountState(p.cfg.StateDir))
	if p.owned {
		errs = append(errs, host.RemovePaths(p.cfg.StateDir, p.link))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bwrap: close: %w", err)
	}
	return nil
}

// HostPaths are the host paths the provider keeps while it runs (its StateDir and the link to it); Close
// removes them. The crash suite checks that none outlive a server.
func (p *Provider) HostPaths() []string {
	if !p.owned {
		return nil
	}
	return []string{p.cfg.StateDir, p.link}
}

// CgroupDirs lists the cgroup directories of the starts kept ready (Config.Warm): processes of the provider's
// own, which the crash suite checks die with the server and are swept with its sandboxes.
func (p *Provider) CgroupDirs() []string { return p.warm.groups() }

// Name returns "bwrap".
func (p *Provider) Name() string { return "bwrap" }

// Capabilities: sandboxes on this host, on an image directory, with egress over a Unix socket (sandbox.Local).
func (p *Provider) Capabilities() sandbox.Capabilities { return sandbox.Local }

// Tools are the in-sandbox agent's built-in tools.
func (p *Provider) Tools() []sandbox.Tool { return host.Tools() }

// Provision starts a sandbox for r and returns once its agent is running: the host kit stages it (host.Kit.Stage),
// bwrap's own binds are staged beside (stageBinds), and bwrap starts under the sandbox's uid in its cgroup: from
// a start kept ready if one is (startWarm), else cold (startCold).
func (p *Provider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (_ sandbox.Sandbox, err error) {
	st, err := p.kit.Stage(r, dirs)
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	defer func() {
		if err != nil {
			st.Release()
		}
	}()
	args, staged, err := p.stageBinds(st)
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	var group *cgroup.Group
	var proc *host.Process
	var childPID int
	// Whatever the start, the starts kept ready are made again once it is over (take may also have dropped one
	// that died while parked).
	defer p.warm.refill()
	if w := p.warm.take(); w != nil {
		childPID, err = p.startWarm(ctx, w, st, args)
		switch {
		case errors.Is(err, errUnclaimed):
			p.cfg.Logger.Warn("bwrap: a start kept ready could not take the sandbox; it starts cold", "sandbox", st.Name, "err", err)
		case err != nil:
			return nil, err
		default:
			group, proc = w.group, w.proc
		}
	}
	if proc == nil {
		if group, proc, childPID, err = p.startCold(ctx, st, args); err != nil {
			return nil, err
		}
	}
	sb := host.NewSandbox(proc, r.Limits, group)
	// Once the agent answers, bwrap has made the sandbox's own mounts of the staged workspace and agent, and
	// the host's staging mounts can go: a server that crashes later leaves none behind.
	if err := sb.Ping(ctx); err != nil {
		return nil, fmt.Errorf("bwrap: sandbox did not start: %w", err)
	}
	for _, m := range staged {
		if err := host.Unmount(m); err != nil {
			_ = sb.Close()
			return nil, fmt.Errorf("bwrap: %w", err)
		}
	}
	p.cfg.Logger.Debug("sandbox started", "sandbox", st.Name, "session", r.SessionID, "uid", st.UID, "pid", childPID)
	// The teardown runs in reverse on Close, after the Sandbox has killed the agent.
	for _, f := range st.Teardown() {
		sb.OnClose(f)
	}
	return sb, nil
}

// stageBinds stages what bwrap binds beside what the host kit staged: bwrap resolves its bind sources as the
// sandbox uid, and the directories that hold the workspace, the agent and the session's files may be private
// to root, so each is bound first under the sandbox's directory. The agent joins the proxy's socket and the CA
// bundle in the corral directory, bound read-only at /.corral: one bind for all three. /tmp is a tmpfs of the
// host's, bounded in size and inodes (bwrap's own --tmpfs takes no inode count). It returns bwrap's arguments
// and the staging mounts to detach once the sandbox runs.
func (p *Provider) stageBinds(st *host.Staged) (args, staged []string, err error) {
	args = p.baseArgs(st.Image)
	agentBin := filepath.Join(st.CorralDir, filepath.Base(agent.BinPath))
	if err := os.WriteFile(agentBin, nil, 0o500); err != nil {
		return nil, nil, err
	}
	ws, tmp := filepath.Join(st.Dir, "workspace"), filepath.Join(st.Dir, "tmp")
	binds := []struct {
		src, dst string
		ro       bool
	}{{st.Workspace, ws, false}, {p.agent, agentBin, true}}
	for i, m := range st.Mounts {
		binds = append(binds, struct {
			src, dst string
			ro       bool
		}{m.Source, filepath.Join(st.Dir, fmt.Sprintf("mnt%d", i)), m.ReadOnly})
	}
	for _, b := range binds {
		if b.dst != agentBin {
			if err := os.Mkdir(b.dst, 0o700); err != nil {
				return nil, nil, err
			}
		}
		if err := host.BindMount(b.src, b.dst, b.ro); err != nil {
			return nil, nil, err
		}
		st.Add(func() error { return host.Unmount(b.dst) })
		staged = append(staged, b.dst)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, nil, err
	}
	if err := host.MountTmp(tmp, st.Limits.TmpBytes, st.Limits.TmpInodes); err != nil {
		return nil, nil, err
	}
	st.Add(func() error { return host.Unmount(tmp) })
	staged = append(staged, tmp)
	for _, dst := range st.CAOverlays {
		if st.CAFile != "" {
			args = append(args, "--ro-bind", st.CAFile, dst)
		}
	}
	args = append(args, "--bind", ws, agent.Workspace, "--bind", tmp, "/tmp", "--ro-bind", st.CorralDir, filepath.Dir(agent.BinPath))
	for i, m := range st.Mounts {
		flag := "--bind"
		if m.ReadOnly {
			flag = "--ro-bind"
		}
		args = append(args, flag, binds[2+i].dst, m.Target)
	}
	// The root (bwrap's tmpfs of mount points) is made read-only once every mount point is in it: the sandbox
	// writes to its workspace, /tmp and outputs only.
	args = append(args, "--remount-ro", "/")
	return args, staged, nil
}

// startCold makes the sandbox's groups (unless NoCgroups), runs bwrap with args as the sandbox's uid, puts the
// sandbox's pid 1 into the groups before the agent starts, and returns the groups, the agent's process and the
// host pid of the sandbox's pid 1. bwrap's arguments and the seccomp filter travel on pipes: in the child, fd 3 =
// args, 4 = info, 5 = block, 6 = the seccomp filter, which bwrap installs last, just before it runs the agent.
func (p *Provider) startCold(ctx context.Context, st *host.Staged, args []string) (*cgroup.Group, *host.Process, int, error) {
	var group *cgroup.Group
	if !p.cfg.NoCgroups {
		var err error
		if group, err = cgroup.New(p.cfg.CgroupRoot, st.Name, groupLimits(st.Limits)); err != nil {
			return nil, nil, 0, fmt.Errorf("bwrap: %w", err)
		}
		st.Add(group.Remove)
	}
	fds, err := openStartPipes()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("bwrap: %w", err)
	}
	defer fds.close()
	args = append(args, "--info-fd", "4", "--block-fd", "5", "--seccomp", "6")
	// writeClose makes each pipe hold what it writes, so writing before bwrap runs cannot block.
	if err := fds.writeInputs(argv(args), p.seccomp); err != nil {
		return nil, nil, 0, fmt.Errorf("bwrap: write args: %w", err)
	}
	cmd := &exec.Cmd{Path: p.bwrap, Args: bwrapArgv(p.bwrap)}
	cmd.Env = st.Env
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{fds.argsR, fds.infoW, fds.blockR, fds.seccompR}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(st.UID), Gid: uint32(st.UID), Groups: []uint32{}},
		Setpgid:    true,
	}
	if err := closeOnExec(); err != nil {
		return nil, nil, 0, err
	}
	proc, err := host.StartProcess(cmd)
	fds.closeChildEnds()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("bwrap: %w", err)
	}
	st.Add(func() error { proc.Stop(); return nil })
	childPID, err := readChildPID(ctx, fds.infoR, proc)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("bwrap: sandbox did not start: %w", err)
	}
	if group != nil {
		if err := group.Add(childPID); err != nil {
			return nil, nil, 0, fmt.Errorf("bwrap: %w", err)
		}
	}
	if _, err := fds.blockW.Write([]byte{1}); err != nil {
		return nil, nil, 0, fmt.Errorf("bwrap: start agent: %w", err)
	}
	return group, proc, childPID, nil
}

// groupLimits are the cgroup limits of a sandbox's limits.
func groupLimits(l sandbox.Limits) cgroup.Limits {
	return cgroup.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUQuota: l.CPUQuota}
}

// bwrapArgv is bwrap's argv: its options come from the pipe at fd 3 (argv below), the command from its own
// argv, so that /proc/1/cmdline in the sandbox shows no host path.
func bwrapArgv(bwrap string) []string { return []string{bwrap, "--args", "3", "--", agent.BinPath} }

// argv encodes bwrap's options for --args: each followed by a NUL.
func argv(args []string) []byte {
	var b bytes.Buffer
	for _, a := range args {
		b.WriteString(a)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// startPipes are the pipes bwrap starts with: its arguments, its --info-fd, its --block-fd and the seccomp
// filter. The child's ends are closed once bwrap runs, the host's when start returns.
type startPipes struct {
	argsR, argsW       *os.File
	infoR, infoW       *os.File
	blockR, blockW     *os.File
	seccompR, seccompW *os.File
}

func openStartPipes() (*startPipes, error) {
	var f startPipes
	for _, pair := range []struct{ r, w **os.File }{{&f.argsR, &f.argsW}, {&f.infoR, &f.infoW}, {&f.blockR, &f.blockW}, {&f.seccompR, &f.seccompW}} {
		r, w, err := os.Pipe()
		if err != nil {
			f.close()
			return nil, err
		}
		*pair.r, *pair.w = r, w
	}
	return &f, nil
}

// writeInputs writes bwrap's arguments and the seccomp filter and closes their write ends.
func (f *startPipes) writeInputs(argv, filter []byte) error {
	err := writeClose(f.argsW, argv)
	if ferr := writeClose(f.seccompW, filter); err == nil {
		err = ferr
	}
	return err
}

// closeChildEnds closes the ends bwrap holds (its copies stay open in it).
func (f *startPipes) closeChildEnds() {
	for _, c := range []*os.File{f.argsR, f.infoW, f.blockR, f.seccompR} {
		if c != nil {
			c.Close()
		}
	}
}

// close closes every end still open (closing one twice is harmless: os.File reports the second as an error).
func (f *startPipes) close() {
	for _, c := range []*os.File{f.argsR, f.argsW, f.infoR, f.infoW, f.blockR, f.blockW, f.seccompR, f.seccompW} {
		if c != nil {
			c.Close()
		}
	}
}

// readChildPID reads bwrap's --info-fd JSON for the host pid of the sandbox's pid 1.
func readChildPID(ctx context.Context, info io.Reader, proc *host.Process) (int, error) {
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

// baseArgs is the sandbox's namespace and mount set, without the command: on the image (its top-level
// directories bound read-only, its top-level links made again), or without one (nil) on the host's /usr with
// the staged minimal /etc.
func (p *Provider) baseArgs(image *host.ImageRoot) []string {
	args := []string{
		"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
		// The agent is the sandbox's pid 1 (no bwrap init), which nothing inside can signal (agent/guard.go).
		"--as-pid-1",
		"--hostname", "sandbox",
		"--uid", "1000", "--gid", "1000",
		"--cap-drop", "ALL",
	}
	if image != nil {
		for _, d := range image.Dirs {
			args = append(args, "--ro-bind", filepath.Join(image.Dir, d), "/"+d)
		}
		for _, l := range image.Links {
			args = append(args, "--symlink", l.Target, "/"+l.Name)
		}
		args = append(args, "--ro-bind", image.Etc, "/etc")
	} else {
		args = append(args, "--ro-bind", "/usr", "/usr")
		for _, l := range []string{"bin", "lib", "lib64", "sbin", "lib32", "libx32"} {
			if target, err := os.Readlink("/" + l); err == nil {
				args = append(args, "--symlink", target, "/"+l)
			} else if fi, err := os.Stat("/" + l); err == nil && fi.IsDir() {
				args = append(args, "--ro-bind", "/"+l, "/"+l)
			}
		}
		args = append(args, "--ro-bind", p.etc, "/etc")
	}
	args = append(args,
		"--proc", "/proc",
		// The kernel command line of a VM host may carry boot secrets.
		"--ro-bind", "/dev/null", "/proc/cmdline",
		"--dev", "/dev",
		"--chdir", agent.Workspace,
	)
	return args
}

// providers numbers the Providers of this process, for the links to their default StateDirs.
var providers atomic.Int64

// stagedImages is the directory of a StateDir where the images sandboxes run on are bound (host.NewImages).
const stagedImages = "images"

// neutralPrefix starts the names of default state directories; the links to them are named <pid>.<n>.
const neutralPrefix = "s-"

// sweep removes the state directories under base of servers that are gone, detaching the mounts they left:
// those a link <pid>.<n> of a dead pid points to, directories named <pid>.<n> (as servers before the links
// made them), and neutral directories no link points to that are over a minute old (a server that died
// between making one and its link).
func sweep(base string, reap func(box string)) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	linked := map[string]bool{}
	var dead []string
	for _, e := range ents {
		owner, _, _ := strings.Cut(e.Name(), ".")
		pid, err := strconv.Atoi(owner)
		if err != nil {
			continue
		}
		path := filepath.Join(base, e.Name())
		target, lerr := os.Readlink(path)
		if lerr == nil {
			linked[target] = true
		}
		if fi, err := os.Lstat(path); err != nil || !host.OwnerGone(pid, fi.ModTime()) {
			continue
		}
		if lerr == nil {
			_ = os.Remove(path)
			if !strings.Contains(target, "/") {
				dead = append(dead, filepath.Join(base, target))
			}
			continue
		}
		dead = append(dead, path)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), neutralPrefix) || linked[e.Name()] {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			dead = append(dead, filepath.Join(base, e.Name()))
		}
	}
	for _, dir := range dead {
		for _, m := range host.MountsUnder(dir) {
			_ = host.Unmount(m)
		}
		_ = os.RemoveAll(filepath.Join(dir, "etc")) // the staged /etc holds no mounts
		_ = host.RemoveStagedImages(filepath.Join(dir, stagedImages))
		_ = os.Remove(filepath.Join(dir, host.StagedAgent))
		boxes, _ := os.ReadDir(dir)
		for _, b := range boxes {
			// bwrap died with its server (--die-with-parent), but a sandbox's group may hold a process that
			// escaped; the group is named for the box.
			reap(b.Name())
			_ = removeShallow(filepath.Join(dir, b.Name(), "corral"))
			_ = removeShallow(filepath.Join(dir, b.Name()))
		}
		_ = host.UnmountState(dir)
		_ = os.Remove(dir)
	}
}

// removeShallow removes dir and the entries directly in it, never recursing: a workspace still mounted there
// makes it fail rather than lose the workspace's files.
func removeShallow(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bwrap: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bwrap: remove state: %w", err)
	}
	return nil
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
