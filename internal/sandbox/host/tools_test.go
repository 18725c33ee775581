package host

import (
	"slices"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
)

// TestToolsAsDeclared: the port's tools are the agent's, in its order, and the failure the agent reports and its
// bound on shells are the port's.
func TestToolsAsDeclared(t *testing.T) {
	t.Parallel()
	got, want := Tools(), agent.Tools()
	if len(got) != len(want) {
		t.Fatalf("%d tools, the agent declares %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Description != want[i].Description || !slices.Equal(got[i].InputSchema, want[i].InputSchema) {
			t.Errorf("tool %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if agent.FailureTimeout != sandbox.FailureTimeout {
		t.Errorf("agent.FailureTimeout = %q, sandbox.FailureTimeout = %q", agent.FailureTimeout, sandbox.FailureTimeout)
	}
	if agent.MaxShells != sandbox.MaxShells {
		t.Errorf("agent.MaxShells = %d, sandbox.MaxShells = %d", agent.MaxShells, sandbox.MaxShells)
	}
}
