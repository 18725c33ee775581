// Package gvisor is the sandbox backend on gVisor: runsc, an OCI runtime with a user-space kernel, runs the
// same bundle as package oci (one container per session, the agent as its process). Debian's runsc (2022)
// cannot serve here (statx always fails with EINVAL); a current runsc is needed, e.g.
// `go install gvisor.dev/gvisor/runsc@v0.0.0-20260905035102-160fafc42237`.
package gvisor

import (
	"cmp"
	"fmt"
	"os/exec"
	"runtime"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/oci"
)

// Config configures the Provider.
type Config struct {
	// Runsc is the runsc binary; default "runsc" on PATH.
	Runsc string
	// Platform is runsc's --platform; default "systrap".
	Platform string
	// OCI is the rest of the configuration (AgentPath is required); Runtime, RuntimeArgs and Name are set here.
	OCI oci.Config
}

// Provider provisions gVisor containers.
type Provider struct {
	*oci.Provider
}

var _ sandbox.Provider = (*Provider)(nil)

// Available reports whether runsc exists.
func Available(runsc string) error {
	if _, err := exec.LookPath(cmp.Or(runsc, "runsc")); err != nil {
		return fmt.Errorf("gvisor: runsc not found: %w", err)
	}
	return nil
}

// New returns a Provider for cfg.
func New(cfg Config) (*Provider, error) {
	c := cfg.OCI
	c.Runtime = cmp.Or(cfg.Runsc, "runsc")
	c.Name = "gvisor"
	// The sandbox's host tasks include runsc's own: an idle sandbox held 55-61 of them on a 2-vCPU VM (the
	// sentry's Go threads, the gofer, systrap's stubs), so a pids limit of 64 killed it for a fork bomb it
	// never ran once the machine was loaded.
	c.RuntimeTasks = cmp.Or(c.RuntimeTasks, 128)
	// runsc turns the profile's ENOSYS for clone3 into EPERM, so glibc could not start a thread
	// (oci.Config.AllowClone3).
	c.AllowClone3 = true
	// gVisor delivers SIGKILL and SIGSTOP from a pid namespace's members to its init, the agent: the shells
	// run in a pid namespace of their own, where the agent has no pid (agent.Config.ShellNamespace). The
	// launcher puts the x86_64 seccomp filter on the shell, which exists only there.
	c.ShellNamespace = runtime.GOARCH == "amd64"
	// gVisor's tmpfs takes no inode count: /tmp is a bounded tmpfs of the host's (oci.Config.HostTmp).
	c.HostTmp = true
	// The sandbox has only loopback; it reaches the egress proxy through the bound Unix socket, which gVisor
	// lets it open (--host-uds=open). --oci-seccomp applies the bundle's seccomp profile inside the sandbox
	// too (no nested user namespaces).
	c.RuntimeArgs = append([]string{"--platform=" + cmp.Or(cfg.Platform, "systrap"), "--network=none", "--host-uds=open", "--oci-seccomp"}, c.RuntimeArgs...)
	p, err := oci.New(c)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	return &Provider{p}, nil
}
