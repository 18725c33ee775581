package main

import (
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/sandbox/gvisor"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/process"
	"github.com/corralhq/corral/internal/workspace"
)

// handsFlags pick and configure the sandbox backend.
type handsFlags struct {
	kind     string
	agent    string
	runsc    string
	idle     time.Duration
	memoryMB int64
	pids     int
	cpus     float64
	timeout  time.Duration
}

func defaultSandbox() string {
	if runtime.GOOS == "linux" {
		return "bwrap"
	}
	return "none"
}

func (f *handsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kind, "sandbox", envOr("CORRAL_SANDBOX", defaultSandbox()), "sandbox `backend`: bwrap, oci (runc), gvisor (runsc), process (no isolation: development only) or none (env CORRAL_SANDBOX)")
	fs.StringVar(&f.agent, "sandbox-agent", os.Getenv("CORRAL_SANDBOX_AGENT"), "`path` of the in-sandbox agent binary (default: corral-sandbox-agent beside this binary or on PATH, else this binary)")
	fs.StringVar(&f.runsc, "runsc", envOr("CORRAL_RUNSC", "runsc"), "runsc `binary` for --sandbox gvisor (a current, static build; env CORRAL_RUNSC)")
	fs.DurationVar(&f.idle, "sandbox-idle", 10*time.Minute, "how long an unused sandbox lives before it is reaped (its workspace stays)")
	fs.Int64Var(&f.memoryMB, "sandbox-memory", 2048, "memory limit of each sandbox in `MiB`")
	fs.IntVar(&f.pids, "sandbox-pids", 1024, "process limit of each sandbox")
	fs.Float64Var(&f.cpus, "sandbox-cpus", 0, "CPU limit of each sandbox in `cores` (0 = unlimited)")
	fs.DurationVar(&f.timeout, "tool-timeout", 2*time.Minute, "default wall-clock limit of one tool call (bash's timeout_ms overrides it)")
}

func (f *handsFlags) limits() sandbox.Limits {
	return sandbox.Limits{MemoryBytes: f.memoryMB << 20, Pids: f.pids, CPUQuota: f.cpus, CommandTimeout: f.timeout}
}

// build returns the pool of hands, or nil with a warning when the backend cannot run here: sessions still
// work, and a built-in tool call then gets an error result that says why.
func (f *handsFlags) build(dataDir string, logger *slog.Logger) (*sandbox.Pool, error) {
	if f.kind == "none" {
		logger.Warn("no sandbox backend: built-in tools (bash, read, write, ...) will fail")
		return nil, nil
	}
	provider, err := f.provider(dataDir, logger)
	if err != nil {
		logger.Warn("sandbox backend unavailable: built-in tools will fail until it is fixed", "sandbox", f.kind, "err", err)
		return nil, nil
	}
	root, err := filepath.Abs(filepath.Join(dataDir, "workspaces"))
	if err != nil {
		return nil, err
	}
	// Repositories are cloned on the server, under the same rules as the sandbox's egress proxy.
	placer, err := workspace.New(workspace.Config{Resolve: egress.Resolve, Logger: logger})
	if err != nil {
		return nil, err
	}
	return sandbox.NewPool(sandbox.PoolConfig{
		Provider: provider, WorkspaceRoot: root, IdleTimeout: f.idle, Logger: logger, Limits: f.limits(),
		Placer: placer,
	})
}

func (f *handsFlags) provider(dataDir string, logger *slog.Logger) (sandbox.Provider, error) {
	agentPath, err := f.agentPath(dataDir)
	if err != nil {
		return nil, err
	}
	switch f.kind {
	case "bwrap":
		return bwrap.New(bwrap.Config{AgentPath: agentPath, Logger: logger})
	case "oci", "runc":
		return oci.New(oci.Config{AgentPath: agentPath, Logger: logger})
	case "gvisor":
		if dynamic(agentPath) {
			return nil, fmt.Errorf("gvisor needs a statically linked agent, and %s is dynamically linked: build one with CGO_ENABLED=0 go build ./cmd/corral-sandbox-agent and pass --sandbox-agent (or build corral with CGO_ENABLED=0)", agentPath)
		}
		return gvisor.New(gvisor.Config{Runsc: f.runsc, OCI: oci.Config{AgentPath: agentPath, Logger: logger}})
	case "process":
		return process.New(process.Config{AgentPath: agentPath, Logger: logger})
	}
	return nil, fmt.Errorf("unknown sandbox backend %q (want bwrap, oci, gvisor, process or none)", f.kind)
}

// agentName is the in-sandbox agent's binary name; the corral binary runs as the agent under it.
const agentName = "corral-sandbox-agent"

// agentPath finds the in-sandbox agent: --sandbox-agent, else corral-sandbox-agent beside this binary or on
// PATH, else a copy of this binary (which runs as the agent under that name) in the data dir, where sandbox
// uids can reach it (go run builds into a private directory).
func (f *handsFlags) agentPath(dataDir string) (string, error) {
	if f.agent != "" {
		return filepath.Abs(f.agent)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own binary: %w", err)
	}
	if p := filepath.Join(filepath.Dir(exe), agentName); fileExists(p) {
		return p, nil
	}
	if p, err := exec.LookPath(agentName); err == nil {
		return filepath.Abs(p)
	}
	dst, err := filepath.Abs(filepath.Join(dataDir, "bin", agentName))
	if err != nil {
		return "", err
	}
	return dst, copyIfChanged(exe, dst)
}

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
