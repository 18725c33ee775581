package oci_test

import (
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var agentPath string

func TestMain(m *testing.M) { sandboxtest.Main(m, &agentPath) }

func newProvider(t testing.TB) sandbox.Provider {
	t.Helper()
	sandboxtest.Require(t, "oci", oci.Available("runc"))
	p, err := oci.New(oci.Config{AgentPath: agentPath, StateDir: t.TempDir(), RuntimeRoot: t.TempDir()})
	if err != nil {
		sandboxtest.Require(t, "oci", err)
	}
	return p
}

func TestConformance(t *testing.T) { sandboxtest.Run(t, newProvider, sandboxtest.Options{}) }

func TestRedTeam(t *testing.T) { sandboxtest.RunRedTeam(t, newProvider) }

func TestLimits(t *testing.T) { sandboxtest.RunLimits(t, newProvider, sandboxtest.Options{}) }

func TestNetwork(t *testing.T) { sandboxtest.RunNetwork(t, newProvider) }

func BenchmarkSandbox(b *testing.B) { sandboxtest.Bench(b, newProvider) }
