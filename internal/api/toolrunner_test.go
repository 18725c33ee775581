package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// lookupTool is a client-side custom tool for the SDK's session tool runner.
type lookupTool struct{}

func (lookupTool) Name() string        { return "lookup" }
func (lookupTool) Description() string { return "look something up" }
func (lookupTool) InputSchema() anthropic.BetaToolInputSchemaParam {
	return anthropic.BetaToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}}
}

func (lookupTool) Execute(_ context.Context, input json.RawMessage) ([]anthropic.BetaToolResultBlockParamContentUnion, error) {
	var in struct {
		Q string `json:"q"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, err
	}
	return []anthropic.BetaToolResultBlockParamContentUnion{{OfText: &anthropic.BetaTextBlockParam{Text: "answer to " + in.Q}}}, nil
}

// TestSDKToolRunner runs the official SDK's session tool runner (stream, history reconcile, result posting)
// against the server while the test plays the brain.
func TestSDKToolRunner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)

	maxIdle := 300 * time.Millisecond
	runner := h.client.Beta.Sessions.Events.NewToolRunner(ctx, id, anthropic.SessionToolRunnerOptions{
		Tools: []anthropic.BetaTool{lookupTool{}}, MaxIdle: &maxIdle, Logger: slog.New(slog.DiscardHandler),
	})
	defer runner.Close()

	use := h.appendAgent(ctx, id, apitype.EventAgentCustomToolUse, apitype.AgentToolUse{Name: "lookup", Input: json.RawMessage(`{"q":"life"}`)})
	h.appendAgent(ctx, id, apitype.EventSessionStatusIdle, apitype.SessionIdle{
		StopReason: apitype.StopReason{Type: apitype.StopRequiresAction, EventIDs: []string{use.ID}}})

	if !runner.Next() {
		t.Fatalf("runner ended: %v", runner.Err())
	}
	call := runner.Current()
	if !call.Custom || call.Name != "lookup" || call.ToolUseID != use.ID || !call.Posted || call.IsError {
		t.Fatalf("dispatched = %+v", call)
	}
	// The result the runner posted is in the log, answering the call.
	results, err := h.store.EventList(ctx, &store.EventListParams{SessionID: id, Types: []apitype.EventType{apitype.EventUserCustomToolResult}, Limit: 10})
	if err != nil || len(results) != 1 {
		t.Fatalf("results = %v, %v", results, err)
	}
	var res apitype.UserCustomToolResult
	if err := results[0].DecodeData(&res); err != nil {
		t.Fatal(err)
	}
	if res.CustomToolUseID != use.ID || len(res.Content) != 1 || res.Content[0].Text != "answer to life" {
		t.Fatalf("posted result = %+v", res)
	}

	// The brain finishes the turn; the runner stops once the session has been idle for MaxIdle.
	h.appendAgent(ctx, id, apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}})
	if runner.Next() {
		t.Fatalf("unexpected call %+v", runner.Current())
	}
	if !errors.Is(runner.Err(), anthropic.ErrIdleTimeout) {
		t.Fatalf("runner error = %v, want ErrIdleTimeout", runner.Err())
	}
}
