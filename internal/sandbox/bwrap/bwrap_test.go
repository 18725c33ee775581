package bwrap_test

import (
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var agentPath string

func TestMain(m *testing.M) { sandboxtest.Main(m, &agentPath) }

func newProvider(t testing.TB) sandbox.Provider {
	t.Helper()
	sandboxtest.Require(t, "bwrap", bwrap.Available(""))
	p, err := bwrap.New(bwrap.Config{AgentPath: agentPath, StateDir: sandboxtest.WorkspaceRoot(t)})
	if err != nil {
		sandboxtest.Require(t, "bwrap", err)
	}
	return p
}

func TestConformance(t *testing.T) { sandboxtest.Run(t, newProvider, sandboxtest.Options{}) }

func TestRedTeam(t *testing.T) { sandboxtest.RunRedTeam(t, newProvider) }

func TestLimits(t *testing.T) { sandboxtest.RunLimits(t, newProvider, sandboxtest.Options{}) }

func TestNetwork(t *testing.T) { sandboxtest.RunNetwork(t, newProvider) }

func BenchmarkSandbox(b *testing.B) { sandboxtest.Bench(b, newProvider) }

// BenchmarkSandboxNoCgroups measures bwrap without the cgroup setup, to show what the limits cost.
func BenchmarkSandboxNoCgroups(b *testing.B) {
	sandboxtest.Bench(b, func(t testing.TB) sandbox.Provider {
		sandboxtest.Require(t, "bwrap", bwrap.Available(""))
		p, err := bwrap.New(bwrap.Config{AgentPath: agentPath, StateDir: sandboxtest.WorkspaceRoot(t), NoCgroups: true})
		if err != nil {
			sandboxtest.Require(t, "bwrap", err)
		}
		return p
	})
}
