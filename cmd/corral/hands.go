package main

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/host"
	"github.com/corralhq/corral/internal/sandbox/volume"
	corral "github.com/corralhq/corral/internal/server" // aliased: the e2e tests have a type server
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/internal/workspace/memstore"
)

// handsFlags pick and configure the sandbox backend.
type handsFlags struct {
	kind string
	// wsSandboxes is each workspace's share of live sandboxes, across the brains of the store.
	wsSandboxes int
	agent       string
	runsc       string
	idle        time.Duration
	memoryMB    int64
	pids        int
	cpus        float64
	cpuShare    int
	cpuIdle     bool
	starts      int // --sandbox-starts
	warm        int // --sandbox-warm
	timeout     time.Duration
	egress      egressFlags
	// The quotas of each session's workspace and /tmp, and the disk reserve of the data directory.
	diskMB, inodes, reserveMB, headroomMB, tmpMB, tmpInodes int64
	overcommit                                              float64
	fs                                                      *flag.FlagSet // to tell the flags given from the defaults
	// uidBase is the first host uid of the sandboxes (0: the backend's default); corral worker sets it.
	uidBase int
	// registries are the package managers' registries allow_package_managers opens to sandboxes, with the
	// operator's mirrors (--package-registry, the image builds' flag); nil: the managers' defaults.
	registries *image.Registries
	kube       kubeFlags
}

func defaultSandbox() string {
	if runtime.GOOS == "linux" {
		return "bwrap"
	}
	return "none"
}

func (f *handsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kind, "sandbox", envOr("CORRAL_SANDBOX", defaultSandbox()), "sandbox `backend`: bwrap, oci (runc), gvisor (runsc), kubernetes (k8s: pods on a cluster, --k8s-*), process (no isolation: development only) or none (env CORRAL_SANDBOX)")
	fs.StringVar(&f.agent, "sandbox-agent", os.Getenv("CORRAL_SANDBOX_AGENT"), "`path` of the in-sandbox agent binary (default: corral-sandbox-agent beside this binary or on PATH, else this binary)")
	runscFlag(fs, &f.runsc)
	f.kube.register(fs)
	fs.DurationVar(&f.idle, "sandbox-idle", sandbox.DefaultIdleTimeout, "how long an unused sandbox lives before it is reaped (its workspace stays)")
	fs.IntVar(&f.wsSandboxes, "workspace-sandboxes", defaultWorkspaceSandboxes, "`sandboxes` a workspace's sessions may hold live at once, across every brain of\n"+
		"the store: a tool call beyond it fails, saying so, until one closes (0 = unlimited)")
	fs.Int64Var(&f.memoryMB, "sandbox-memory", host.DefaultMemoryBytes>>20, "memory limit of each sandbox in `MiB`")
	fs.IntVar(&f.pids, "sandbox-pids", host.DefaultPids, "process limit of each sandbox")
	fs.Float64Var(&f.cpus, "sandbox-cpus", 0, "CPU limit of each sandbox in `cores` (0 = unlimited)")
	cpuFlags(fs, &f.cpuShare, &f.cpuIdle)
	startsFlag(fs, &f.starts)
	warmFlag(fs, &f.warm)
	fs.DurationVar(&f.timeout, "tool-timeout", host.DefaultCommandTimeout, "default wall-clock limit of one tool call (bash's timeout_ms overrides it)")
	fs.Int64Var(&f.diskMB, "sandbox-disk", volume.DefaultSizeBytes>>20, "disk quota of each session's workspace in `MiB` (a loop-mounted ext4 image; needs root, loop devices and mkfs.ext4; 0 = no quota)")
	fs.Int64Var(&f.inodes, "sandbox-inodes", volume.DefaultInodes, "inode (file) quota of each session's workspace")
	fs.Int64Var(&f.reserveMB, "sandbox-disk-reserve", volume.DefaultReserveBytes>>20, "`MiB` the data directory's filesystem keeps free: a workspace is mounted only while the unused quota of the mounted ones fits above it (0 = no check)")
	fs.Int64Var(&f.headroomMB, "sandbox-disk-headroom", volume.DefaultHeadroomBytes>>20, "`MiB` of a mounted workspace's unused quota the reserve check counts, besides what its sparse image uses (a workspace that grows costs more; --sandbox-disk or more = strict); when the reserve refuses a workspace, idle sandboxes are reaped first")
	fs.Float64Var(&f.overcommit, "sandbox-disk-overcommit", 1, "`factor` the reserve check divides the mounted workspaces' unused quota by (1 = strict: they can never fill the disk below the reserve)")
	fs.Int64Var(&f.tmpMB, "sandbox-tmp", host.DefaultTmpBytes>>20, "size of each sandbox's /tmp (a tmpfs, in its memory) in `MiB`")
	fs.Int64Var(&f.tmpInodes, "sandbox-tmp-inodes", host.DefaultTmpInodes, "inode (file) limit of each sandbox's /tmp")
	f.fs = fs
	f.egress.register(fs)
}

