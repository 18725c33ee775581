package harness_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
)

// TestBudgetPauseAndRemove: a 1-cent budget stops the turn after the request that crossed it (its tool still
// runs); a message sent while paused waits, unprocessed, and wakes nothing; removing the budget, as the API does
// (the session updated and a session.updated appended with a wake-up), resumes the turn with the message.
func TestBudgetPauseAndRemove(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.start(f.config())
	id := f.session(toolset)
	cap1 := json.RawMessage(`{"type":"limit","max_list_cost":{"amount":"1","currency":"USD"}}`)
	ctx := context.Background()
	if _, err := f.store.SessionUpdate(ctx, id, func(s *apitype.Session) error { s.Budget = cap1; return nil }); err != nil {
		t.Fatal(err)
	}
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"ls"}`}},
			Usage: modeltest.Usage{InputTokens: 1000, OutputTokens: 500}},
		modeltest.Turn{Text: "Resumed.", Usage: modeltest.Usage{InputTokens: 10, OutputTokens: 10}},
	)
	f.say(id, "go")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, apitype.EventSessionUsage, toolResult, idle)
	if r := decode[apitype.SessionIdle](t, evs[len(evs)-1]).StopReason.Type; r != apitype.StopBudgetReached {
		t.Fatalf("stop reason %q", r)
	}
	u := decode[apitype.SessionUsageEvent](t, evs[5])
	if u.Usage.ListCostPicodollars != 10_500_000_000 || u.Usage.ListCost.Amount != "2" || string(u.Budget) != string(cap1) {
		t.Fatalf("session.usage %s", evs[5].Data)
	}
	sess, err := f.store.SessionGet(ctx, id)
	if err != nil || sess.Status != apitype.StatusIdle || sess.Usage.ListCostPicodollars != 10_500_000_000 {
		t.Fatalf("paused session: %v %+v", err, sess)
	}

	// A message while paused waits: no request, no second idle.
	more := f.say(id, "and more")
	time.Sleep(300 * time.Millisecond)
	if n := len(f.srv.Requests()); n != 1 {
		t.Fatalf("%d model requests while paused", n)
	}
	evs = f.events(id)
	assertTypes(t, evs[len(evs)-2:], idle, userMsg)
	if evs[len(evs)-1].ProcessedAt != nil {
		t.Fatal("the message sent while paused was processed")
	}

	// The budget removed: the turn resumes with the tool result and the message, and the session, now without a
	// budget, reports its usage with a null budget.
	if _, err := f.store.SessionUpdate(ctx, id, func(s *apitype.Session) error { s.Budget = nil; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Wake: true,
		Events: []apitype.NewEvent{{Type: apitype.EventSessionUpdated, Data: json.RawMessage(`{"budget":null}`), Processed: true}}}); err != nil {
		t.Fatal(err)
	}
	evs = f.waitIdle(id, 2)
	assertTypes(t, evs[len(evs)-7:], apitype.EventSessionUpdated, running, start, agentMsg, end, usage, idle)
	if u := decode[apitype.SessionUsageEvent](t, evs[len(evs)-2]); u.Usage.ListCostPicodollars != 10_500_000_000+180_000_000 || string(u.Budget) != "null" {
		t.Errorf("session.usage after the removal %s", evs[len(evs)-2].Data)
	}
	if r := decode[apitype.SessionIdle](t, evs[len(evs)-1]).StopReason.Type; r != apitype.StopEndTurn {
		t.Fatalf("after the removal: stop reason %q", r)
	}
	reqs := f.srv.Requests()
	if len(reqs) != 2 || !strings.Contains(string(reqs[1].Body), "and more") {
		t.Fatalf("%d requests; the resumed one lacks the message sent while paused", len(reqs))
	}
	for _, e := range evs {
		if e.ID == more.ID && e.ProcessedAt == nil {
			t.Fatal("the message sent while paused is still unprocessed")
		}
	}
	sess, err = f.store.SessionGet(ctx, id)
	if err != nil || sess.Usage.ListCostPicodollars != 10_500_000_000+10*3_000_000+10*15_000_000 || sess.Usage.ListCost.Amount != "2" {
		t.Fatalf("final usage: %v %+v", err, sess.Usage)
	}
}
