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
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/host"
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
	// RuntimeRoot is the runtime's state directory (--root); default /run/corral-<name>/<pid>.<n> (n numbers
	// the Providers of the process). The containers die with a server that crashes (their agent's pipe ends,
	// and a watchdog kills what is left); New deletes the state left in the default roots of servers that are
	// gone, and Close what is left in its own.
	RuntimeRoot string
	// StateDir holds the bundles; default <os.TempDir()>/corral-<name>/s-<random>, with a link <pid>.<n> to
	// it, swept likewise. New mounts a tmpfs of the provider's there (host.MountState), so that a sandbox's
	// mount table shows paths in it rather than StateDir's.
	StateDir string
	// UIDBase and UIDCount are the host uids the containers run as; defaults 300000 and 10000.
	UIDBase, UIDCount int
	// NoCgroups leaves the container's cgroups to the runtime and enforces no memory, pids or CPU limits.
	NoCgroups bool
	// CgroupRoot is where cgroup v1 is mounted, to read back the limits hit; default /sys/fs/cgroup.
	CgroupRoot string
	// CPUShare and CPUIdle set the CPU weight of the group /corral every container's group is made in, as
	// bwrap.Config's do: 0 means cgroup.DefaultShare, a negative value the kernel's default.
	CPUShare int
	CPUIdle  bool
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
	// ShellNamespace has the agent start each shell in new user and pid namespaces, as the sandbox's uid with
	// no capabilities, where the agent has no pid (agent.Config.ShellNamespace); the seccomp profile then lets
	// clone make a user namespace. For runtimes whose kernel lets a pid namespace's members kill or stop its
	// init (gVisor), and whose user namespaces are not the host's.
	ShellNamespace bool
	// HostTmp gives the container a /tmp from a tmpfs of the host's, bounded in size and inodes, bound in and
	// detached on the host once the container runs, instead of a tmpfs of the runtime's: gVisor's own tmpfs
	// does not enforce nr_inodes.
	HostTmp bool
	// Logger; default discards.
	Logger *slog.Logger
}

// Provider provisions OCI containers.
type Provider struct {
	cfg       Config
	runtime   string
	agent     string // the agent binary staged in StateDir (stageAgent)
	link      string // the link <pid>.<n> to a default StateDir; ""  for one the caller gave
	ownedRoot bool   // RuntimeRoot is the default, made by New, so Close removes it
	watchdog  *watchdog
	kit       *host.Kit // stages each sandbox on the host
}

// cgroupParent is where the containers' groups are made, in every controller (linux.cgroupsPath is absolute).
const cgroupParent = "/corral"

var _ sandbox.Provider = (*Provider)(nil)

// Available reports whether the runtime binary exists.
func Available(runtime string) error {
	if _, err := exec.LookPath(cmp.Or(runtime, "runc")); err != nil {
		return fmt.Errorf("oci: runtime not found: %w", err)
	}
	return nil
}

// New returns a Provider for cfg.
func New(cfg Config) (_ *Provider, err error) {
	cfg.Runtime = cmp.Or(cfg.Runtime, "runc")
	cfg.Name = cmp.Or(cfg.Name, "oci")
	pid := strconv.Itoa(os.Getpid())
	runBase, stateBase := "/run/corral-"+cfg.Name, filepath.Join(os.TempDir(), "corral-"+cfg.Name)
	// One root per Provider, not per process: Close deletes every container in its root.
	owner := fmt.Sprintf("%s.%d", pid, providers.Add(1))
	ownedRoot := cfg.RuntimeRoot == ""
	if ownedRoot {
		cfg.RuntimeRoot = filepath.Join(runBase, owner)
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
	p := &Provider{cfg: cfg, runtime: rt, ownedRoot: ownedRoot, kit: &host.Kit{UIDBase: cfg.UIDBase, UIDCount: cfg.UIDCount,
		StateDir: cfg.StateDir, Prefix: "corral-", Images: host.NewImages(filepath.Join(cfg.StateDir, "images")), Logger: cfg.Logger}}
	if err := p.prepareHost(runBase, stateBase); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = host.UnmountState(cfg.StateDir)
		}
	}()
	if linkState {
		p.link = filepath.Join(stateBase, owner)
		if err := host.ReplaceLink(filepath.Base(cfg.StateDir), p.link); err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
	}
	if p.agent, err = host.StageAgent(cfg.StateDir, cfg.AgentPath); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if !cfg.NoCgroups {
		if p.watchdog, err = startWatchdog(cfg.StateDir, cfg.CgroupRoot); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// prepareHost sweeps what servers that are gone left (before this provider makes its own: a server killed
// earlier may have had this pid, and so this root), sets the containers' CPU weight and makes the runtime root
// and the StateDir.
func (p *Provider) prepareHost(runBase, stateBase string) error {
	cfg := &p.cfg
	p.sweep(runBase, stateBase)
	if !cfg.NoCgroups {
		cgroup.SweepAt(cfg.CgroupRoot, cgroupParent, "corral-", time.Minute)
		if err := cgroup.SetShare(cfg.CgroupRoot, cgroupParent, cgroup.Share(cfg.CPUShare), cfg.CPUIdle); err != nil {
			return fmt.Errorf("oci: %w", err)
		}
	}
	for _, d := range []string{cfg.RuntimeRoot, cfg.StateDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("oci: %w", err)
		}
	}
	// The bundles, the staged agent and /etc are on a tmpfs of the provider's own: a container's mount table
	// shows paths in it (its root's, its binds'), not where StateDir is on the host.
	if err := host.MountState(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("oci: %w", err)
	}
	return nil
}