// cpuFlags adds --sandbox-cpu-share and --sandbox-cpu-idle to serve, harness and bench.
func cpuFlags(fs *flag.FlagSet, share *int, idle *bool) {
	fs.IntVar(share, "sandbox-cpu-share", 0, fmt.Sprintf("cpu.shares of the cgroup all sandboxes run in, beside the server's threads (1024 each); each sandbox gets an equal part of it (0 = %d, -1 = the kernel's 1024)", cgroup.DefaultShare))
	fs.BoolVar(idle, "sandbox-cpu-idle", false, "also mark the sandboxes' cgroup idle (cpu.idle): sandboxes run only on CPU time nothing else on the host wants")
}

// startsFlag adds --sandbox-starts to serve, harness, worker and bench.
func startsFlag(fs *flag.FlagSet, starts *int) {
	fs.IntVar(starts, "sandbox-starts", defaultStarts(), "sandboxes started at once on this host; more wait their turn, so that a burst of first tool calls\n"+
		"leaves the server CPUs of its own (0 = no bound; the default is half the CPUs, at least 1; kubernetes pods start on the cluster's nodes and are not bounded)")
}

// warmFlag adds --sandbox-warm to serve, harness, worker and bench.
func warmFlag(fs *flag.FlagSet, warm *int) {
	fs.IntVar(warm, "sandbox-warm", 1, "bwrap sandbox starts kept ready: processes parked in cgroups and a network namespace of their own, so that a\n"+
		"sandbox's start skips the kernel's wait to move it into its groups (an RCU grace period, 10-20 ms on an idle VM)\n"+
		"and the making of its network namespace; 0 = none")
}

// warmConfig maps --sandbox-warm to bwrap.Config.Warm, where 0 is the default (one) and a negative value none.
func warmConfig(flag int) int {
	if flag <= 0 {
		return -1
	}
	return flag
}

// defaultStarts is --sandbox-starts' default: half the CPUs this process may use, at least one, so that the
// sandboxes' starts never take every CPU from the sessions' turns (docs/benchmarks.md, stop 55).
func defaultStarts() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// maxStarting is the pool's bound on the sandboxes it starts at once: --sandbox-starts, none for a remote backend.
func (f *handsFlags) maxStarting() int {
	if b, err := lookupBackend(f.kind); err == nil && b.remote {
		return 0
	}
	return f.starts
}

// runscFlag adds --runsc, the gvisor backend's binary, to serve, harness and bench.
func runscFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "runsc", envOr("CORRAL_RUNSC", "runsc"), "runsc `binary` of the gvisor backend (a current, static build; env CORRAL_RUNSC; "+runscFallback+" is tried when runsc is not on PATH)")
}

func (f *handsFlags) limits() sandbox.Limits {
	return sandbox.Limits{MemoryBytes: f.memoryMB << 20, Pids: f.pids, CPUQuota: f.cpus, CommandTimeout: f.timeout,
		TmpBytes: f.tmpMB << 20, TmpInodes: f.tmpInodes}
}

