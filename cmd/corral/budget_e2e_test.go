package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/price"
)

// TestBudgetPausesAndResumes: through the official SDK against `corral serve`, a session with a 1-cent budget
// on claude-sonnet-4-5 ($3 / $15 per million tokens) makes one model request (1000 input and 500 output tokens:
// 1.05 cents, shown as 2), runs the tool it asked for, and idles with budget_reached instead of making the next
// request; its usage and session.usage say so exactly. Raising the budget resumes the same turn with no client
// event, and the turn ends with the cost of both requests.
func TestBudgetPausesAndResumes(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo budget-ok"}`}},
			Usage: modeltest.Usage{InputTokens: 1000, OutputTokens: 500}},
		modeltest.Turn{Text: "Done: budget-ok.", Usage: modeltest.Usage{InputTokens: 3000, OutputTokens: 1000}},
	)
	s := startServer(t, t.TempDir(), model)
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The price table's figures for the two requests.
	rates, ok := price.Default().Rates("claude-sonnet-4-5")
	if !ok {
		t.Fatal("claude-sonnet-4-5 has no price")
	}
	first := rates.Cost(price.Tokens{Input: 1000, Output: 500})
	both := price.Add(first, rates.Cost(price.Tokens{Input: 3000, Output: 1000}))
	if first != 10_500_000_000 || first.Cents() != 2 || both != 34_500_000_000 || both.Cents() != 4 {
		t.Fatalf("price table: first %d (%d cents), both %d (%d cents)", first, first.Cents(), both, both.Cents())
	}

	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "budget", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "budget"})
	if err != nil {
		t.Fatal(err)
	}
	newSession := func(amount string) (*anthropic.BetaManagedAgentsSession, error) {
		return client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
			EnvironmentID: env.ID,
			Budget:        anthropic.BetaManagedAgentsBudgetLimitParam{MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: amount, Currency: "USD"}},
		})
	}
	// Malformed budgets are the API's 400.
	for _, amount := range []string{"1.5", "-1", "abc", "01", "100000001"} {
		_, err := newSession(amount)
		var aerr *anthropic.Error
		if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusBadRequest || !strings.Contains(aerr.RawJSON(), `"invalid_request_error"`) ||
			!strings.Contains(aerr.RawJSON(), "budget.max_list_cost.amount") {
			t.Errorf("budget %q: %v, want a 400 invalid_request_error naming budget.max_list_cost.amount", amount, err)
		}
	}

	sess, err := newSession("1")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Budget.MaxListCost.Amount != "1" || sess.Budget.Type != "limit" || sess.Usage.ListCost.Amount != "0" {
		t.Fatalf("created: budget %+v, usage %+v", sess.Budget, sess.Usage)
	}
	stream := client.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, anthropic.BetaSessionEventStreamParams{})
	defer stream.Close()
	if _, err := client.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "Run it."}}})},
	}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	var usage anthropic.BetaManagedAgentsSessionUsageEvent
	idleWith := func() string {
		t.Helper()
		for stream.Next() {
			ev := stream.Current()
			seen = append(seen, ev.Type)
			switch ev.Type {
			case "session.usage":
				if err := usage.UnmarshalJSON([]byte(ev.RawJSON())); err != nil {
					t.Fatal(err)
				}
			case "session.status_idle":
				return string(ev.AsSessionStatusIdle().StopReason.Type)
			}
		}
		t.Fatalf("stream ended: %v (events %v)", stream.Err(), seen)
		return ""
	}
	if r := idleWith(); r != "budget_reached" {
		t.Fatalf("idle with %q, want budget_reached; events %v", r, seen)
	}
	if n := len(model.Requests()); n != 1 {
		t.Fatalf("%d model requests before the pause, want 1", n)
	}
	if j := strings.Join(seen, " "); !strings.Contains(j, "span.model_request_end session.usage") ||
		!strings.HasSuffix(j, "agent.tool_result session.status_idle") {
		t.Errorf("events %v: want the request's session.usage, then the tool it asked for, then the pause", seen)
	}
	u := usage.Usage
	if u.InputTokens != 1000 || u.OutputTokens != 500 || u.ListCost.Amount != "2" || u.ListCost.Currency != "USD" ||
		usage.Budget.MaxListCost.Amount != "1" || !u.JSON.ServerToolUse.Valid() || !u.JSON.ActiveSeconds.Valid() {
		t.Errorf("session.usage %s", usage.RawJSON())
	}
	got, err := client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	gu := got.Usage
	if got.Status != "idle" || gu.InputTokens != 1000 || gu.OutputTokens != 500 || gu.ListCost.Amount != "2" ||
		!gu.JSON.ServerToolUse.Valid() || gu.ServerToolUse.WebSearchRequests != 0 || gu.ActiveSeconds <= 0 ||
		!strings.Contains(gu.RawJSON(), `"list_cost_picodollars":10500000000`) {
		t.Errorf("paused session: status %q usage %s", got.Status, gu.RawJSON())
	}

	// Raising the budget resumes the same turn: no new client event, the tool result goes to the model.
	if _, err := client.Beta.Sessions.Update(ctx, sess.ID, anthropic.BetaSessionUpdateParams{
		Budget: anthropic.BetaManagedAgentsBudgetLimitParam{MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: "100", Currency: "USD"}},
	}); err != nil {
		t.Fatal(err)
	}
	if r := idleWith(); r != "end_turn" {
		t.Fatalf("after the raise: idle with %q; events %v", r, seen)
	}
	joined := strings.Join(seen, " ")
	if strings.Count(joined, "user.message") != 1 || !strings.Contains(joined, "session.updated session.status_running span.model_request_start agent.message") {
		t.Errorf("events %v: want the paused turn resumed by the update alone", seen)
	}
	if reqs := model.Requests(); len(reqs) != 2 || !strings.Contains(string(reqs[1].Body), "budget-ok") {
		t.Errorf("%d model requests; the resumed one does not carry the tool result", len(reqs))
	}
	got, err = client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if gu := got.Usage; got.Status != "idle" || gu.InputTokens != 4000 || gu.OutputTokens != 1500 || gu.ListCost.Amount != "4" ||
		!strings.Contains(gu.RawJSON(), `"list_cost_picodollars":34500000000`) || usage.Usage.ListCost.Amount != "4" ||
		usage.Budget.MaxListCost.Amount != "100" {
		t.Errorf("resumed session: status %q usage %s; last session.usage %s", got.Status, gu.RawJSON(), usage.RawJSON())
	}
}