// watchdog is a process outside the server that kills every process of the provider's containers once the
// server is gone, however it went (a SIGKILL included). The agent, each container's pid 1, already exits when
// its pipe from the server ends, which ends its container; the watchdog also takes the runtime's own processes
// (gVisor's sandbox, gofer and stubs), whatever state they are in. It is a shell reading a pipe whose write end
// only the server holds; at end of file it SIGKILLs the processes in the pids group of each container the
// StateDir has a bundle for, until none is left. It runs in a process group of its own and ignores the
// terminal's signals, so that what kills the server's group does not kill it first.
type watchdog struct {
	w    *os.File
	done chan struct{}
}

const watchdogScript = `trap '' HUP INT QUIT TERM PIPE
read -r _
for i in $(seq 100); do
  n=0
  for d in "$1"/corral-*; do
    f="$2/pids` + cgroupParent + `/${d##*/}/cgroup.procs"
    [ -f "$f" ] || continue
    for p in $(cat "$f"); do
      if [ "$p" -gt 1 ] && [ "$p" -ne $$ ]; then kill -9 "$p" 2>/dev/null; n=$((n+1)); fi
    done
  done
  [ "$n" -eq 0 ] && exit 0
  sleep 0.1
done`

func startWatchdog(stateDir, cgroupRoot string) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("oci: watchdog: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "corral-watchdog", stateDir, cgroupRoot)
	cmd.Stdin = r
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("oci: watchdog: %w", err)
	}
	wd := &watchdog{w: w, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(wd.done)
	}()
	return wd, nil
}

// stop ends the watchdog: it finds nothing left to kill once the containers are deleted.
func (wd *watchdog) stop() {
	if wd == nil {
		return
	}
	wd.w.Close()
	<-wd.done
}

// containers lists the ids of the containers in the runtime root: `list` (runsc has no -q), or, when the
// runtime cannot list them, the root's entries.
func (p *Provider) containers(root string) []string {
	var ids []string
	if out, err := p.runtimeCmdRoot(context.Background(), root, "list").Output(); err == nil {
		for i, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); i > 0 && len(f) > 0 {
				ids = append(ids, f[0])
			}
		}
		return ids
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if id, _, _ := strings.Cut(e.Name(), "_"); strings.HasPrefix(id, "corral-") && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// reap deletes the containers in the runtime root root (none if "") and kills and removes the groups named for
// them and for the bundles in bundles: what a server left.
func (p *Provider) reap(root string, bundles ...string) {
	var names []string
	if root != "" {
		names = p.containers(root)
		for _, id := range names {
			_ = p.runtimeCmdRoot(context.Background(), root, "delete", "--force", id).Run()
		}
		_ = syscall.Unmount(filepath.Join(root, "null-netns"), syscall.MNT_DETACH) // runsc --network=none
	}
	for _, dir := range bundles {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "corral-") && !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	if !p.cfg.NoCgroups {
		for _, id := range names {
			if strings.HasPrefix(id, "corral-") && !strings.ContainsAny(id, "/.") {
				_ = cgroup.Open(p.cfg.CgroupRoot, cgroupParent+"/"+id, cgroup.Limits{}).Remove()
			}
		}
	}
}

