package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/process"
)

// handsFlags pick and configure the sandbox backend.
type handsFlags struct {
	kind  string
	agent string
	idle  time.Duration
}

func defaultSandbox() string {
	if runtime.GOOS == "linux" {
		return "bwrap"
	}
	return "none"
}

func (f *handsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kind, "sandbox", envOr("CORRAL_SANDBOX", defaultSandbox()), "sandbox `backend`: bwrap, oci (runc), process (no isolation: development only) or none (env CORRAL_SANDBOX)")
	fs.StringVar(&f.agent, "sandbox-agent", os.Getenv("CORRAL_SANDBOX_AGENT"), "`path` of the in-sandbox agent binary (default: corral-sandbox-agent beside this binary, then on PATH)")
	fs.DurationVar(&f.idle, "sandbox-idle", 10*time.Minute, "how long an unused sandbox lives before it is reaped (its workspace stays)")
}

// build returns the pool of hands, or nil with a warning when the backend cannot run here: sessions still
// work, and a built-in tool call then gets an error result that says why.
func (f *handsFlags) build(dataDir string, logger *slog.Logger) (*sandbox.Pool, error) {
	if f.kind == "none" {
		logger.Warn("no sandbox backend: built-in tools (bash, read, write, ...) will fail")
		return nil, nil
	}
	// Sandboxes run as their own uids and must reach their workspaces under the data dir: let others search
	// (not list) it. The database and keys in it stay 0600 and outside every sandbox's mounts.
	if fi, err := os.Stat(dataDir); err == nil && fi.Mode().Perm()&0o011 != 0o011 {
		if err := os.Chmod(dataDir, fi.Mode().Perm()|0o011); err != nil {
			return nil, err
		}
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
	return sandbox.NewPool(sandbox.PoolConfig{Provider: provider, WorkspaceRoot: root, IdleTimeout: f.idle, Logger: logger})
}

func (f *handsFlags) provider(dataDir string, logger *slog.Logger) (sandbox.Provider, error) {
	agentPath, err := f.agentPath()
	if err != nil {
		return nil, err
	}
	state, err := filepath.Abs(filepath.Join(dataDir, "sandboxes"))
	if err != nil {
		return nil, err
	}
	switch f.kind {
	case "bwrap":
		return bwrap.New(bwrap.Config{AgentPath: agentPath, StateDir: state, Logger: logger})
	case "oci", "runc":
		return oci.New(oci.Config{AgentPath: agentPath, StateDir: state, Logger: logger})
	case "process":
		return process.New(process.Config{AgentPath: agentPath, Logger: logger})
	}
	return nil, fmt.Errorf("unknown sandbox backend %q (want bwrap, oci, process or none)", f.kind)
}

func (f *handsFlags) agentPath() (string, error) {
	if f.agent != "" {
		return filepath.Abs(f.agent)
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "corral-sandbox-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("corral-sandbox-agent"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("corral-sandbox-agent not found: build it (CGO_ENABLED=0 go build ./cmd/corral-sandbox-agent) and pass --sandbox-agent")
}
