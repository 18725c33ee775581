package gvisor_test

import (
	"cmp"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/corralhq/corral/internal/proxy/proxytest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/gvisor"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var agentPath string

func TestMain(m *testing.M) { sandboxtest.Main(m, &agentPath) }

// runsc is the runsc to test: $CORRAL_RUNSC, or runsc on PATH.
var runsc = cmp.Or(os.Getenv("CORRAL_RUNSC"), "runsc")

func newProvider(t testing.TB) sandbox.Provider {
	t.Helper()
	sandboxtest.Require(t, "gvisor", gvisor.Available(runsc))
	root := t.TempDir()
	// runsc --network=none leaves a namespace file mounted in its root.
	t.Cleanup(func() { _ = syscall.Unmount(filepath.Join(root, "null-netns"), syscall.MNT_DETACH) })
	p, err := gvisor.New(gvisor.Config{Runsc: runsc, OCI: oci.Config{AgentPath: agentPath, StateDir: t.TempDir(), RuntimeRoot: root}})
	if err != nil {
		sandboxtest.Require(t, "gvisor", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// newDefaultProvider is newProvider in the default runtime root and state directory, which New sweeps.
func newDefaultProvider(t testing.TB) sandbox.Provider {
	t.Helper()
	sandboxtest.Require(t, "gvisor", gvisor.Available(runsc))
	p, err := gvisor.New(gvisor.Config{Runsc: runsc, OCI: oci.Config{AgentPath: agentPath}})
	if err != nil {
		sandboxtest.Require(t, "gvisor", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestCrash: gVisor sandboxes die with a SIGKILLed server, and the next start sweeps the runtime state, bundles
// and cgroups it left.
func TestCrash(t *testing.T) { sandboxtest.RunCrash(t, newDefaultProvider) }

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, newProvider, sandboxtest.Options{NoHostProcesses: true})
}

func TestRedTeam(t *testing.T) { sandboxtest.RunRedTeam(t, newProvider) }

func TestAgentGuard(t *testing.T) {
	sandboxtest.RunAgentGuard(t, newProvider, sandboxtest.GuardOptions{ShellNamespace: "gVisor does not protect a pid namespace's init from its members' SIGKILL and SIGSTOP (pkg/sentry/kernel/task_signals.go)"})
}

func TestRepository(t *testing.T) { sandboxtest.RunRepository(t, newProvider, proxytest.Host) }

func TestRedTeamRepository(t *testing.T) {
	sandboxtest.RunRedTeamRepository(t, newProvider, proxytest.Host)
}

func TestNetwork(t *testing.T) { sandboxtest.RunNetwork(t, newProvider) }

func TestQuota(t *testing.T) {
	sandboxtest.RunQuota(t, newProvider)
}

func TestHardening(t *testing.T) {
	sandboxtest.RunHardening(t, newProvider, sandboxtest.HardeningOptions{AllowClone3: true})
}

func BenchmarkSandbox(b *testing.B) { sandboxtest.Bench(b, newProvider) }

func TestLimits(t *testing.T) {
	sandboxtest.RunLimits(t, newProvider, sandboxtest.Options{NoHostProcesses: true})
}
