package bwrap_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
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
	sandboxtest.Require(t, "bwrap", bwrap.Available(""))
	p, err := bwrap.New(bwrap.Config{AgentPath: agentPath, StateDir: t.TempDir()})
	if err != nil {
		sandboxtest.Require(t, "bwrap", err)
	}
	return p
}

func TestConformance(t *testing.T) { sandboxtest.Run(t, newProvider, sandboxtest.Options{}) }

func TestRedTeam(t *testing.T) { sandboxtest.RunRedTeam(t, newProvider) }

func TestLimits(t *testing.T) { sandboxtest.RunLimits(t, newProvider) }

func TestNetwork(t *testing.T) { sandboxtest.RunNetwork(t, newProvider) }
