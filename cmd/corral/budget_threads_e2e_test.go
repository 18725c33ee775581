package main

import (
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestBudgetSharedByThreads: through the official SDK, a 1-cent budget is the session's, shared by a coordinator
// and its child: the child's request crosses it (the coordinator's own are far under), the child pauses with
// budget_reached and says so to the coordinator, which pauses too, and the session idles with budget_reached;
// raising the budget (Sessions.Update) resumes the child's paused turn, whose report the coordinator gets.
func TestBudgetSharedByThreads(t *testing.T) {
	t.Parallel()
	m := newMultiE2E(t)
	worker := m.agent("worker", "ROLE-WORKER: you work.", builtinTools())
	coord := m.coordinator("spender", "ROLE-SPENDER: you delegate.", false, worker)
	sess, err := m.c.Beta.Sessions.New(m.ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(coord.ID)}, EnvironmentID: m.env,
		Budget: anthropic.BetaManagedAgentsBudgetLimitParam{MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: "1", Currency: "USD"}}})
	if err != nil {
		t.Fatal(err)
	}
	small := modeltest.Usage{InputTokens: 10, OutputTokens: 10}
	start := callTurn(byRole("ROLE-SPENDER"), "start_thread", map[string]any{"agent": "worker", "message": "Spend."})
	start.Usage = small
	wait := textTurn(byRole("ROLE-SPENDER"), "Waiting.")
	wait.Usage = small
	// claude-sonnet-4-5 at $3 and $15 per million: 1,000 in and 500 out is 1.05 cents, past the cap.
	spend := callTurn(byRole("ROLE-WORKER"), "bash", map[string]any{"command": "true"})
	spend.Usage = modeltest.Usage{InputTokens: 1000, OutputTokens: 500}
	done := textTurn(byRole("ROLE-WORKER"), "WORK-DONE")
	done.Usage = small
	m.model.Script(start, wait, spend, done)
	m.say(sess.ID, "Go.")
	evs, idle := m.waitIdle(sess.ID, "budget_reached")
	if n := countType(evs, "session.status_idle"); n != 1 {
		t.Errorf("the session idled %d times before the budget: %v", n, evTypes(evs))
	}
	wth := m.thread(sess.ID, "worker")
	var childPaused bool
	for _, ev := range m.threadEvents(sess.ID, wth.ID) {
		if ev.Type == "session.thread_status_idle" {
			childPaused = ev.AsSessionThreadStatusIdle().StopReason.Type == "budget_reached"
		}
	}
	got, err := m.c.Beta.Sessions.Get(m.ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	// The session's cost is both threads': 1.05 cents from the child and 0.018 per coordinator request (one or two,
	// as the child's crossing races the coordinator's second), rounded up to 2 cents.
	if !childPaused || idle.StopReason.Type != "budget_reached" || got.Status != "idle" || got.Usage.ListCost.Amount != "2" {
		t.Fatalf("paused: child %v, session %s, usage %s", childPaused, got.Status, got.Usage.RawJSON())
	}
	if wth.Usage.InputTokens < 1000 {
		t.Errorf("the child's own usage %s", wth.Usage.RawJSON())
	}
	before := len(m.model.Requests())

	if _, err := m.c.Beta.Sessions.Update(m.ctx, sess.ID, anthropic.BetaSessionUpdateParams{
		Budget: anthropic.BetaManagedAgentsBudgetLimitParam{MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: "100", Currency: "USD"}},
	}); err != nil {
		t.Fatal(err)
	}
	evs, _ = m.waitIdle(sess.ID, "end_turn")
	if len(m.model.Requests()) <= before {
		t.Fatalf("nothing resumed after the raise: %v", evTypes(evs))
	}
	reqs := m.requests("ROLE-SPENDER")
	if last := reqs[len(reqs)-1]; !strings.Contains(string(last.Body), "WORK-DONE") {
		t.Errorf("the coordinator's last request misses the child's report after the raise")
	}
}
