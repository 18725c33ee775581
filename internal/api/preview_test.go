package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// brainAnswer plays a brain answering with a thinking block and a two-block message: it publishes the previews
// and then appends the events under the previewed ids, with the span end.
func (h *harness) brainAnswer(ctx context.Context, sessionID string) (thinkingID, messageID string) {
	h.t.Helper()
	thinkingID, messageID = apitype.NewID(apitype.PrefixEvent), apitype.NewID(apitype.PrefixEvent)
	for _, p := range []apitype.Preview{
		apitype.PreviewStartOf(apitype.EventAgentThinking, thinkingID),
		apitype.PreviewStartOf(apitype.EventAgentMessage, messageID),
		apitype.PreviewTextDelta(messageID, 0, "Hel"),
		apitype.PreviewTextDelta(messageID, 0, "lo"),
		apitype.PreviewTextDelta(messageID, 1, " world"),
	} {
		h.publish(ctx, sessionID, p)
	}
	thinking, err := apitype.MakeEvent(apitype.EventAgentThinking, apitype.AgentThinking{Thinking: "hmm", Signature: "sig"})
	if err != nil {
		h.t.Fatal(err)
	}
	thinking.ID = thinkingID
	msg, err := apitype.MakeEvent(apitype.EventAgentMessage, apitype.AgentMessage{Content: []apitype.ContentBlock{
		apitype.TextBlock("Hello"), apitype.TextBlock(" world")}})
	if err != nil {
		h.t.Fatal(err)
	}
	msg.ID = messageID
	end, err := apitype.MakeEvent(apitype.EventSpanModelRequestEnd, apitype.SpanModelRequestEnd{ModelRequestStartID: "sevt_start"})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID,
		Events: []apitype.NewEvent{thinking, msg, end}}); err != nil {
		h.t.Fatal(err)
	}
	return thinkingID, messageID
}

func (h *harness) publish(ctx context.Context, sessionID string, p apitype.Preview) {
	h.t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.store.PreviewPublish(ctx, sessionID, b); err != nil {
		h.t.Fatal(err)
	}
}

// TestStreamPreviews: with event_deltas the SDK receives event_start and event_delta previews before the final
// events with the same ids, and its accumulator folds them into the message text; a stream without
// event_deltas, or with only agent.thinking, sees only what it asked for.
func TestStreamPreviews(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)

	both := h.client.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{
		EventDeltas: []anthropic.BetaManagedAgentsDeltaType{anthropic.BetaManagedAgentsDeltaTypeAgentMessage,
			anthropic.BetaManagedAgentsDeltaTypeAgentThinking},
	})
	defer both.Close()
	plain := h.client.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{})
	defer plain.Close()
	thinkingOnly := h.client.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{
		EventDeltas: []anthropic.BetaManagedAgentsDeltaType{anthropic.BetaManagedAgentsDeltaTypeAgentThinking},
	})
	defer thinkingOnly.Close()
	for _, s := range []interface{ Err() error }{both, plain, thinkingOnly} {
		if err := s.Err(); err != nil {
			t.Fatalf("open stream: %v", err)
		}
	}
	thinkingID, messageID := h.brainAnswer(ctx, id)

	var acc anthropic.BetaManagedAgentsEventAccumulator
	var got []string
	texts := map[string]string{}
	for len(got) < 8 {
		ev := next(t, both)
		acc.Accumulate(ev)
		switch ev.Type {
		case "event_start":
			start := ev.AsEventStart()
			got = append(got, "event_start "+start.Event.Type+" "+start.Event.ID)
		case "event_delta":
			d := ev.AsEventDelta()
			got = append(got, "event_delta "+d.EventID)
			texts[d.Delta.Content.Text] = acc.AgentMessageText(d.EventID)
		default:
			got = append(got, ev.Type+" "+ev.ID)
		}
	}
	want := []string{
		"event_start agent.thinking " + thinkingID,
		"event_start agent.message " + messageID,
		"event_delta " + messageID, "event_delta " + messageID, "event_delta " + messageID,
		"agent.thinking " + thinkingID,
		"agent.message " + messageID,
		"span.model_request_end ",
	}
	got[7] = strings.Fields(got[7])[0] + " "
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stream:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if texts["Hel"] != "Hel" || texts["lo"] != "Hello" || texts[" world"] != "Hello world" {
		t.Errorf("accumulated text after each delta: %q", texts)
	}
	if got := acc.AgentMessageText(messageID); got != "Hello world" {
		t.Errorf("accumulated message text %q after the final event", got)
	}
	if msg, ok := acc.AgentMessages[messageID]; !ok || !msg.JSON.ProcessedAt.Valid() || len(msg.Content) != 2 {
		t.Errorf("accumulated message %+v, want the final one", msg)
	}

	for _, want := range []string{"agent.thinking", "agent.message", "span.model_request_end"} {
		if ev := next(t, plain); ev.Type != want {
			t.Fatalf("stream without event_deltas: got %s, want %s", ev.Type, want)
		}
	}
	for _, want := range []string{"event_start", "agent.thinking", "agent.message", "span.model_request_end"} {
		ev := next(t, thinkingOnly)
		if ev.Type != want || want == "event_start" && ev.AsEventStart().Event.ID != thinkingID {
			t.Fatalf("stream with event_deltas=agent.thinking: got %s, want %s", ev.RawJSON(), want)
		}
	}
}

