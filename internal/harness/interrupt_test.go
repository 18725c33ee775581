package harness_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
)

// interruptedNote is the assistant note that ends an interrupted turn in the model's context.
const interruptedNote = "[The user interrupted this turn here.]"

// waitTextPreview waits for the first event_delta of an agent.message on the session's previews and returns the
// previewed message's id: the brain has received text of the answer.
func waitTextPreview(t *testing.T, ch <-chan []byte) string {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case b := <-ch:
			var pv apitype.Preview
			if err := json.Unmarshal(b, &pv); err != nil {
				t.Fatalf("preview %s: %v", b, err)
			}
			if pv.Type == apitype.EventDelta && pv.Delta != nil && pv.Delta.Content.Text != "" {
				return pv.EventID
			}
		case <-timeout:
			t.Fatal("no text preview")
		}
	}
}

// roles describes a request's messages as role: texts, for failure messages and comparisons.
func roles(msgs []modeltest.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		var parts []string
		for _, b := range m.Content {
			parts = append(parts, b.Type+"("+blockText(b)+")")
		}
		out[i] = m.Role + ": " + strings.Join(parts, " ")
	}
	return out
}

// TestInterruptedAnswerInNextRequest: an answer interrupted mid-stream is recorded as the agent.message of what
// the model had said (under the id its previews gave it), and the next request shows the interrupted user
// message, an assistant turn with that partial answer and a note that the user interrupted it, then the next
// user message: not the two user messages merged, and not a conversation that pretends nothing was said.
func TestInterruptedAnswerInNextRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	const full = "A long answer that never finishes"
	f.srv.Script(modeltest.Turn{Text: full, Hold: hold}, modeltest.Turn{Text: "Sorry, here is a short one."})
	cfg := f.config()
	cfg.PreviewInterval = 5 * time.Millisecond
	f.start(cfg)
	id := f.session()
	ch, unsubscribe := f.store.PreviewSubscribe(id)
	defer unsubscribe()
	f.say(id, "tell me everything")
	previewID := waitTextPreview(t, ch)
	f.send(id, interrupt, apitype.UserInterrupt{})
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, interrupt, agentMsg, end, idle)
	partial := decode[apitype.AgentMessage](t, evs[4])
	if len(partial.Content) != 1 || partial.Content[0].Text == "" || !strings.HasPrefix(full, partial.Content[0].Text) {
		t.Fatalf("partial message = %+v, want a prefix of %q", partial, full)
	}
	if evs[4].ID != previewID {
		t.Errorf("partial message id %s, its previews said %s", evs[4].ID, previewID)
	}
	if span := decode[apitype.SpanModelRequestEnd](t, evs[5]); !span.IsError || span.ModelRequestStartID != evs[2].ID {
		t.Errorf("span end = %+v", span)
	}

	f.say(id, "never mind: say hi")
	f.waitIdle(id, 2)
	reqs := f.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	want := []string{
		"user: text(tell me everything)",
		"assistant: text(" + partial.Content[0].Text + ") text(" + interruptedNote + ")",
		"user: text(never mind: say hi)",
	}
	if got := roles(reqs[1].Messages); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("second request:\n got %q\nwant %q", got, want)
	}
}

// TestInterruptBeforeAnyTextInNextRequest: a turn interrupted before the model said anything (here, while its
// tool ran) ends, in the next request, with the interrupted tool result and an assistant note, before the next
// user message.
func TestInterruptBeforeAnyTextInNextRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	started := make(chan struct{})
	f.hands.run = func(ctx context.Context, call *sandbox.Call) (sandbox.Result, error) {
		close(started)
		<-ctx.Done()
		return sandbox.Result{}, ctx.Err()
	}
	f.srv.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_s", Name: "bash", Input: `{"command":"sleep 1000"}`}}},
		modeltest.Turn{Text: "Hi."})
	f.start(f.config())
	id := f.session(toolset)
	f.say(id, "wait a long time")
	<-started
	f.send(id, interrupt, apitype.UserInterrupt{})
	f.waitIdle(id, 1)
	f.say(id, "never mind: say hi")
	f.waitIdle(id, 2)
	reqs := f.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	want := []string{
		"user: text(wait a long time)",
		"assistant: tool_use()",
		"user: tool_result(interrupted by the user)",
		"assistant: text(" + interruptedNote + ")",
		"user: text(never mind: say hi)",
	}
	if got := roles(reqs[1].Messages); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("second request:\n got %q\nwant %q", got, want)
	}
}

// TestInterruptWhileIdleAddsNoNote: an interrupt that arrives when no turn runs cuts nothing short: the model's
// context gets no note.
func TestInterruptWhileIdleAddsNoNote(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{Text: "Hello."}, modeltest.Turn{Text: "Hello again."})
	f.start(f.config())
	id := f.session()
	f.say(id, "hi")
	f.waitIdle(id, 1)
	ie := f.send(id, interrupt, apitype.UserInterrupt{})
	f.waitFor(id, "interrupt processed", func(evs []apitype.Event) bool {
		return slices.ContainsFunc(evs, func(e apitype.Event) bool { return e.ID == ie.ID && e.ProcessedAt != nil })
	})
	f.say(id, "hi again")
	f.waitIdle(id, 2)
	reqs := f.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	want := []string{"user: text(hi)", "assistant: text(Hello.)", "user: text(hi again)"}
	if got := roles(reqs[1].Messages); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("second request:\n got %q\nwant %q", got, want)
	}
}
