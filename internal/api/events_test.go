package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func TestEventSendAndList(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)

	sent, err := h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{
			userText("hello"),
			anthropic.BetaManagedAgentsEventParamsOfSystemMessage([]anthropic.BetaManagedAgentsSystemContentBlockParam{
				{Text: "be kind"},
			}),
		},
	})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if len(sent.Data) != 2 || sent.Data[0].Type != "user.message" || sent.Data[0].ID == "" ||
		sent.Data[1].Type != "system.message" {
		t.Fatalf("send = %s", sent.RawJSON())
	}
	if text := sent.Data[0].Content.OfBetaManagedAgentsUserMessageEventContentArray; len(text) != 1 || text[0].Text != "hello" {
		t.Errorf("echoed content = %s", sent.RawJSON())
	}

	// The brain answers with a custom tool call; the client's result must name it.
	use := h.appendAgent(ctx, id, apitype.EventAgentCustomToolUse, apitype.AgentToolUse{Name: "lookup", Input: json.RawMessage(`{"q":"x"}`)})
	_, err = h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserCustomToolResult("sevt_nope")},
	})
	aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	if !strings.Contains(aerr.Message, "events[0].custom_tool_use_id") {
		t.Errorf("message = %q", aerr.Message)
	}
	// A tool confirmation must name an agent.tool_use, not a custom one.
	_, err = h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation("allow", use.ID)},
	})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	res := anthropic.BetaManagedAgentsEventParamsOfUserCustomToolResult(use.ID)
	res.OfUserCustomToolResult.Content = []anthropic.BetaManagedAgentsUserCustomToolResultEventParamsContentUnion{
		{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "found"}},
	}
	if _, err := h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{res},
	}); err != nil {
		t.Fatalf("custom tool result: %v", err)
	}
	// user.tool_result is only for self-hosted environments.
	tu := h.appendAgent(ctx, id, apitype.EventAgentToolUse, apitype.AgentToolUse{Name: "bash", Input: json.RawMessage(`{"command":"ls"}`)})
	_, err = h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserToolResult(tu.ID)},
	})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	if _, err := h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation("deny", tu.ID)},
	}); err != nil {
		t.Fatalf("tool confirmation: %v", err)
	}

	// The whole log, oldest first, through the SDK's auto-pager in pages of two.
	var types []string
	iter := h.client.Beta.Sessions.Events.ListAutoPaging(ctx, id, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(2)})
	for iter.Next() {
		types = append(types, iter.Current().Type)
	}
	want := []string{"user.message", "system.message", "agent.custom_tool_use", "user.custom_tool_result",
		"agent.tool_use", "user.tool_confirmation"}
	if iter.Err() != nil || fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("log = %v (%v), want %v", types, iter.Err(), want)
	}
	desc, err := h.client.Beta.Sessions.Events.List(ctx, id, anthropic.BetaSessionEventListParams{
		Order: anthropic.BetaSessionEventListParamsOrderDesc, Limit: anthropic.Int(3),
	})
	if err != nil || len(desc.Data) != 3 || desc.Data[0].Type != "user.tool_confirmation" || desc.NextPage == "" {
		t.Fatalf("desc: %v %s", err, desc.RawJSON())
	}
	next, err := desc.GetNextPage()
	if err != nil || len(next.Data) != 3 || next.Data[2].Type != "user.message" || next.NextPage != "" {
		t.Fatalf("desc page 2: %v %s", err, next.RawJSON())
	}
	filtered, err := h.client.Beta.Sessions.Events.List(ctx, id, anthropic.BetaSessionEventListParams{
		Types: []anthropic.BetaManagedAgentsSessionEventType{"agent.tool_use", "agent.custom_tool_use"},
	})
	if err != nil || len(filtered.Data) != 2 || filtered.NextPage != "" {
		t.Fatalf("types[]: %v %s", err, filtered.RawJSON())
	}
	// The un-bracketed form other SDKs send.
	status, _, body := h.do("GET", "/v1/sessions/"+id+"/events?types=user.message&beta=true", "")
	var page struct {
		Data []apitype.Event `json:"data"`
	}
	decodeRaw(t, string(body), &page)
	if status != http.StatusOK || len(page.Data) != 1 {
		t.Fatalf("types=: %d %s", status, body)
	}
}

func TestEventSendValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	for _, tc := range []struct{ body, want string }{
		{`{"events":[]}`, "events: required"},
		{`{}`, "events: required"},
		{`{"events":[{"type":"user.message","content":[{"type":"text","text":"a"},{"type":"foo"}]}]}`,
			`events[0].content[1].type: unknown block type "foo"`},
		{`{"events":[{"type":"user.message","content":[{"type":"text","text":""}]}]}`, "events[0].content[0].text: required"},
		{`{"events":[{"type":"agent.message","content":[]}]}`, `events[0].type: unknown event type "agent.message"`},
		{`{"events":[{"type":"system.message","content":[{"type":"text","text":"x"}]}]}`, "events[0]: system.message must follow"},
		{`{"events":[{"type":"system.message","content":[{"type":"text","text":"x"}]},{"type":"user.interrupt"}]}`, "events[0]: system.message must be the last"},
		{`{"events":[{"type":"user.message","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"AA=="}}]}]}`,
			"events[0].content[0].source.media_type"},
		{`{"events":[{"type":"user.tool_confirmation","tool_use_id":"x","result":"maybe"}]}`, "events[0].result"},
		{`{"events":[{"type":"user.message","content":[{"type":"text","text":"a","extra":1}]}]}`, "events[0].content[0].extra: unknown field"},
		{`{"events":[{"type":"user.define_outcome","description":"d","rubric":{"type":"text","content":"c"},"max_iterations":50}]}`,
			"events[0].max_iterations"},
	} {
		status, _, body := h.do("POST", "/v1/sessions/"+id+"/events", tc.body)
		var env envelope
		decodeRaw(t, string(body), &env)
		if status != http.StatusBadRequest || !strings.Contains(env.Error.Message, tc.want) {
			t.Errorf("%s: %d %q, want 400 containing %q", tc.body, status, env.Error.Message, tc.want)
		}
	}
	// Nothing invalid reached the log.
	events, err := h.store.EventList(ctx, &store.EventListParams{SessionID: id, Limit: 10})
	if err != nil || len(events) != 0 {
		t.Fatalf("log = %v, %v", events, err)
	}
	_, err = h.client.Beta.Sessions.Events.Send(ctx, "sesn_nope", anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userText("hi")},
	})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Sessions.Events.List(ctx, "sesn_nope", anthropic.BetaSessionEventListParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
}

func TestEventSelfHostedToolResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	env, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{
		Name:   "mine",
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := h.newSession(ctx, agentID, env.ID)
	tu := h.appendAgent(ctx, id, apitype.EventAgentToolUse, apitype.AgentToolUse{Name: "bash", Input: json.RawMessage(`{"command":"ls"}`)})
	res := anthropic.BetaManagedAgentsEventParamsOfUserToolResult(tu.ID)
	res.OfUserToolResult.IsError = anthropic.Bool(true)
	sent, err := h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{res},
	})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	var ev struct {
		ToolUseID string `json:"tool_use_id"`
		IsError   bool   `json:"is_error"`
	}
	decodeRaw(t, sent.Data[0].RawJSON(), &ev)
	if ev.ToolUseID != tu.ID || !ev.IsError {
		t.Errorf("echo = %s", sent.Data[0].RawJSON())
	}
}
