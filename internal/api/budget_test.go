package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// budgetBody is a session create on the agent and environment with the budget (raw JSON).
func budgetBody(agentID, envID, budget string) string {
	return `{"agent":"` + agentID + `","environment_id":"` + envID + `","budget":` + budget + `}`
}

// apiErr is the error envelope of a 400.
type apiErr struct {
	Type  string `json:"type"`
	Error struct {
		Type    apitype.ErrorType `json:"type"`
		Message string            `json:"message"`
		Details struct {
			ErrorCode string `json:"error_code"`
		} `json:"details"`
	} `json:"error"`
}

func want400(t *testing.T, status int, body []byte, code, msg string) {
	t.Helper()
	var e apiErr
	if err := json.Unmarshal(body, &e); err != nil || status != http.StatusBadRequest || e.Type != "error" ||
		e.Error.Type != apitype.ErrInvalidRequest || e.Error.Details.ErrorCode != code || !strings.Contains(e.Error.Message, msg) {
		t.Errorf("status %d %s, want a 400 invalid_request_error with code %q and %q", status, body, code, msg)
	}
}

func TestBudgetMalformed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	money := func(amount string) string {
		return `{"type":"limit","max_list_cost":{"amount":` + amount + `,"currency":"USD"}}`
	}
	for _, c := range []struct{ budget, msg string }{
		{money(`"12a"`), "budget.max_list_cost.amount: must be an integer"},
		{money(`"-5"`), "budget.max_list_cost.amount: must be an integer"},
		{money(`"007"`), "budget.max_list_cost.amount: must be an integer"},
		{money(`""`), "budget.max_list_cost.amount: must be an integer"},
		{money(`25`), "budget.max_list_cost.amount"},
		{money(`"100000001"`), "budget.max_list_cost.amount: must be at most 100000000"},
		{money(`"999999999999999999"`), "must be at most 100000000"},
		{`{"type":"limit","max_list_cost":{"amount":"5","currency":"EUR"}}`, `budget.max_list_cost.currency: must be "USD"`},
		{`{"type":"cap","max_list_cost":{"amount":"5","currency":"USD"}}`, `budget.type: must be "limit"`},
		{`{"type":"limit"}`, "budget.max_list_cost: required"},
	} {
		status, _, body := h.do("POST", "/v1/sessions", budgetBody(agentID, envID, c.budget))
		want400(t, status, body, "", c.msg)
	}
	// The largest budget is accepted.
	status, _, body := h.do("POST", "/v1/sessions", budgetBody(agentID, envID, money(`"100000000"`)))
	if status != http.StatusOK {
		t.Fatalf("the largest budget: %d %s", status, body)
	}
	var s apitype.Session
	decodeRaw(t, string(body), &s)
	if b, err := apitype.ParseBudget(s.Budget); err != nil || b == nil || b.MaxListCost.Amount != "100000000" {
		t.Errorf("budget %s", s.Budget)
	}
	if s.Usage.ListCost == nil || s.Usage.ListCost.Amount != "0" || s.Usage.ListCost.Currency != "USD" {
		t.Errorf("a new session's list_cost = %+v, want 0 USD", s.Usage.ListCost)
	}
}

func TestBudgetNeedsAPricedModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	budget := `{"type":"limit","max_list_cost":{"amount":"100","currency":"USD"}}`
	status, _, body := h.do("POST", "/v1/sessions", `{"environment_id":"`+envID+`","budget":`+budget+
		`,"agent":{"type":"agent_with_overrides","id":"`+agentID+`","model":"local/unpriced"}}`)
	want400(t, status, body, "model_not_budgetable", `model "local/unpriced" has no list price`)
	// Without a budget the model runs; its usage shows no list cost.
	status, _, body = h.do("POST", "/v1/sessions", `{"environment_id":"`+envID+
		`","agent":{"type":"agent_with_overrides","id":"`+agentID+`","model":"local/unpriced"}}`)
	if status != http.StatusOK {
		t.Fatalf("unbudgeted: %d %s", status, body)
	}
	var s apitype.Session
	decodeRaw(t, string(body), &s)
	if s.Usage.ListCost != nil {
		t.Errorf("an unpriced model's list_cost = %+v", s.Usage.ListCost)
	}
}

func TestBudgetUpdateRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	budget := func(amount string) string {
		return `{"type":"limit","max_list_cost":{"amount":"` + amount + `","currency":"USD"}}`
	}
	// A session created without a budget cannot get one.
	plain := h.newSession(ctx, agentID, envID)
	status, _, body := h.do("POST", "/v1/sessions/"+plain, `{"budget":`+budget("100")+`}`)
	want400(t, status, body, "budget_create_only", "budget")

	status, _, body = h.do("POST", "/v1/sessions", budgetBody(agentID, envID, budget("100")))
	if status != http.StatusOK {
		t.Fatalf("create: %d %s", status, body)
	}
	var s apitype.Session
	decodeRaw(t, string(body), &s)
	// The brain has spent 1.5 cents (as its appends record it).
	spent := apitype.SessionUsage{InputTokens: 5000, ListCostPicodollars: 15_000_000_000,
		ListCost: &apitype.Money{Amount: "2", Currency: "USD"}}
	if _, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: s.ID, Usage: &spent,
		Events: []apitype.NewEvent{mustMake(t, apitype.EventSpanModelRequestEnd, apitype.SpanModelRequestEnd{})}}); err != nil {
		t.Fatal(err)
	}
	for _, amount := range []string{"0", "1"} {
		status, _, body = h.do("POST", "/v1/sessions/"+s.ID, `{"budget":`+budget(amount)+`}`)
		want400(t, status, body, "budget_not_raised", "above the list cost already spent (2 cents)")
	}
	status, _, body = h.do("POST", "/v1/sessions/"+s.ID, `{"budget":`+budget("-1")+`}`)
	want400(t, status, body, "", "budget.max_list_cost.amount")
	// Lowered above what was spent, then removed; a removed budget cannot come back.
	status, _, body = h.do("POST", "/v1/sessions/"+s.ID, `{"budget":`+budget("2")+`}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"amount":"2"`) {
		t.Fatalf("lower: %d %s", status, body)
	}
	status, _, body = h.do("POST", "/v1/sessions/"+s.ID, `{"budget":null}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"budget":null`) {
		t.Fatalf("remove: %d %s", status, body)
	}
	status, _, body = h.do("POST", "/v1/sessions/"+s.ID, `{"budget":`+budget("500")+`}`)
	want400(t, status, body, "budget_create_only", "budget")
	// Each change is a session.updated carrying the budget.
	evs, err := h.store.EventList(ctx, &store.EventListParams{SessionID: s.ID, Types: []apitype.EventType{apitype.EventSessionUpdated}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || !strings.Contains(string(evs[0].Data), `"amount":"2"`) || string(evs[1].Data) != `{"budget":null}` {
		t.Errorf("session.updated events %v", evs)
	}
}

func mustMake(t *testing.T, typ apitype.EventType, payload any) apitype.NewEvent {
	t.Helper()
	ev, err := apitype.MakeEvent(typ, payload)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
