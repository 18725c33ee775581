package harness

import (
	"encoding/json"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/price"
)

// budgetThread is a thread of a session on modelID with the budget, priced at the built-in table.
func budgetThread(modelID, budget string) *thread {
	sess := &apitype.Session{ID: "sesn_x", Budget: json.RawMessage(budget)}
	sess.Agent.Model.ID = modelID
	return &thread{run: &run{b: &Brain{cfg: Config{Prices: price.Default()}}, sess: sess, budget: sess.Budget},
		agent: &apitype.ThreadAgent{Model: sess.Agent.Model}}
}

func TestBudgetCheck(t *testing.T) {
	cap1 := `{"type":"limit","max_list_cost":{"amount":"1","currency":"USD"}}`
	th := budgetThread("claude-sonnet-4-5", cap1)
	if th.overBudget(th.budget) {
		t.Fatal("over budget before any request")
	}
	// 300 input tokens at $3/M: 0.09 cents, under the cap; the total and the session.usage event show it.
	total, evs := th.addUsage(&model.Response{Usage: apitype.SpanUsage{InputTokens: 300}})
	if total.ListCostPicodollars != 900_000_000 || total.ListCost.Amount != "1" || len(evs) != 1 || th.overBudget(th.budget) {
		t.Fatalf("after 300 tokens: %+v, %d events, over %v", total, len(evs), th.overBudget(th.budget))
	}
	var ue apitype.SessionUsageEvent
	if err := json.Unmarshal(evs[0].Data, &ue); err != nil || evs[0].Type != apitype.EventSessionUsage ||
		ue.Usage.ListCost.Amount != "1" || string(ue.Budget) != cap1 {
		t.Fatalf("session.usage %s %s", evs[0].Type, evs[0].Data)
	}
	// Cache writes by lifetime and reads: 100 5m ($3.75/M), 200 1h ($6/M), 1000 reads ($0.30/M) = 0.0975 cents.
	total, _ = th.addUsage(&model.Response{Usage: apitype.SpanUsage{CacheCreationInputTokens: 300, CacheReadInputTokens: 1000},
		CacheCreation1h: 200})
	if total.ListCostPicodollars != 900_000_000+375_000_000+1_200_000_000+300_000_000 || total.CacheCreation.Ephemeral5mInputTokens != 100 ||
		total.CacheCreation.Ephemeral1hInputTokens != 200 || th.overBudget(th.budget) {
		t.Fatalf("after cache tokens: %+v %+v", total, total.CacheCreation)
	}
	// 2 server-side web searches at $10 per 1,000: 2 cents more, over the 1-cent cap.
	total, _ = th.addUsage(&model.Response{ServerToolUse: apitype.ServerToolUse{WebSearchRequests: 2}})
	if total.ListCostPicodollars != 2_775_000_000+2*10_000_000_000 || total.ServerToolUse.WebSearchRequests != 2 || !th.overBudget(th.budget) {
		t.Fatalf("after 2 searches: %+v", total)
	}
	// 2000 output tokens at $15/M: 3 cents more, still over.
	th.addUsage(&model.Response{Usage: apitype.SpanUsage{OutputTokens: 2000}})
	if !th.overBudget(th.budget) {
		t.Fatal("not over budget at 5.3 cents of 1")
	}
	// Raised above the cost: under again; removed: no cap.
	if th.overBudget(json.RawMessage(`{"type":"limit","max_list_cost":{"amount":"6","currency":"USD"}}`)) || th.overBudget(json.RawMessage("null")) {
		t.Fatal("a raised or removed budget still stops")
	}
	// Reached exactly: stopped (the cap is reached at the cap).
	exact := budgetThread("claude-sonnet-4-5", cap1)
	exact.addUsage(&model.Response{Usage: apitype.SpanUsage{InputTokens: 3334}}) // 1.0002 cents
	exact2 := budgetThread("claude-sonnet-4-5", cap1)
	exact2.usage.ListCostPicodollars = int64(price.PicoPerCent)
	if !exact.overBudget(exact.budget) || !exact2.overBudget(exact2.budget) {
		t.Fatal("a cost at or past the cap does not stop")
	}

	// A budgeted session on a model with no price never runs; an unbudgeted one runs and shows no list cost, and
	// its session.usage says so, with a null budget.
	unpriced := budgetThread("local/llama", cap1)
	if !unpriced.overBudget(unpriced.budget) {
		t.Fatal("a budget on an unpriced model does not stop")
	}
	free := budgetThread("local/llama", "")
	total, evs = free.addUsage(&model.Response{Usage: apitype.SpanUsage{InputTokens: 10}})
	if free.overBudget(free.budget) || total.ListCost != nil || !total.Unpriced || len(evs) != 1 {
		t.Fatalf("unbudgeted unpriced: %+v, %d events", total, len(evs))
	}
	ue = apitype.SessionUsageEvent{}
	if err := json.Unmarshal(evs[0].Data, &ue); err != nil || evs[0].Type != apitype.EventSessionUsage ||
		ue.Usage.InputTokens != 10 || ue.Usage.ListCost != nil || string(ue.Budget) != "null" {
		t.Fatalf("unbudgeted session.usage %s %s", evs[0].Type, evs[0].Data)
	}
}

func TestDeriveBudget(t *testing.T) {
	ev := func(data string) apitype.Event {
		return apitype.Event{Type: apitype.EventSessionUpdated, Data: json.RawMessage(data)}
	}
	tl := &tail{events: []apitype.Event{ev(`{"budget":{"type":"limit","max_list_cost":{"amount":"5","currency":"USD"}}}`), ev(`{"title":"budget"}`)}}
	st, err := derive(tl, execHands)
	if err != nil || !st.budgetSet || string(st.budget) != `{"type":"limit","max_list_cost":{"amount":"5","currency":"USD"}}` {
		t.Fatalf("budget %s set %v: %v", st.budget, st.budgetSet, err)
	}
	tl.events = append(tl.events, ev(`{"budget":null}`))
	if st, _ = derive(tl, execHands); !st.budgetSet || string(st.budget) != "null" {
		t.Fatalf("removed budget: %s", st.budget)
	}
	if st, _ = derive(&tail{events: []apitype.Event{ev(`{"title":"x"}`)}}, execHands); st.budgetSet {
		t.Fatal("an update without a budget sets one")
	}
}

// BenchmarkBudgetCheck is the check made before each model request of a budgeted session: read the budget,
// look the model's price up, compare the cost so far with the cap.
func BenchmarkBudgetCheck(b *testing.B) {
	th := budgetThread("claude-sonnet-4-5-20250929", `{"type":"limit","max_list_cost":{"amount":"2500","currency":"USD"}}`)
	th.usage.ListCostPicodollars = 1_000_000_000_000
	b.ReportAllocs()
	for b.Loop() {
		if th.overBudget(th.budget) {
			b.Fatal("over budget")
		}
	}
}
