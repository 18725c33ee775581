package harness_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// previews collects the session's previews until stop is closed.
func collectPreviews(t *testing.T, ch <-chan []byte, stop <-chan struct{}) <-chan []apitype.Preview {
	out := make(chan []apitype.Preview, 1)
	go func() {
		var got []apitype.Preview
		for {
			select {
			case p := <-ch:
				var pv apitype.Preview
				if err := json.Unmarshal(p, &pv); err != nil {
					t.Errorf("preview %s: %v", p, err)
				}
				got = append(got, pv)
			case <-stop:
				out <- got
				return
			}
		}
	}()
	return out
}

// TestPreviewsMatchEvents: while the answer streams, the brain publishes an event_start for its agent.thinking
// and agent.message and deltas of the text; the events it then appends carry the previews' ids, and the deltas
// add up to the message.
func TestPreviewsMatchEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv = modeltest.NewServer(t, modeltest.WithLatency(5*time.Millisecond, 3*time.Millisecond, time.Millisecond))
	f.model = anthropic.New(anthropic.Config{APIKey: "test-key", BaseURL: f.srv.URL})
	text := "Hello there, this answer streams in many small pieces so that the previews have something to show."
	f.srv.Script(modeltest.Turn{Thinking: "Let me think.", Text: text})
	cfg := f.config()
	cfg.MaxTokens, cfg.ThinkingBudget = 4096, 1024
	cfg.PreviewInterval = 5 * time.Millisecond
	f.start(cfg)
	id := f.session()
	ch, unsubscribe := f.store.PreviewSubscribe(id)
	defer unsubscribe()
	stop := make(chan struct{})
	got := collectPreviews(t, ch, stop)
	f.say(id, "hi")
	evs := f.waitIdle(id, 1)
	time.Sleep(50 * time.Millisecond) // nothing more may come
	close(stop)
	previews := <-got
	assertTypes(t, evs, userMsg, running, start, apitype.EventAgentThinking, agentMsg, end, usage, idle)

	if len(previews) < 3 {
		t.Fatalf("got %d previews, want an event_start for each event and deltas: %+v", len(previews), previews)
	}
	if p := previews[0]; p.Type != apitype.EventStart || p.Event.Type != apitype.EventAgentThinking || p.Event.ID != evs[3].ID {
		t.Errorf("first preview %+v, want the event_start of agent.thinking %s", p, evs[3].ID)
	}
	if p := previews[1]; p.Type != apitype.EventStart || p.Event.Type != apitype.EventAgentMessage || p.Event.ID != evs[4].ID {
		t.Errorf("second preview %+v, want the event_start of agent.message %s", p, evs[4].ID)
	}
	var streamed strings.Builder
	for _, p := range previews[2:] {
		if p.Type != apitype.EventDelta || p.EventID != evs[4].ID || p.Delta.Index != 0 || p.Delta.Type != "content_delta" ||
			p.Delta.Content.Type != "text" {
			t.Fatalf("preview %+v, want a text delta of %s at index 0", p, evs[4].ID)
		}
		streamed.WriteString(p.Delta.Content.Text)
	}
	if streamed.String() != text {
		t.Errorf("deltas add up to %q, want %q", streamed.String(), text)
	}
	if len(previews) < 4 {
		t.Errorf("the text came in %d deltas: want it streamed in several", len(previews)-2)
	}
	if msg := decode[apitype.AgentMessage](t, evs[4]); len(msg.Content) != 1 || msg.Content[0].Text != text {
		t.Errorf("agent.message = %+v", msg)
	}
}

// TestPreviewsStopAtInterrupt: an interrupted answer publishes nothing after the interrupt; the message it had
// previewed is appended with what the model said so far (every previewed delta, in order), under the previewed
// id, and the span end closes it.
func TestPreviewsStopAtInterrupt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(modeltest.Turn{Text: "A long answer that never finishes", Hold: hold})
	cfg := f.config()
	cfg.PreviewInterval = time.Millisecond
	f.start(cfg)
	id := f.session()
	ch, unsubscribe := f.store.PreviewSubscribe(id)
	defer unsubscribe()
	f.say(id, "tell me everything")
	var messageID string
	select {
	case p := <-ch:
		var pv apitype.Preview
		if err := json.Unmarshal(p, &pv); err != nil || pv.Type != apitype.EventStart || pv.Event.Type != agentMsg {
			t.Fatalf("first preview %s (%v), want the event_start of agent.message", p, err)
		}
		messageID = pv.Event.ID
	case <-time.After(15 * time.Second):
		t.Fatal("no preview while the answer streams")
	}
	f.send(id, interrupt, apitype.UserInterrupt{})
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, interrupt, agentMsg, end, idle)
	var previewed strings.Builder
	for len(ch) > 0 {
		var pv apitype.Preview
		if err := json.Unmarshal(<-ch, &pv); err != nil || pv.EventID != messageID {
			t.Fatalf("preview %+v (%v) of another event", pv, err)
		}
		if pv.Delta != nil {
			previewed.WriteString(pv.Delta.Content.Text)
		}
	}
	select {
	case p := <-ch:
		t.Fatalf("preview %s after the interrupted request ended", p)
	case <-time.After(100 * time.Millisecond):
	}
	msg := decode[apitype.AgentMessage](t, evs[4])
	if evs[4].ID != messageID || len(msg.Content) != 1 || !strings.HasPrefix(msg.Content[0].Text, previewed.String()) ||
		!strings.HasPrefix("A long answer that never finishes", msg.Content[0].Text) {
		t.Fatalf("partial message %s %+v, want %s holding the previewed %q", evs[4].ID, msg, messageID, previewed.String())
	}
}

// TestNoPreviews: a negative PreviewInterval publishes none.
func TestNoPreviews(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{Text: "Hello there."})
	cfg := f.config()
	cfg.PreviewInterval = -1
	f.start(cfg)
	id := f.session()
	ch, unsubscribe := f.store.PreviewSubscribe(id)
	defer unsubscribe()
	f.say(id, "hi")
	f.waitIdle(id, 1)
	if len(ch) != 0 {
		t.Fatalf("%d previews with previews off", len(ch))
	}
}