// TestPricesFlag: --prices adds models to the table a budget needs, and a bad file stops the server with a
// message naming it.
func TestPricesFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"models": {"local/llama": {"input": "cheap", "output": "1"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), &stdio{out: &out, err: &errb}, []string{"serve", "--data", filepath.Join(dir, "data"),
		"--listen", "127.0.0.1:0", "--prices", bad})
	if code == 0 || !strings.Contains(errb.String(), bad) || !strings.Contains(errb.String(), `model "local/llama": input: price "cheap"`) {
		t.Errorf("serve --prices bad.json: exit %d, stderr %q", code, errb.String())
	}

	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"models": {"local/llama": {"input": "0.10", "output": "0.20"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	model := modeltest.NewServer(t)
	s := startServer(t, t.TempDir(), model, "--prices", good)
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "prices"})
	if err != nil {
		t.Fatal(err)
	}
	budget := anthropic.BetaManagedAgentsBudgetLimitParam{MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: "50", Currency: "USD"}}
	for _, c := range []struct {
		model string
		ok    bool
	}{{"local/llama", true}, {"local/other", false}} {
		agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: c.model,
			Model: anthropic.BetaManagedAgentsModelConfigParams{ID: anthropic.BetaManagedAgentsModel(c.model)}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
			EnvironmentID: env.ID, Budget: budget,
		})
		var aerr *anthropic.Error
		switch {
		case c.ok && err != nil:
			t.Errorf("%s with a budget: %v", c.model, err)
		case !c.ok && (!errors.As(err, &aerr) || aerr.StatusCode != http.StatusBadRequest || !strings.Contains(aerr.RawJSON(), `"model_not_budgetable"`)):
			t.Errorf("%s with a budget: %v, want a 400 model_not_budgetable", c.model, err)
		}
	}
}
