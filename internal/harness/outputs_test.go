package harness_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
)

// collectingHands are fake hands that collect outputs, failing when told to.
type collectingHands struct {
	fakeHands
	collections atomic.Int32
	fail        atomic.Bool
}

func (h *collectingHands) CollectOutputs(ctx context.Context, r *sandbox.Recipe) error {
	h.collections.Add(1)
	if h.fail.Load() {
		return errors.New("the session's outputs exceed their quota: not collected: big.bin")
	}
	return nil
}

// TestTurnEndCollectsOutputs: the brain has the hands collect the session's outputs before the idle that ends a
// turn; a failure is a session.error in the same append, and the turn still ends.
func TestTurnEndCollectsOutputs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hands := &collectingHands{}
	cfg := f.config()
	cfg.Hands = hands
	f.srv.Script(modeltest.Turn{Text: "Done."}, modeltest.Turn{Text: "Done again."})
	f.start(cfg)
	s := f.session(toolset)
	f.say(s, "hi")
	assertTypes(t, f.waitIdle(s, 1), userMsg, running, start, agentMsg, end, usage, idle)
	if n := hands.collections.Load(); n != 1 {
		t.Fatalf("%d collections after one turn, want 1", n)
	}
	hands.fail.Store(true)
	f.say(s, "again")
	evs := f.waitIdle(s, 2)
	assertTypes(t, evs, userMsg, running, start, agentMsg, end, usage, idle, userMsg, running, start, agentMsg, end, usage, sessErr, idle)
	var se apitype.SessionError
	if err := evs[len(evs)-2].DecodeData(&se); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(se.Error.Message, "big.bin") || se.Error.RetryStatus.Type != apitype.RetryStatusRetrying {
		t.Errorf("session.error %+v", se.Error)
	}
}
