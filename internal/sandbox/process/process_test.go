package process_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
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

// TestRootFSRefused: a process cannot be given a root of its own, so a recipe on an image is refused.
func TestRootFSRefused(t *testing.T) {
	r := &sandbox.Recipe{SessionID: "img"}
	sb, err := newProvider(t).Provision(context.Background(), r, sandbox.HostDirs{Workspace: t.TempDir(), RootFS: t.TempDir()})
	if err == nil {
		sb.Close()
		t.Fatal("a RootFS was accepted")
	}
	if !errors.Is(err, sandbox.ErrRootFSUnsupported) || !strings.Contains(err.Error(), "bwrap, oci or gvisor") {
		t.Errorf("error: %v", err)
	}
}
