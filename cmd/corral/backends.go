package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/bench"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/gvisor"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/process"
)

// backend is one sandbox backend. The table below is the one place that names, finds and constructs them:
// serve and harness (--sandbox) and bench (--backends) pick from it.
type backend struct {
	name    string
	aliases []string
	// check says why the backend cannot run here (the reason a tool result and the log show), or nil. It may
	// resolve options (the runsc binary).
	check func(o *backendOptions) error
	// new constructs a provider whose state lives under stateDir ("" = the backend's default).
	new func(o *backendOptions, stateDir string) (sandbox.Provider, error)
	// remote: its sandboxes run on other machines, with their workspaces there: this host gives them no
	// workspace volumes.
	remote bool
}

// backendOptions are the settings every backend is constructed with.
type backendOptions struct {
	agentPath string // the in-sandbox agent binary (absolute)
	runsc     string // runsc binary for gvisor: a path, or a name looked up on PATH
	logger    *slog.Logger
	// uidBase is the first host uid of the isolating backends' sandboxes (0: the backend's default). Processes
	// that run sandboxes on one machine need ranges of their own: a uid is per sandbox only within a process.
	uidBase  int
	cpuShare int  // the sandboxes' common cpu.shares (0 = the default, < 0 = the kernel's)
	cpuIdle  bool // and cpu.idle on it
	warm     int  // bwrap's starts kept ready (bwrap.Config.Warm: 0 = one, < 0 = none)
	// kube configures the kubernetes backend; nil where its flags are not offered (bench).
	kube *kubeFlags
}

// runscFallback is where the project's install script puts a current, static runsc.
const runscFallback = "/opt/corral-runsc/runsc"

var backends = []backend{
	{
		name: "bwrap",
		check: func(*backendOptions) error {
			if err := bwrap.Available(""); err != nil {
				return errors.New("bubblewrap is not installed: apt-get install bubblewrap")
			}
			return needRoot("bwrap sandboxes run under uids of their own with cgroup limits")
		},
		new: func(o *backendOptions, dir string) (sandbox.Provider, error) {
			return bwrap.New(bwrap.Config{AgentPath: o.agentPath, StateDir: dir, Logger: o.logger, UIDBase: o.uidBase,
				CPUShare: o.cpuShare, CPUIdle: o.cpuIdle, Warm: o.warm})
		},
	},
	{
		name:    "oci",
		aliases: []string{"runc"},
		check: func(*backendOptions) error {
			if err := oci.Available("runc"); err != nil {
				return errors.New("runc is not installed: apt-get install runc")
			}
			return needRoot("runc sandboxes run under uids of their own with cgroup limits")
		},
		new: func(o *backendOptions, dir string) (sandbox.Provider, error) {
			return oci.New(ociConfig(o, dir))
		},
	},
	{
		name:    "gvisor",
		aliases: []string{"runsc"},
		check: func(o *backendOptions) error {
			o.runsc = findRunsc(o.runsc)
			if err := gvisor.Available(o.runsc); err != nil {
				return fmt.Errorf("runsc (gVisor) is not installed: %s not found; install a current static build (https://gvisor.dev/docs/user_guide/install/) and pass --runsc", o.runsc)
			}
			if err := needRoot("runsc sandboxes run under uids of their own with cgroup limits"); err != nil {
				return err
			}
			if dynamic(o.agentPath) {
				return fmt.Errorf("gvisor needs a statically linked agent, and %s is dynamically linked: build one with CGO_ENABLED=0 go build ./cmd/corral-sandbox-agent and pass --sandbox-agent (or build corral with CGO_ENABLED=0)", o.agentPath)
			}
			return nil
		},
		new: func(o *backendOptions, dir string) (sandbox.Provider, error) {
			return gvisor.New(gvisor.Config{Runsc: o.runsc, OCI: ociConfig(o, dir)})
		},
	},
	{
		name:    "kubernetes",
		aliases: []string{"k8s"},
		check: func(o *backendOptions) error {
			if o.kube == nil {
				return errors.New("the kubernetes backend is configured by the --k8s-* flags of serve, harness, worker and bench")
			}
			_, err := o.kube.config()
			return err
		},
		new: func(o *backendOptions, _ string) (sandbox.Provider, error) {
			return kubeProvider(o)
		},
		remote: true,
	},
	{
		name:  "process",
		check: func(*backendOptions) error { return nil },
		new: func(o *backendOptions, _ string) (sandbox.Provider, error) {
			return process.New(process.Config{AgentPath: o.agentPath, Logger: o.logger})
		},
	},
}

// lookupBackend finds a backend by name or alias.
func lookupBackend(name string) (*backend, error) {
	for i := range backends {
		if b := &backends[i]; b.name == name || slices.Contains(b.aliases, name) {
			return b, nil
		}
	}
	return nil, fmt.Errorf("unknown sandbox backend %q (want %s)", name, backendList())
}

// backendList names the backends: "bwrap, oci, gvisor, process".
func backendList() string {
	names := make([]string, len(backends))
	for i, b := range backends {
		names[i] = b.name
	}
	return strings.Join(names, ", ")
}

// provider checks that the backend can run here and constructs it.
func (b *backend) provider(o backendOptions, stateDir string) (sandbox.Provider, error) {
	if err := b.check(&o); err != nil {
		return nil, err
	}
	p, err := b.new(&o, stateDir)
	if err != nil {
		return nil, err // never a typed nil (*bwrap.Provider)(nil) in the interface
	}
	return p, nil
}

// benchBackends resolves corral bench's --backends against the table: every backend is returned, those that
// cannot run here with their reason.
func benchBackends(names []string, o backendOptions, starts int) []bench.Backend {
	var out []bench.Backend
	for _, name := range names {
		b, err := lookupBackend(name)
		if err != nil {
			out = append(out, bench.Backend{Name: name, Unavailable: fmt.Sprintf("unknown backend (want %s)", backendList())})
			continue
		}
		opts := o
		if err := b.check(&opts); err != nil {
			out = append(out, bench.Backend{Name: b.name, Unavailable: err.Error()})
			continue
		}
		be := bench.Backend{Name: b.name, New: func(dir string) (sandbox.Provider, error) { return b.new(&opts, dir) }}
		if !b.remote {
			be.MaxStarting = starts
		}
		out = append(out, be)
	}
	return out
}

func ociConfig(o *backendOptions, dir string) oci.Config {
	c := oci.Config{AgentPath: o.agentPath, Logger: o.logger, StateDir: dir, UIDBase: o.uidBase, CPUShare: o.cpuShare,
		CPUIdle: o.cpuIdle}
	if dir != "" {
		c.RuntimeRoot = filepath.Join(dir, "runtime")
	}
	return c
}

// findRunsc returns runsc as given, or the project's install location when the default name is not on PATH.
func findRunsc(runsc string) string {
	if runsc == "" {
		runsc = "runsc"
	}
	if _, err := exec.LookPath(runsc); err != nil && runsc == "runsc" && fileExists(runscFallback) {
		return runscFallback
	}
	return runsc
}

func needRoot(why string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root: %s (run corral as root, or use --sandbox process for development)", why)
	}
	return nil
}
