package harness

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/price"
)

// The session's budget and what its model requests cost.
//
// Every model request is priced at the list rates of internal/price and added to the session's usage in the
// same append as its span.model_request_end, followed by a session.usage event carrying the usage and the
// budget (null for a session without one): one per model request, whoever makes it (the agent, a grader, the
// advisor, a compaction), so a client following the stream sees the session's running cost.
// The budget is read from the log: the last session.updated of the tail that names one (the API appends it with
// a wake-up when it changes the budget), else the session's at the run's start. Before each model request
// (modelStep) a session whose list cost has reached its budget idles with budget_reached instead; the request
// in flight when the cap is crossed finishes. A budget raised above the cost, or removed, wakes the session and
// the paused work resumes without a client event.

// budgetNow is the session's current budget (nil for none): the last one the tail's session.updated events set,
// else the session's own.
func (t *thread) budgetNow(st *state) json.RawMessage {
	if st.budgetSet {
		return st.budget
	}
	return t.sess.Budget
}

// overBudget reports whether the session may make no more model requests: its list cost has reached its budget,
// or it has a budget its model cannot be priced against (never priced at zero).
func (t *thread) overBudget(raw json.RawMessage) bool {
	b, err := apitype.ParseBudget(raw)
	if err != nil || b == nil {
		return err != nil // a budget that cannot be read stops the session rather than running uncapped
	}
	return budgetReached(b, &t.usage, t.b.cfg.Prices.Priced(t.agent.Model.ID))
}

// holdForBudget is the check before a model request (the agent's or a grader's): over budget, the session idles
// once with budget_reached (handled) and then waits (errWaiting) for a raised or removed budget.
func (t *thread) holdForBudget(st *state) (handled bool, err error) {
	var over bool
	t.locked(func() { over = t.overBudget(t.budget) })
	if !over {
		return false, nil
	}
	if st.paused() {
		return false, errWaiting
	}
	_, err = t.append(apitype.StatusIdle, nil, idleEvent(apitype.StopReason{Type: apitype.StopBudgetReached}))
	return true, err
}

// budgetReached is the check made before each model request: the cost so far at or past the cap, or a cost
// that cannot be known.
func budgetReached(b *apitype.Budget, u *apitype.SessionUsage, priced bool) bool {
	cents, ok := b.Cents()
	if !ok || !priced || u.Unpriced {
		return true
	}
	return price.Pico(u.ListCostPicodollars) >= price.FromCents(cents)
}

// addUsage adds a model request's usage, priced at the model's list rates, to the session's, and returns the new
// total (for the append that records it) with the event that reports it: session.usage, with the budget or null.
func (t *thread) addUsage(resp *model.Response) (*apitype.SessionUsage, []apitype.NewEvent) {
	return t.addUsageFor(resp, t.agent.Model.ID)
}

// addUsageFor is addUsage for a request to modelID (the grader's model may not be the agent's). In a multi-agent
// session the thread's own usage counts it too.
func (t *thread) addUsageFor(resp *model.Response, modelID string) (*apitype.SessionUsage, []apitype.NewEvent) {
	if t.rec != nil {
		t.multi.mu.Lock()
		defer t.multi.mu.Unlock()
		t.addTo(&t.sched.usage, resp, modelID)
	}
	t.addTo(&t.usage, resp, modelID)
	total := t.usage
	return &total, []apitype.NewEvent{t.usageEvent()}
}

// addTo adds a model request's usage, priced at modelID's list rates, to u.
func (t *thread) addTo(u *apitype.SessionUsage, resp *model.Response, modelID string) {
	ru := resp.Usage
	u.InputTokens += ru.InputTokens
	u.OutputTokens += ru.OutputTokens
	u.CacheReadInputTokens += ru.CacheReadInputTokens
	w1h := min(max(resp.CacheCreation1h, 0), ru.CacheCreationInputTokens)
	if ru.CacheCreationInputTokens > 0 {
		cc := apitype.CacheCreation{}
		if u.CacheCreation != nil {
			cc = *u.CacheCreation
		}
		cc.Ephemeral5mInputTokens += ru.CacheCreationInputTokens - w1h
		cc.Ephemeral1hInputTokens += w1h
		u.CacheCreation = &cc
	}
	u.ServerToolUse.WebSearchRequests += resp.ServerToolUse.WebSearchRequests
	u.ServerToolUse.WebFetchRequests += resp.ServerToolUse.WebFetchRequests
	if r, ok := t.b.cfg.Prices.Rates(modelID); ok && !u.Unpriced {
		cost := r.Cost(price.Tokens{Input: ru.InputTokens, Output: ru.OutputTokens, CacheWrite5m: ru.CacheCreationInputTokens - w1h,
			CacheWrite1h: w1h, CacheRead: ru.CacheReadInputTokens})
		cost = price.Add(cost, price.WebSearchCost(resp.ServerToolUse.WebSearchRequests))
		total := price.Add(price.Pico(u.ListCostPicodollars), cost)
		u.ListCostPicodollars = int64(total)
		u.ListCost = &apitype.Money{Amount: strconv.FormatInt(total.Cents(), 10), Currency: "USD"}
	} else {
		// One request the table cannot price makes the list cost unknown for good.
		u.Unpriced, u.ListCost, u.ListCostPicodollars = true, nil, 0
	}
}

// usageEvent is session.usage: the usage so far, its active time included, and the current budget.
func (t *thread) usageEvent() apitype.NewEvent {
	snap := t.usage
	snap.ActiveSeconds = t.sess.Stats.ActiveSeconds + t.activeDone
	if !t.activeFrom.IsZero() {
		snap.ActiveSeconds += time.Since(t.activeFrom).Seconds()
	}
	budget := t.budget
	if len(bytes.TrimSpace(budget)) == 0 {
		budget = json.RawMessage("null")
	}
	return mustEvent(apitype.EventSessionUsage, apitype.SessionUsageEvent{Usage: snap, Budget: budget})
}