// Close deletes the containers left in the provider's runtime root (those of sandboxes that were not closed)
// and removes what the provider keeps on the host: the bundles, the staged agent, and the default runtime
// root, StateDir and link. The server calls it on Stop; a server that crashed leaves them to the next New's
// sweep. Idempotent.
func (p *Provider) Close() error {
	p.reap(p.cfg.RuntimeRoot, p.cfg.StateDir)
	p.watchdog.stop()
	var errs []error
	if p.ownedRoot {
		errs = append(errs, os.RemoveAll(p.cfg.RuntimeRoot))
	}
	ents, _ := os.ReadDir(p.cfg.StateDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "corral-") {
			errs = append(errs, os.RemoveAll(filepath.Join(p.cfg.StateDir, e.Name())))
		}
	}
	errs = append(errs, p.kit.Images.Close(), host.RemovePaths(filepath.Join(p.cfg.StateDir, host.StagedAgent)),
		host.UnmountState(p.cfg.StateDir))
	if p.link != "" {
		errs = append(errs, host.RemovePaths(p.cfg.StateDir, p.link))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("oci: close: %w", err)
	}
	return nil
}

// HostPaths are the default host paths the provider keeps while it runs (its runtime root, StateDir and the
// link to it); Close removes them. The crash suite checks that none outlive a server.
func (p *Provider) HostPaths() []string {
	var paths []string
	if p.ownedRoot {
		paths = append(paths, p.cfg.RuntimeRoot)
	}
	if p.link != "" {
		paths = append(paths, p.cfg.StateDir, p.link)
	}
	return paths
}

// Name returns the configured name ("oci" by default).
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities: containers on this host, on an image directory, with egress over a Unix socket (sandbox.Local).
func (p *Provider) Capabilities() sandbox.Capabilities { return sandbox.Local }

// Tools are the in-sandbox agent's built-in tools.
func (p *Provider) Tools() []sandbox.Tool { return host.Tools() }

// sweep deletes the containers, and removes the runtime roots and bundles, that servers which are gone left in
// the default locations.
func (p *Provider) sweep(runBase, stateBase string) {
	// A dead server's bundles name its containers' groups too: gather them first.
	deadBundles := map[string][]string{} // <pid>.<n> -> the bundle dirs of that provider
	sents, _ := os.ReadDir(stateBase)
	for _, e := range sents {
		path := filepath.Join(stateBase, e.Name())
		if target, err := os.Readlink(path); err == nil && !strings.Contains(target, "/") && deadOwner(path, e.Name()) {
			deadBundles[e.Name()] = append(deadBundles[e.Name()], filepath.Join(stateBase, target))
		}
	}
	ents, _ := os.ReadDir(runBase)
	for _, e := range ents {
		root := filepath.Join(runBase, e.Name())
		if !deadOwner(root, e.Name()) {
			continue
		}
		p.reap(root, deadBundles[e.Name()]...)
		delete(deadBundles, e.Name())
		_ = os.RemoveAll(root)
	}
	for _, dirs := range deadBundles {
		p.reap("", dirs...) // a server that gave its own runtime root
	}
	// The containers' mounts live in their own namespaces; on the host a StateDir holds its state tmpfs, and
	// beneath it the staged images' overlays and the bounded /tmp of gVisor's containers, all detached with the
	// tmpfs (removeState). They are in the directories that links <pid>.<n> of dead pids point to, in
	// directories named <pid> (as servers before the links made them), and in neutral directories no link
	// points to that are over a minute old (a server that died between making one and its link).
	ents, _ = os.ReadDir(stateBase)
	linked := map[string]bool{}
	for _, e := range ents {
		path := filepath.Join(stateBase, e.Name())
		target, lerr := os.Readlink(path)
		if lerr == nil {
			linked[target] = true
		}
		if !deadOwner(path, e.Name()) {
			continue
		}
		if lerr == nil {
			_ = os.Remove(path)
			if !strings.Contains(target, "/") {
				removeState(filepath.Join(stateBase, target))
			}
			continue
		}
		removeState(path)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), neutralPrefix) || linked[e.Name()] {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			removeState(filepath.Join(stateBase, e.Name()))
		}
	}
}

// removeState removes the StateDir dir of a server that is gone: its state tmpfs is detached, with every mount
// beneath it, before anything is removed, and nothing is removed if a mount stays.
func removeState(dir string) {
	for _, m := range host.MountsUnder(dir) {
		_ = host.Unmount(m)
	}
	if host.UnmountState(dir) != nil || len(host.MountsUnder(dir)) > 0 {
		return
	}
	_ = os.RemoveAll(dir)
}

