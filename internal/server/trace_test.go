package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestTraces runs a turn (an overloaded model request retried, a bash call whose sandbox fails to provision, a
// final answer) with an in-process span recorder and checks the spans: the API request joins the caller's
// traceparent; the brain's run is an invoke_agent span with the agent's id; each model request a chat span
// under it with the GenAI attributes and usage, the overloaded one failed in the model; the tool call an
// execute_tool span under the run, and the failed provisioning a span under the tool call, failed in the hands.
func TestTraces(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv, agentID, sessID := observed(t, func(c *server.Config) { c.TracerProvider = tp })

	// The caller's W3C trace context, as the official SDKs (instrumented) send it.
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body, _ := json.Marshal(map[string]any{"events": []any{map[string]any{
		"type": "user.message", "content": []any{map[string]any{"type": "text", "text": "Run it."}}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", srv.URL()+"/v1/sessions/"+sessID+"/events", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("content-type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("send: %s", resp.Status)
	}
	waitIdle(t, srv, sessID)

	// The run's span ends when the brain hands the session back, just after the idle is appended.
	var ended []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(30 * time.Second)
	for {
		ended = rec.Ended()
		runs := 0
		for _, s := range ended {
			if s.Name() == "invoke_agent a" {
				runs++
			}
		}
		if runs > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no invoke_agent span ended; spans: %d", len(ended))
		}
		time.Sleep(20 * time.Millisecond)
	}
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		byID[s.SpanContext().SpanID().String()] = s
	}
	parentName := func(s sdktrace.ReadOnlySpan) string {
		if p, ok := byID[s.Parent().SpanID().String()]; ok {
			return p.Name()
		}
		return ""
	}

	var sendSpan, provision sdktrace.ReadOnlySpan
	var chats, tools []sdktrace.ReadOnlySpan
	appends, apiAppends := 0, 0
	for _, s := range ended {
		switch s.Name() {
		case "POST /v1/sessions/{session_id}/events":
			sendSpan = s
		case "chat claude-sonnet-4-5":
			chats = append(chats, s)
		case "execute_tool bash":
			tools = append(tools, s)
		case "sandbox.provision":
			provision = s
		case "store.append":
			if parentName(s) == "POST /v1/sessions/{session_id}/events" {
				apiAppends++ // the API's append of the client's message
				continue
			}
			appends++
			if parentName(s) != "invoke_agent a" || s.Status().Code == codes.Error {
				t.Errorf("store.append span: parent %q, status %v; want the run's span, ok", parentName(s), s.Status())
			}
		case "invoke_agent a":
			if a := attrs(s); a["gen_ai.agent.id"].AsString() != agentID || a["corral.session.id"].AsString() != sessID {
				t.Errorf("invoke_agent attributes = %v, want the agent %s and session %s", a, agentID, sessID)
			}
		}
	}
	// The brain's writes: three model request starts and ends, statuses, the provisioning span, the tool result.
	if appends < 6 {
		t.Errorf("store.append spans = %d, want at least 6", appends)
	}
	if apiAppends != 1 {
		t.Errorf("store.append spans under the send request = %d, want 1", apiAppends)
	}
	if sendSpan == nil {
		t.Fatal("no span for the send request")
	}
	for _, s := range ended {
		if s.Name() == "invoke_agent a" && s.Parent().SpanID() != sendSpan.SpanContext().SpanID() {
			t.Errorf("invoke_agent's parent = %q, want the send request that started the turn", parentName(s))
		}
	}
	if got := sendSpan.SpanContext().TraceID().String(); got != traceID {
		t.Errorf("send span trace = %s, want the caller's %s", got, traceID)
	}
	if got := sendSpan.Parent().SpanID().String(); got != callerSpan || !sendSpan.Parent().IsRemote() {
		t.Errorf("send span parent = %s (remote %v), want the caller's span %s", got, sendSpan.Parent().IsRemote(), callerSpan)
	}
	if a := attrs(sendSpan); a["http.response.status_code"].AsInt64() != 200 || a["corral.session.id"].AsString() != sessID {
		t.Errorf("send span attributes = %v", a)
	}

	if len(chats) != 3 {
		t.Fatalf("chat spans = %d, want 3 (the overloaded request, its retry, the final answer)", len(chats))
	}
	var failedChats, inputTokens, outputTokens int64
	for _, s := range chats {
		a := attrs(s)
		if parentName(s) != "invoke_agent a" {
			t.Errorf("chat span's parent = %q, want the run's invoke_agent span", parentName(s))
		}
		if a["gen_ai.operation.name"].AsString() != "chat" || a["gen_ai.request.model"].AsString() != "claude-sonnet-4-5" ||
			a["gen_ai.agent.id"].AsString() != agentID {
			t.Errorf("chat span attributes = %v", a)
		}
		if !strings.HasPrefix(a["corral.event.id"].AsString(), "sevt_") {
			t.Errorf("chat span names no span.model_request_start event: %v", a["corral.event.id"])
		}
		if s.Status().Code == codes.Error {
			failedChats++
			if a["error.type"].AsString() != "overloaded" || a["corral.failure.component"].AsString() != "model" {
				t.Errorf("failed chat span attributes = %v, want error.type overloaded in the model", a)
			}
			continue
		}
		inputTokens += a["gen_ai.usage.input_tokens"].AsInt64()
		outputTokens += a["gen_ai.usage.output_tokens"].AsInt64()
	}
	if failedChats != 1 || inputTokens != 220 || outputTokens != 13 {
		t.Errorf("chat spans: %d failed, %d input and %d output tokens; want 1, 220, 13", failedChats, inputTokens, outputTokens)
	}

	if len(tools) != 1 {
		t.Fatalf("execute_tool spans = %d, want 1", len(tools))
	}
	tool := tools[0]
	if a := attrs(tool); parentName(tool) != "invoke_agent a" || a["gen_ai.tool.name"].AsString() != "bash" || a["corral.tool.route"].AsString() != "hands" {
		t.Errorf("execute_tool span: parent %q, attributes %v", parentName(tool), a)
	}
	if a := attrs(tool); tool.Status().Code != codes.Error || a["corral.failure.component"].AsString() != "hands" ||
		a["corral.failure.backend"].AsString() != "stub" || a["corral.failure.reason"].AsString() != "provision_failed" {
		t.Errorf("execute_tool span status %v attributes %v, want failed in the hands", tool.Status(), attrs(tool))
	}
	if provision == nil {
		t.Fatal("no sandbox.provision span")
	}
	if provision.Parent().SpanID() != tool.SpanContext().SpanID() {
		t.Errorf("sandbox.provision's parent = %q, want the execute_tool span", parentName(provision))
	}
	if a := attrs(provision); provision.Status().Code != codes.Error || a["corral.sandbox.backend"].AsString() != "stub" ||
		a["corral.failure.component"].AsString() != "hands" {
		t.Errorf("sandbox.provision status %v attributes %v, want a failure of the stub backend in the hands", provision.Status(), a)
	}
}