// TestStreamPreviewFraming: previews carry no id line (they must not move Last-Event-ID); the un-bracketed
// event_deltas form works; late previews, deltas without a start and previews of an ended request are not
// written; an unknown event_deltas value is a 400 naming the parameter.
func TestStreamPreviewFraming(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)

	status, _, body := h.do("GET", "/v1/sessions/"+id+"/events/stream?event_deltas[]=agent.message&event_deltas[]=agent.tool_use", "")
	if status != http.StatusBadRequest || !strings.Contains(string(body), "event_deltas") {
		t.Fatalf("unknown event_deltas: %d %s", status, body)
	}

	req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/v1/sessions/"+id+"/events/stream?event_deltas=agent.message", nil)
	req.Header.Set("x-api-key", testKey)
	httpResp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer httpResp.Body.Close()
	if httpResp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", httpResp.StatusCode)
	}
	resp := bufio.NewReader(httpResp.Body)
	orphan := apitype.NewID(apitype.PrefixEvent)
	h.publish(ctx, id, apitype.PreviewTextDelta(orphan, 0, "no start")) // dropped: never started
	_, messageID := h.brainAnswer(ctx, id)
	frames := readFrames(t, resp, 7)
	var kinds []string
	for _, f := range frames {
		kinds = append(kinds, f.event)
		if strings.HasPrefix(f.event, "event_") && f.id != "" {
			t.Errorf("preview frame %s has id %q", f.event, f.id)
		}
		if !strings.HasPrefix(f.event, "event_") && f.id == "" {
			t.Errorf("event frame %s has no id", f.event)
		}
	}
	want := "event_start event_delta event_delta event_delta agent.thinking agent.message span.model_request_end"
	if strings.Join(kinds, " ") != want {
		t.Fatalf("frames %v, want %s", kinds, want)
	}
	// Previews of an event the stream has written, or of a model request that has ended, are not written.
	other := apitype.NewID(apitype.PrefixEvent)
	h.publish(ctx, id, apitype.PreviewStartOf(apitype.EventAgentMessage, messageID))
	h.publish(ctx, id, apitype.PreviewTextDelta(messageID, 0, "late"))
	h.appendAgent(ctx, id, apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}})
	if f := readFrames(t, resp, 1)[0]; f.event != "session.status_idle" {
		t.Fatalf("after the answer: %s %s", f.event, f.data)
	}
	h.publish(ctx, id, apitype.PreviewStartOf(apitype.EventAgentMessage, other))
	h.appendAgent(ctx, id, apitype.EventSpanModelRequestEnd, apitype.SpanModelRequestEnd{ModelRequestStartID: "sevt_x", IsError: true})
	frames = readFrames(t, resp, 2)
	h.publish(ctx, id, apitype.PreviewTextDelta(other, 0, "after the end"))
	h.appendAgent(ctx, id, apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}})
	frames = append(frames, readFrames(t, resp, 1)...)
	if frames[0].event != "event_start" || frames[1].event != "span.model_request_end" || frames[2].event != "session.status_idle" {
		t.Fatalf("after an ended request: %+v", frames)
	}
}

type sseFrame struct{ id, event, data string }

// readFrames reads n frames from an SSE body, skipping comments.
func readFrames(t *testing.T, r *bufio.Reader, n int) []sseFrame {
	t.Helper()
	var (
		mu  sync.Mutex
		out []sseFrame
	)
	done := make(chan error, 1)
	go func() {
		var f sseFrame
		for {
			mu.Lock()
			enough := len(out) >= n
			mu.Unlock()
			if enough {
				done <- nil
				return
			}
			line, err := r.ReadString('\n')
			if err != nil {
				done <- err
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if f.event != "" {
					mu.Lock()
					out = append(out, f)
					mu.Unlock()
				}
				f = sseFrame{}
			case strings.HasPrefix(line, "id: "):
				f.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				f.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.data = line[6:]
			}
		}
	}()
	select {
	case err := <-done:
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Fatalf("read frames: %v (got %v)", err, out)
		}
		return out
	case <-time.After(10 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d frames within 10s, want %d: %+v", len(out), n, out)
		return nil
	}
}