// volumes returns the workspaces' quotas under root, or nil without them (--sandbox-disk 0). Where they
// cannot work (not root, no loop devices, no mkfs.ext4) the reason is logged and the workspaces have none,
// unless a quota flag was given: then the reason is returned, and the server's built-in tools report it.
func (f *handsFlags) volumes(root string, logger *slog.Logger) (*volume.Volumes, error) {
	if f.diskMB <= 0 {
		logger.Warn("workspace disk quotas are off (--sandbox-disk 0): a session can fill the data directory's filesystem")
		return nil, nil
	}
	if f.inodes <= 0 || f.tmpMB <= 0 || f.tmpInodes <= 0 || f.reserveMB < 0 || f.headroomMB < 0 {
		return nil, errors.New("--sandbox-inodes, --sandbox-tmp, --sandbox-tmp-inodes and --sandbox-disk-headroom must be positive, --sandbox-disk-reserve not negative")
	}
	reserve := f.reserveMB << 20
	if reserve == 0 {
		reserve = -1 // volume.Config: none
	}
	v, err := volume.New(volume.Config{Root: root, SizeBytes: f.diskMB << 20, Inodes: f.inodes, ReserveBytes: reserve,
		HeadroomBytes: f.headroomMB << 20, Overcommit: f.overcommit, Logger: logger})
	if err == nil {
		return v, nil
	}
	asked := false
	if f.fs != nil {
		f.fs.Visit(func(fl *flag.Flag) {
			asked = asked || strings.HasPrefix(fl.Name, "sandbox-disk") || fl.Name == "sandbox-inodes"
		})
	}
	if asked {
		return nil, fmt.Errorf("workspace quotas were asked for but cannot work here: %w", err)
	}
	logger.Warn("workspace disk quotas unavailable: sessions' workspaces have none (pass --sandbox-disk 0 to silence this)", "err", err)
	return nil, nil
}

// caFileName is the file in the data directory that holds the egress proxies' CA (its key sealed by the vault).
const caFileName = "egress-ca.json"

// gitEndpoint builds the git endpoint (proxy.Git) under the operator's egress flags: the sandboxes' (their
// Egress.Local and their clones' tokens) and the API's git relay (the self-hosted workers').
func (f *handsFlags) gitEndpoint(st store.Store, vlt *vault.Vault, logger *slog.Logger) (*proxy.Git, error) {
	eo, err := f.egress.parse()
	if err != nil {
		return nil, err
	}
	return proxy.NewGit(proxy.GitConfig{Store: st, Vault: vlt, AllowInternal: eo.AllowInternal, RootCAs: eo.RootCAs, Logger: logger})
}

// sandbox returns the server's sandbox configuration. A backend that cannot run here is logged and becomes
// the reason every built-in tool call reports (sessions that need no sandbox still work). The credentials of
// the sandboxes' sessions stay outside them: repositories are cloned on the host with their token, the git
// endpoint (proxy.Git) injects it into the sandbox's git traffic, and the egress proxy injects the session's
// environment_variable credentials (proxy.Secrets) under the server's CA.
func (f *handsFlags) sandbox(dataDir string, st store.Store, vlt *vault.Vault, fsvc *files.Service, stderr io.Writer, logger *slog.Logger) (corral.SandboxConfig, error) {
	root, err := filepath.Abs(filepath.Join(dataDir, "workspaces"))
	if err != nil {
		return corral.SandboxConfig{}, err
	}
	eo, err := f.egress.parse()
	if err != nil {
		return corral.SandboxConfig{}, err
	}
	git, err := f.gitEndpoint(st, vlt, logger)
	if err != nil {
		return corral.SandboxConfig{}, err
	}
	ca, created, err := proxy.LoadCA(filepath.Join(dataDir, caFileName), vlt)
	if err != nil {
		return corral.SandboxConfig{}, err
	}
	if created {
		fmt.Fprintf(stderr, "corral: created the egress proxies' CA in %s (its key sealed by the vault)\n", filepath.Join(dataDir, caFileName))
	}
	secrets, err := proxy.NewSecrets(proxy.SecretsConfig{Store: st, Vault: vlt, CA: ca, AllowInternal: eo.AllowInternal, Logger: logger})
	if err != nil {
		return corral.SandboxConfig{}, err
	}
	// Repositories are cloned on the server, under the same rules as the sandbox's egress proxy.
	// File resources are placed from, and outputs collected into, the Files API's storage.
	wc := workspace.Config{Resolve: proxy.Resolver(eo.AllowInternal), Path: os.Getenv("PATH"),
		Tokens: git, ExtraRootCAsPEM: eo.CAPEM, Logger: logger}
	if fsvc != nil {
		wc.Files, wc.Skills = fsvc, fsvc
	}
	// Memory stores are mounted from, and the agents' changes written back into, the store.
	if ms, ok := st.(store.MemoryStore); ok {
		wc.Memories = memstore.New(ms)
	}
	placer, err := workspace.New(wc)
	if err != nil {
		return corral.SandboxConfig{}, err
	}
	sc := corral.SandboxConfig{Tools: host.Tools(), Pool: sandbox.PoolConfig{
		WorkspaceRoot: root, IdleTimeout: f.idle, Limits: f.limits(), Placer: placer, Egress: proxy.Merge(git, secrets, &image.ManagerEgress{Registries: f.registries}),
		Outputs: placer, MaxStarting: f.maxStarting(),
	}, WorkspaceSandboxes: f.wsSandboxes}
	if f.kind == "none" {
		logger.Warn("no sandbox backend: built-in tools (bash, read, write, ...) will fail")
		return sc, nil
	}
	var vols *volume.Volumes
	if b, lerr := lookupBackend(f.kind); lerr != nil || !b.remote {
		vols, err = f.volumes(root, logger)
	}
	if err != nil {
		logger.Error("sandbox unavailable: built-in tools will fail until it is fixed", "err", err)
		sc.Unavailable = err.Error()
		return sc, nil
	}
	if vols != nil {
		sc.Pool.Volumes = vols
		if fsvc != nil {
			// The files' writes (uploads, collected outputs) count against the same disk reserve.
			fsvc.SetSpace(vols.CheckSpace)
		}
	}
	if sc.Provider, err = f.provider(dataDir, logger); err != nil {
		sc.Provider = nil // not a typed nil in the interface: the server must see no provider
		logger.Warn("sandbox backend unavailable: built-in tools will fail until it is fixed", "sandbox", f.kind, "err", err)
		sc.Unavailable = fmt.Sprintf("%s: %v", f.kind, err)
	}
	return sc, nil
}

