package harness_test

import (
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestThreadsTakeoverChildMidTurn: the brain dies while a child is in the middle of a model call and the
// coordinator waits for it, its own turn over (the primary idle, the session running). The next brain takes the
// session over as it does a single-agent one: one session.error from the brain, crash_recovered, on the
// session's stream; the child asks the model again, finishes and reports; the session idles once.
func TestThreadsTakeoverChildMidTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, _ := f.multiSession("", toolset)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{
			{Name: "start_thread", Input: `{"agent":"researcher","message":"Find the answer."}`}}},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "Waiting for the researcher."},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "brain A's answer", Hold: hold},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "The answer is 42."},
	)
	cs := &crashable{Store: f.store}
	cfgA := f.config()
	cfgA.Store, cfgA.LeaseTTL, cfgA.Owner, cfgA.Workers = cs, 300*time.Millisecond, "brain-a", 1
	f.start(cfgA)
	f.say(sid, "Coordinate the work.")
	// The coordinator's turn is over and the researcher's model call held.
	f.waitFor(sid, "the coordinator's idle", func([]apitype.Event) bool {
		return count(f.threadEvents(sid, ""), apitype.EventSessionThreadStatusIdle) == 1 &&
			slices.ContainsFunc(f.srv.Requests(), func(r modeltest.Request) bool { return bySystem(researcherPrompt)(&r) })
	})
	f.waitCalls(sid, 3) // and the researcher's request start in the log
	cs.dead.Store(true) // brain A dies: no release, no further appends

	cfgB := f.config()
	cfgB.Owner, cfgB.LeaseTTL = "brain-b", 5*time.Second // long: a lapsed lease of its own would be a second takeover
	f.start(cfgB)
	evs := f.waitFor(sid, "every thread done", func(evs []apitype.Event) bool {
		if !sessionIdle(evs) {
			return false
		}
		ths := f.threads(sid)
		done := len(ths) == 2
		for _, th := range ths {
			done = done && th.Status == apitype.StatusIdle
		}
		return done
	})

	if n := count(evs, apitype.EventSessionError); n != 1 {
		t.Fatalf("%d session.error on the session's stream, want 1 (the takeover's): %v", n, types(evs))
	}
	for _, e := range evs {
		if e.Type == apitype.EventSessionError {
			assertRecovered(t, e)
		}
	}
	if count(evs, running) != 1 || count(evs, idle) != 1 || count(evs, apitype.EventAgentThreadMessageReceived) != 1 {
		t.Errorf("session's stream: %v", types(evs))
	}
	child := f.threads(sid)[1]
	cev := f.threadEvents(sid, child.ID)
	if i := slices.IndexFunc(cev, func(e apitype.Event) bool { return e.Type == agentMsg }); i < 0 ||
		decode[apitype.AgentMessage](t, cev[i]).Content[0].Text != "The answer is 42." || count(cev, agentMsg) != 1 {
		t.Errorf("the researcher's events: %v", types(cev))
	}
	// Nothing of any thread appended twice: every event once, in the whole log.
	seen := map[string]bool{}
	for _, e := range f.allEvents(sid) {
		if seen[e.ID] {
			t.Errorf("event %s (%s) twice", e.ID, e.Type)
		}
		seen[e.ID] = true
	}
	sess, err := f.store.SessionGet(t.Context(), sid)
	if err != nil || sess.Stats.ActiveSeconds <= 0 {
		t.Errorf("session %v: active seconds %+v", err, sess.Stats)
	}
}
