package harness_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
)

// provisioningHands are fake hands that can also provision eagerly.
type provisioningHands struct {
	fakeHands
	provisions atomic.Int32
}

func (h *provisioningHands) Provision(ctx context.Context, call *sandbox.Call) error {
	h.provisions.Add(1)
	call.OnProvision(sandbox.ProvisionReport{Backend: "fake"})
	call.OnProvision(sandbox.ProvisionReport{Backend: "fake", Done: true})
	return nil
}

// TestEagerHands: the coupled comparison mode provisions before the first model call of a session with built-in
// tools, and only then; the default (lazy) mode never calls Provision for a text turn.
func TestEagerHands(t *testing.T) {
	t.Parallel()
	for _, eager := range []bool{false, true} {
		f := newFixture(t)
		hands := &provisioningHands{}
		cfg := f.config()
		cfg.Hands, cfg.EagerHands = hands, eager
		f.srv.Script(modeltest.Turn{Text: "Hi."}, modeltest.Turn{Text: "Hi."})
		f.start(cfg)
		withTools := f.session(toolset)
		f.say(withTools, "hi")
		evs := f.waitIdle(withTools, 1)
		if eager {
			assertTypes(t, evs, userMsg, running, apitype.EventSpanSandboxProvisionStart, apitype.EventSpanSandboxProvisionEnd,
				start, agentMsg, end, usage, idle)
		} else {
			assertTypes(t, evs, userMsg, running, start, agentMsg, end, usage, idle)
		}
		noTools := f.session()
		f.say(noTools, "hi")
		assertTypes(t, f.waitIdle(noTools, 1), userMsg, running, start, agentMsg, end, usage, idle)
		want := int32(0)
		if eager {
			want = 1
		}
		if got := hands.provisions.Load(); got != want {
			t.Errorf("eager=%v: %d provisions, want %d", eager, got, want)
		}
	}
}