// provider constructs the --sandbox backend from the table (backends.go), or says why it cannot run here.
func (f *handsFlags) provider(dataDir string, logger *slog.Logger) (sandbox.Provider, error) {
	b, err := lookupBackend(f.kind)
	if err != nil {
		return nil, err
	}
	agentPath, self, err := f.agentPath(dataDir)
	if err != nil {
		return nil, err
	}
	if self && !b.remote {
		logger.Info(selfAgentNote, "agent", agentPath)
	}
	return b.provider(backendOptions{agentPath: agentPath, runsc: f.runsc, logger: logger, cpuShare: f.cpuShare, cpuIdle: f.cpuIdle, warm: warmConfig(f.warm),
		uidBase: f.uidBase, kube: &f.kube}, "")
}

// agentName is the in-sandbox agent's binary name; the corral binary runs as the agent under it.
const agentName = "corral-sandbox-agent"

// agentPath finds the in-sandbox agent: --sandbox-agent, else corral-sandbox-agent beside this binary or on
// PATH, else a copy of this binary (which runs as the agent under that name) in the data dir, where sandbox
// uids can reach it (go run builds into a private directory). self says it is that copy.
func (f *handsFlags) agentPath(dataDir string) (path string, self bool, err error) {
	if f.agent != "" {
		path, err = filepath.Abs(f.agent)
		return path, false, err
	}
	if p, ok := installedAgent(); ok {
		return p, false, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", false, fmt.Errorf("find own binary: %w", err)
	}
	dst, err := filepath.Abs(filepath.Join(dataDir, "bin", agentName))
	if err != nil {
		return "", false, err
	}
	return dst, true, copyIfChanged(exe, dst)
}

// installedAgent finds corral-sandbox-agent beside this binary or on PATH.
func installedAgent() (string, bool) {
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), agentName); fileExists(p) {
			return p, true
		}
	}
	if p, err := exec.LookPath(agentName); err == nil {
		if p, err := filepath.Abs(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// selfAgentNote is logged when the in-sandbox agent is this binary: it starts as slowly as the whole server.
const selfAgentNote = "the in-sandbox agent is a copy of this binary: each sandbox start then runs every package initialization of the server " +
	"(tens of milliseconds more per start: docs/benchmarks.md); put corral-sandbox-agent beside it or on PATH " +
	"(go install ./cmd/corral-sandbox-agent), as the container image does"

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// copyIfChanged copies src to dst (mode 0755, directory 0711) unless dst has src's size and modification time.
func copyIfChanged(src, dst string) error {
	si, err := os.Stat(src)
	if err != nil {
		return err
	}
	if di, err := os.Stat(dst); err == nil && di.Size() == si.Size() && di.ModTime().Equal(si.ModTime()) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o711); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), agentName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy agent: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chtimes(tmp.Name(), si.ModTime(), si.ModTime()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// dynamic reports whether the executable is dynamically linked (built with cgo, as go run does by default): as
// the in-sandbox agent it would then need the host's loader and libc, which gVisor's sandbox lacks.
func dynamic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}
