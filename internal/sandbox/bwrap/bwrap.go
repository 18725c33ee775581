// Package bwrap is the default sandbox backend on Linux: one bubblewrap sandbox per session, running the
// in-sandbox agent. The form follows docs/research (sandbox-lab.md): bwrap runs as an unprivileged host uid of
// its own (never root: root-run bwrap keeps capabilities or host kuid 0), in new user (no nested ones), pid,
// mount, network, ipc, uts and cgroup namespaces, under the seccomp filter of package seccomp (the oci
// backend's deny list), with a read-only /usr, a minimal /etc (never /etc/shadow), /workspace bound
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
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/egress"
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
	// are. It must be searchable by every uid (it is created 0711, its ancestors are checked) and belong to
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
	etc     string // the staged minimal /etc (stageEtc)
	agent   string // the staged agent binary (stageAgent)
	seccomp []byte // the seccomp filter (seccomp.Program)
	images  *agent.Images
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
		base := "/run/corral-bwrap"
		if _, err := os.Stat("/run"); err != nil {
			base = filepath.Join(os.TempDir(), "corral-bwrap")
		}
		sweep(base, cfg.reapGroup)
		if err := os.MkdirAll(base, 0o711); err != nil {
			return nil, fmt.Errorf("bwrap: state dir: %w", err)
		}
		if err := os.Chmod(base, 0o711); err != nil {
			return nil, fmt.Errorf("bwrap: state dir: %w", err)
		}
		// One directory per Provider, not per process: New detaches every mount under its StateDir, which
		// would pull the staged workspace from under another Provider's starting sandbox in this process.
		// A sandbox's mount table shows the host paths its binds come from, so the directory has a neutral
		// name; a link named for the server's pid says whose it is (sweep).
		dir := filepath.Join(base, neutralPrefix+randomID())
		if err := os.Mkdir(dir, 0o711); err != nil {
			return nil, fmt.Errorf("bwrap: state dir: %w", err)
		}
		link = filepath.Join(base, fmt.Sprintf("%d.%d", os.Getpid(), providers.Add(1)))
		if err := agent.ReplaceLink(filepath.Base(dir), link); err != nil {
			_ = os.Remove(dir)
			return nil, fmt.Errorf("bwrap: state dir: %w", err)
		}
		cfg.StateDir = dir
	}
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
		cgroup.Sweep(cfg.CgroupRoot, "bwrap-", time.Minute)
		if err := fairShare(cfg.CgroupRoot, cfg.CPUShare, cfg.CPUIdle); err != nil {
			return nil, fmt.Errorf("bwrap: %w", err)
		}
	}
	// Staging mounts live only while a sandbox starts; a server that crashed then left some. A StateDir
	// belongs to one server, so none of them is in use.
	for _, m := range mountsUnder(cfg.StateDir) {
		_ = unmount(m)
	}
	if err := agent.RemoveStagedImages(filepath.Join(cfg.StateDir, stagedImages)); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	// bwrap resolves its bind sources as the sandbox uid: they are all staged under StateDir.
	if err := agent.CheckSearchable(filepath.Join(cfg.StateDir, "x")); err != nil {
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
	agentBin, err := stageAgent(cfg.StateDir, cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	return &Provider{cfg: cfg, link: link, owned: owned, bwrap: bw, etc: etc, agent: agentBin, seccomp: filter,
		images: agent.NewImages(filepath.Join(cfg.StateDir, stagedImages), true)}, nil
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
// the state directories of sandboxes that were not closed (killing their cgroups), and a default StateDir
// with its link. The server calls it on Stop; a server that crashed leaves them to the next New's sweep.
// Idempotent.
func (p *Provider) Close() error {
	var errs []error
	for _, m := range mountsUnder(p.cfg.StateDir) {
		errs = append(errs, unmount(m))
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
	errs = append(errs, p.images.Close(), agent.RemovePaths(filepath.Join(p.cfg.StateDir, stagedAgent)))
	if p.owned {
		errs = append(errs, agent.RemovePaths(p.cfg.StateDir, p.link))
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

// Name returns "bwrap".
func (p *Provider) Name() string { return "bwrap" }

// Tools are the in-sandbox agent's built-in tools.
func (p *Provider) Tools() []sandbox.Tool { return agent.Tools() }

// Provision starts a sandbox for r and returns once its agent is running.
func (p *Provider) Provision(ctx context.Context, r *sandbox.Recipe) (_ sandbox.Sandbox, err error) {
	uid, cleanup, err := agent.Claim(r, p.cfg.UIDBase, p.cfg.UIDCount)
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	defer func() {
		if err != nil {
			cleanup.Run()
		}
	}()
	name := "bwrap-" + randomID()
	image, err := p.images.Root(r.RootFS)
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	args := p.baseArgs(image)

	// Networking: a proxy of the sandbox's own, on a socket only the sandbox uid can connect to.
	stateDir := filepath.Join(p.cfg.StateDir, name)
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	cleanup.Add(func() error { return removeShallow(stateDir) })
	if err := os.Chown(stateDir, uid, uid); err != nil {
		return nil, fmt.Errorf("bwrap: state dir: %w", err)
	}
	// The workspace and the agent are bound here first: bwrap, running as the sandbox uid, must be able to
	// resolve its sources, and the directories that hold them may be private to root.
	// The agent and the proxy's socket share one directory, bound read-only at /.corral: one bind for both.
	ws := filepath.Join(stateDir, "workspace")
	corralDir := filepath.Join(stateDir, "corral")
	agentBin := filepath.Join(corralDir, filepath.Base(agent.BinPath))
	if err := os.Mkdir(ws, 0o700); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	if err := os.Mkdir(corralDir, 0o700); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cleanup.Add(func() error { return removeShallow(corralDir) })
	if err := os.Chown(corralDir, uid, uid); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	if err := os.WriteFile(agentBin, nil, 0o500); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	if err := bindMount(r.WorkspaceDir, ws, false); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cleanup.Add(func() error { return unmount(ws) })
	if err := bindMount(p.agent, agentBin, true); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cleanup.Add(func() error { return unmount(agentBin) })
	if bundle, err := agent.CABundle(image, r.Egress); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	} else if bundle != nil {
		// Root's file in the sandbox uid's directory: readable, not writable, at agent.CABundlePath.
		caFile := filepath.Join(corralDir, filepath.Base(agent.CABundlePath))
		if err := os.WriteFile(caFile, bundle, 0o444); err != nil {
			return nil, fmt.Errorf("bwrap: ca bundle: %w", err)
		}
		for _, dst := range agent.CABundleOverlays(image) {
			args = append(args, "--ro-bind", caFile, dst)
		}
	}
	sock := filepath.Join(corralDir, filepath.Base(agent.ProxySocketPath))
	proxy, err := egress.Listen(egress.Config{Path: sock, UID: uid, GID: uid, Policy: egress.PolicyFor(r.Environment.Networking),
		Egress: r.Egress, Logger: p.cfg.Logger.With("sandbox", name, "session", r.SessionID)})
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cleanup.Add(proxy.Close)
	limits := agent.WithDefaults(r.Limits)
	// /tmp is a tmpfs of the host's, bounded in size and inodes (bwrap's own --tmpfs takes no inode count),
	// staged like the workspace and bound in.
	tmp := filepath.Join(stateDir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	if err := mountTmp(tmp, limits.TmpBytes, limits.TmpInodes); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cleanup.Add(func() error { return unmount(tmp) })
	args = append(args, "--bind", ws, agent.Workspace, "--bind", tmp, "/tmp", "--ro-bind", corralDir, filepath.Dir(agent.BinPath))
	// The session's uploads, outputs and skills, staged here first as the workspace is.
	staged := []string{agentBin, ws, tmp}
	for i, m := range agent.SessionMounts(r) {
		dst := filepath.Join(stateDir, fmt.Sprintf("mnt%d", i))
		if err := os.Mkdir(dst, 0o700); err != nil {
			return nil, fmt.Errorf("bwrap: %w", err)
		}
		if err := bindMount(m.Source, dst, m.ReadOnly); err != nil {
			return nil, fmt.Errorf("bwrap: %w", err)
		}
		cleanup.Add(func() error { return unmount(dst) })
		staged = append(staged, dst)
		flag := "--bind"
		if m.ReadOnly {
			flag = "--ro-bind"
		}
		args = append(args, flag, dst, m.Target)
	}

	var group *cgroup.Group
	if !p.cfg.NoCgroups {
		group, err = cgroup.New(p.cfg.CgroupRoot, name, cgroup.Limits{MemoryBytes: limits.MemoryBytes, Pids: limits.Pids, CPUQuota: limits.CPUQuota})
		if err != nil {
			return nil, fmt.Errorf("bwrap: %w", err)
		}
		cleanup.Add(group.Remove)
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
	seccompR, seccompW, err := os.Pipe()
	if err != nil {
		argsW.Close()
		infoW.Close()
		blockR.Close()
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	defer seccompR.Close()
	// fds in the child: 3 = args, 4 = info, 5 = block, 6 = the seccomp filter, which bwrap installs last,
	// just before it runs the agent.
	// The root (bwrap's tmpfs of mount points) is made read-only once every mount point is in it: the sandbox
	// writes to its workspace, /tmp and outputs only.
	args = append(args, "--remount-ro", "/")
	args = append(args, "--info-fd", "4", "--block-fd", "5", "--seccomp", "6")
	var argv bytes.Buffer
	for _, a := range args {
		argv.WriteString(a)
		argv.WriteByte(0)
	}
	// The arguments and the filter are far below a pipe's capacity, so writing them before bwrap starts
	// cannot block.
	_, werr := argsW.Write(argv.Bytes())
	argsW.Close()
	if werr == nil {
		_, werr = seccompW.Write(p.seccomp)
	}
	seccompW.Close()
	if werr != nil {
		infoW.Close()
		blockR.Close()
		return nil, fmt.Errorf("bwrap: write args: %w", werr)
	}

	// Options come from the pipe; bwrap takes the command from its own argv.
	cmd := exec.Command(p.bwrap, "--args", "3", "--", agent.BinPath)
	cmd.Env = agent.EnvFor(r.Egress)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{argsR, infoW, blockR, seccompR}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
		Setpgid:    true,
	}
	if err := closeOnExec(); err != nil {
		infoW.Close()
		blockR.Close()
		return nil, err
	}
	proc, err := agent.StartProcess(cmd)
	infoW.Close()
	blockR.Close()
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cleanup.Add(func() error { proc.Stop(); return nil })
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
	sb := agent.NewSandbox(proc, r.Limits, group)
	// Once the agent answers, bwrap has made the sandbox's own mounts of the staged workspace and agent, and
	// the host's staging mounts can go: a server that crashes later leaves none behind.
	if err := sb.Ping(ctx); err != nil {
		return nil, fmt.Errorf("bwrap: sandbox did not start: %w", err)
	}
	for _, m := range staged {
		if err := unmount(m); err != nil {
			_ = sb.Close()
			return nil, err
		}
	}
	p.cfg.Logger.Debug("sandbox started", "sandbox", name, "session", r.SessionID, "uid", uid, "pid", childPID)
	// The cleanups run in reverse on Close, after the Sandbox has killed the agent.
	for _, f := range cleanup.Reversed() {
		sb.OnClose(f)
	}
	return sb, nil
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

// baseArgs is the sandbox's namespace and mount set, without the command: on the image (its top-level
// directories bound read-only, its top-level links made again), or without one (nil) on the host's /usr with
// the staged minimal /etc.
func (p *Provider) baseArgs(image *agent.ImageRoot) []string {
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

// bindMount binds src onto dst in the host's mount namespace, read-only if ro, without suid or devices. The
// mount is private, so that unmounting it later cannot propagate into the sandbox's copy.
func bindMount(src, dst string, ro bool) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := syscall.Mount("", dst, "", syscall.MS_PRIVATE, ""); err != nil {
		_ = unmount(dst)
		return fmt.Errorf("make %s private: %w", dst, err)
	}
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_NOSUID | syscall.MS_NODEV)
	if ro {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount("", dst, "", flags, ""); err != nil {
		_ = unmount(dst)
		return fmt.Errorf("remount %s: %w", dst, err)
	}
	return nil
}

// mountTmp mounts a tmpfs of size bytes and inodes inodes at dir, private (see bindMount), without suid or
// devices.
func mountTmp(dir string, size, inodes int64) error {
	opts := fmt.Sprintf("mode=1777,size=%d,nr_inodes=%d", size, inodes)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_PRIVATE, ""); err != nil {
		_ = unmount(dir)
		return fmt.Errorf("make /tmp private: %w", err)
	}
	return nil
}

// unmount detaches the mount at path.
func unmount(path string) error {
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("bwrap: unmount %s: %w", path, err)
	}
	return nil
}

// providers numbers the Providers of this process, for the links to their default StateDirs.
var providers atomic.Int64

// stagedImages is the directory of a StateDir where the images sandboxes run on are bound (agent.NewImages).
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
		if fi, err := os.Lstat(path); err != nil || !agent.OwnerGone(pid, fi.ModTime()) {
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
		for _, m := range mountsUnder(dir) {
			_ = unmount(m)
		}
		_ = os.RemoveAll(filepath.Join(dir, "etc")) // the staged /etc holds no mounts
		_ = agent.RemoveStagedImages(filepath.Join(dir, stagedImages))
		_ = os.Remove(filepath.Join(dir, stagedAgent))
		boxes, _ := os.ReadDir(dir)
		for _, b := range boxes {
			// bwrap died with its server (--die-with-parent), but a sandbox's group may hold a process that
			// escaped; the group is named for the box.
			reap(b.Name())
			_ = removeShallow(filepath.Join(dir, b.Name(), "corral"))
			_ = removeShallow(filepath.Join(dir, b.Name()))
		}
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

// mountsUnder lists the mount points below dir, deepest first.
func mountsUnder(dir string) []string {
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

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
