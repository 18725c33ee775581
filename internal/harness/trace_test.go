package harness_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestCustomToolSpan: a custom tool call the client answers is an execute_tool span of route client, from the
// agent.custom_tool_use to the user.custom_tool_result, in the trace of the turn that made the call; the
// agent.custom_tool_use carries that turn's traceparent to the client.
func TestCustomToolSpan(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_w", Name: "get_weather", Input: `{"city":"Oslo"}`}}},
		modeltest.Turn{Text: "It is sunny in Oslo."},
	)
	cfg := f.config()
	cfg.TracerProvider = tp
	f.start(cfg)
	id := f.session(apitype.Tool{Type: apitype.ToolTypeCustom, Name: "get_weather", Description: "Weather by city",
		InputSchema: json.RawMessage(`{"type":"object"}`)})
	f.say(id, "weather in Oslo?")
	evs := f.waitIdle(id, 1)
	use := evs[3]
	if use.Type != customUse || use.TraceParent() == "" {
		t.Fatalf("event %s carries traceparent %q, want the turn's", use.Type, use.TraceParent())
	}
	f.send(id, customReply, apitype.UserCustomToolResult{CustomToolUseID: use.ID, Content: []apitype.ContentBlock{apitype.TextBlock("sunny")}})
	evs = f.waitIdle(id, 2)
	reply := evs[7]

	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, s := range rec.Ended() {
			if s.Name() != "execute_tool get_weather" {
				continue
			}
			a := map[attribute.Key]string{}
			for _, kv := range s.Attributes() {
				a[kv.Key] = kv.Value.AsString()
			}
			if a["corral.tool.route"] != "client" || a["gen_ai.tool.call.id"] != use.ID {
				t.Errorf("custom tool span attributes %v", a)
			}
			if !s.StartTime().Equal(use.CreatedAt) || !s.EndTime().Equal(reply.CreatedAt) {
				t.Errorf("custom tool span from %v to %v, want the call's event (%v) to the result's (%v)", s.StartTime(), s.EndTime(), use.CreatedAt, reply.CreatedAt)
			}
			if got, want := s.SpanContext().TraceID().String(), use.TraceParent()[3:35]; got != want {
				t.Errorf("custom tool span in trace %s, want the call's %s", got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no execute_tool span for the custom tool call")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