// neutralPrefix starts the names of default bundle directories; the links to them are named <pid>.<n>.
const neutralPrefix = "s-"

// providers numbers the Providers of this process, for the links to their default StateDirs.
var providers atomic.Int64

// deadOwner reports whether path, named name or <name>.<n>, belongs to a process that is gone (host.OwnerGone).
func deadOwner(path, name string) bool {
	owner, _, _ := strings.Cut(name, ".")
	pid, err := strconv.Atoi(owner)
	if err != nil {
		return false
	}
	fi, err := os.Lstat(path)
	return err == nil && host.OwnerGone(pid, fi.ModTime())
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

// Provision creates and starts a container for r: the host kit stages it (host.Kit.Stage), its bundle is
// written (bundle), and the runtime creates and starts it (run).
func (p *Provider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (_ sandbox.Sandbox, err error) {
	st, err := p.kit.Stage(r, dirs)
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	defer func() {
		if err != nil {
			st.Release()
		}
	}()
	spec, group, err := p.bundle(st)
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	proc, err := p.run(ctx, st, group)
	if err != nil {
		return nil, err
	}
	if spec.TmpSource != "" {
		// The container holds its own mount of /tmp now; the host's goes, so that a crash leaves none.
		if err := host.Unmount(spec.TmpSource); err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
	}
	p.cfg.Logger.Debug("container started", "container", st.Name, "session", r.SessionID, "uid", st.UID)
	return host.NewSandbox(proc, r.Limits, group, st.Teardown()...), nil
}

// bundle writes the container's bundle into the sandbox's directory, with a bounded tmpfs of the host's for its
// /tmp under Config.HostTmp, and returns the spec and the container's cgroup (nil under NoCgroups).
func (p *Provider) bundle(st *host.Staged) (BundleSpec, *cgroup.Group, error) {
	limits := st.Limits
	spec := BundleSpec{UID: st.UID, WorkspaceDir: st.Workspace, AgentPath: p.agent, ProxySocket: st.Socket,
		Env: st.Env, AllowClone3: p.cfg.AllowClone3, ShellNamespace: p.cfg.ShellNamespace, TmpBytes: limits.TmpBytes,
		TmpInodes: limits.TmpInodes, Mounts: st.Mounts, Image: st.Image, CAFile: st.CAFile, CAOverlays: st.CAOverlays}
	if p.cfg.HostTmp {
		spec.TmpSource = filepath.Join(st.Dir, "tmp")
		if err := os.Mkdir(spec.TmpSource, 0o711); err != nil {
			return spec, nil, err
		}
		if err := host.MountTmp(spec.TmpSource, limits.TmpBytes, limits.TmpInodes); err != nil {
			return spec, nil, err
		}
		st.Add(func() error { return host.Unmount(spec.TmpSource) })
	}
	var group *cgroup.Group
	if !p.cfg.NoCgroups {
		spec.CgroupsPath = cgroupParent + "/" + st.Name
		spec.MemoryBytes, spec.Pids, spec.CPUQuota = limits.MemoryBytes, limits.Pids+p.cfg.RuntimeTasks, limits.CPUQuota
		group = cgroup.Open(p.cfg.CgroupRoot, spec.CgroupsPath, cgroup.Limits{MemoryBytes: spec.MemoryBytes, Pids: spec.Pids, CPUQuota: spec.CPUQuota})
	}
	return spec, group, WriteBundle(st.Dir, spec)
}

// run creates the container of the bundle in st.Dir and starts it. runc create hands its stdio to the
// container's process and exits; the pipes then lead to the agent.
func (p *Provider) run(ctx context.Context, st *host.Staged, group *cgroup.Group) (*host.Process, error) {
	cmd := p.runtimeCmd(context.Background(), "create", "--bundle", st.Dir, st.Name)
	proc, err := host.StartProcess(cmd)
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	st.Add(func() error { proc.Stop(); return nil })
	st.Add(func() error {
		out, err := p.runtimeCmd(context.Background(), "delete", "--force", st.Name).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "not exist") {
			return fmt.Errorf("oci: delete %s: %v: %s", st.Name, err, out)
		}
		return nil
	})
	if group != nil {
		st.Add(group.Remove)
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
	if out, err := p.runtimeCmd(ctx, "start", st.Name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("oci: %s start: %v: %s", p.cfg.Runtime, err, out)
	}
	return proc, nil
}
