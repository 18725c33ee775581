package process_test

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/process"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var agentPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "corral-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentPath, err = sandboxtest.BuildAgent(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newProvider(t *testing.T) sandbox.Provider {
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
