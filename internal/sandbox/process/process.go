// Package process is the development-only sandbox backend: the in-sandbox agent runs as a plain child process
// of the server, with the server's uid, filesystem and network. It isolates nothing; it exists to run Corral
// where no isolating backend is available. Tool timeouts and output caps apply; memory, pids and CPU limits and
// the networking policy do not, and it cannot run on an environment image (HostDirs.RootFS). The file tools are
// confined to the workspace, as in the reference toolset, but bash is not.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/host"
)

// Config configures the Provider.
type Config struct {
	// AgentPath is the corral-sandbox-agent binary. Required.
	AgentPath string
	// Logger receives the warning that nothing is isolated; default slog.Default().
	Logger *slog.Logger
}

// Provider starts agents as plain processes.
type Provider struct {
	cfg Config
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns a Provider and logs a warning: this backend does not isolate anything.
func New(cfg Config) (*Provider, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AgentPath == "" {
		return nil, errors.New("process: AgentPath is required")
	}
	if _, err := os.Stat(cfg.AgentPath); err != nil {
		return nil, fmt.Errorf("process: agent binary: %w", err)
	}
	cfg.Logger.Warn("sandbox backend 'process' isolates nothing: model-written code runs as the server's user with its files and network; use it for development only")
	return &Provider{cfg: cfg}, nil
}

// Name returns "process".
func (p *Provider) Name() string { return "process" }

// Capabilities: a plain process in a workspace of this host, on the host's filesystem and network.
func (p *Provider) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{HostWorkspace: true, RootFS: sandbox.RootFSNone, Egress: sandbox.EgressHostNetwork}
}

// Tools are the in-sandbox agent's built-in tools.
func (p *Provider) Tools() []sandbox.Tool { return host.Tools() }

// Provision starts an agent in the workspace directory (dirs.Workspace). It refuses a RootFS
// (sandbox.ErrRootFSUnsupported): a plain process sees the host's filesystem and cannot run on an image.
func (p *Provider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (sandbox.Sandbox, error) {
	if dirs.RootFS != "" {
		return nil, fmt.Errorf("process: %w: the process backend isolates nothing and runs every tool on the host's own /usr; use bwrap, oci or gvisor for environments with images", sandbox.ErrRootFSUnsupported)
	}
	ws := dirs.Workspace
	if !filepath.IsAbs(ws) {
		return nil, fmt.Errorf("process: workspace %q must be an absolute path", ws)
	}
	if err := os.MkdirAll(ws, 0o700); err != nil {
		return nil, fmt.Errorf("process: workspace: %w", err)
	}
	cmd := exec.Command(p.cfg.AgentPath, "-workspace", ws, "-confine", "-proxy-socket", "")
	cmd.Dir = ws
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + ws,
		"LANG=C.UTF-8",
		"TERM=dumb",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	proc, err := host.StartProcess(cmd)
	if err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	return host.NewSandbox(proc, r.Limits, nil), nil
}
