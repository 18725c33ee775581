package process_test

import (
	"log/slog"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/process"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var agentPath string

func TestMain(m *testing.M) { sandboxtest.Main(m, &agentPath) }

func newProvider(t testing.TB) sandbox.Provider {
	t.Helper()
	p, err := process.New(process.Config{AgentPath: agentPath, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, newProvider, sandboxtest.Options{NotIsolated: true})
}

func BenchmarkSandbox(b *testing.B) { sandboxtest.Bench(b, newProvider) }
