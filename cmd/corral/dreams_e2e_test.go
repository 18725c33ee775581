package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// dreaming matches the model requests of a dream's session (by its system prompt), so that the dream's scripted
// turns are not taken by another session's.
func dreaming(r *modeltest.Request) bool { return strings.Contains(r.System, "You are dreaming") }

// TestDreamThroughSDK: through the official SDK against `corral serve` and the fake model: three sessions run,
// then a dream over them and a memory store. The dream's session reads the transcripts and the input store's
// mount, and writes with bash into the output store's mount: the dream completes with a new store holding what it
// wrote (a duplicate dropped, a pattern recorded, the input's other memories kept), the input store unchanged, the
// usage its session's. A second dream, whose session is held in a long tool call, is canceled: its session is
// interrupted.
func TestDreamThroughSDK(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	s := startServer(t, t.TempDir(), model)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	// Three sessions, each one turn.
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "worker", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "dreams"})
	if err != nil {
		t.Fatal(err)
	}
	var sessions []string
	for i, topic := range []string{"TOPIC-ONE builds with make", "TOPIC-TWO builds with make", "TOPIC-THREE deploys on fridays"} {
		sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
		if err != nil {
			t.Fatal(err)
		}
		model.Script(modeltest.Turn{Text: "Noted: " + topic})
		if _, err := c.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
			Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
				[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{
					Text: "remember " + topic}}})}}); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, s.client(), sess.ID)
		sessions = append(sessions, sess.ID)
		_ = i
	}

	// The input store: a memory and its duplicate.
	in, err := c.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "team notes"})
	if err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{"/build.md": "build with make", "/build-copy.md": "build with make",
		"/keep.md": "KEEP-ME"} {
		if _, err := c.Beta.MemoryStores.Memories.New(ctx, in.ID, anthropic.BetaMemoryStoreMemoryNewParams{
			Path: path, Content: anthropic.String(content)}); err != nil {
			t.Fatal(err)
		}
	}

	// The dream's session: one bash call that reads the transcripts and writes the output mount (the one
	// directory of /mnt/memory it may write), then the end of its turn.
	script := `set -e
out=""; for d in /mnt/memory/*/; do if [ -w "$d" ]; then out="$d"; fi; done
test -n "$out"
in=""; for d in /mnt/memory/*/; do if [ ! -w "$d" ]; then in="$d"; fi; done
test -f "$in/build-copy.md"
! touch "$in/new.md" 2>/dev/null
grep -h '^# Session' /mnt/session/uploads/transcripts/*.md > "$out/sessions.md"
grep -l 'builds with make' /mnt/session/uploads/transcripts/*.md | wc -l | sed 's/^/sessions that build with make: /' > "$out/patterns.md"
rm "$out/build-copy.md"
echo "written to $out"`
	turn := bashTurn(t, script)
	turn.Match, turn.Usage = dreaming, modeltest.Usage{InputTokens: 300, OutputTokens: 40}
	model.Script(turn, modeltest.Turn{Text: "The memory store is consolidated.", Match: dreaming,
		Usage: modeltest.Usage{InputTokens: 500, OutputTokens: 10, CacheReadInputTokens: 7}})

	d, err := c.Beta.Dreams.New(ctx, anthropic.BetaDreamNewParams{
		Inputs: []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfMemoryStore(in.ID),
			anthropic.BetaDreamInputParamOfSessions(sessions)},
		Model:        anthropic.BetaDreamNewParamsModelUnion{OfString: anthropic.String("claude-sonnet-4-5")},
		Instructions: anthropic.String("Focus on build habits."),
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != anthropic.BetaDreamStatusPending {
		t.Fatalf("created %s", d.RawJSON())
	}
	d = waitDream(ctx, t, c, d.ID, anthropic.BetaDreamStatusCompleted)
	if len(d.Outputs) != 1 || d.Outputs[0].MemoryStoreID == in.ID || d.SessionID == "" || d.EndedAt.IsZero() ||
		d.JSON.Error.Raw() != "null" {
		t.Fatalf("completed dream %s", d.RawJSON())
	}
	if d.Usage.InputTokens != 800 || d.Usage.OutputTokens != 50 || d.Usage.CacheReadInputTokens != 7 {
		t.Errorf("usage %s, want the dream session's (800 in, 50 out, 7 cache read)", d.Usage.RawJSON())
	}
	// The dream's session saw its task, its instructions and where everything is.
	var system, first string
	for _, r := range model.Requests() {
		if dreaming(&r) {
			system = r.System
			if len(r.Messages) > 0 && len(r.Messages[0].Content) > 0 {
				first = r.Messages[0].Content[0].Text
			}
			break
		}
	}
	for _, want := range []string{"/mnt/session/uploads/transcripts/", "read-only", "read-write", "team notes"} {
		if !strings.Contains(system, want) {
			t.Errorf("the dream's system prompt lacks %q:\n%s", want, system)
		}
	}
	if !strings.Contains(first, "Focus on build habits.") {
		t.Errorf("the dream's first message lacks its instructions: %q", first)
	}

	out, err := c.Beta.MemoryStores.Get(ctx, d.Outputs[0].MemoryStoreID, anthropic.BetaMemoryStoreGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.Name, "team notes (dreamed ") {
		t.Errorf("output store named %q", out.Name)
	}
	got := memories(ctx, t, c, out.ID)
	if _, dup := got["/build-copy.md"]; dup || got["/build.md"] != "build with make" || got["/keep.md"] != "KEEP-ME" ||
		!strings.Contains(got["/patterns.md"], "sessions that build with make: 2") {
		t.Errorf("output memories %v; the dream's session: %v", got, listEvents(t, s.client(), d.SessionID))
	}
	for _, id := range sessions {
		if !strings.Contains(got["/sessions.md"], id) {
			t.Errorf("the transcripts the dream read (%q) lack session %s", got["/sessions.md"], id)
		}
	}
	if before := memories(ctx, t, c, in.ID); len(before) != 3 || before["/build-copy.md"] != "build with make" {
		t.Errorf("the input store changed: %v", before)
	}

	// A dream canceled while its session is in a long tool call: canceled, and its session interrupted.
	hold := bashTurn(t, "sleep 60")
	hold.Match = dreaming
	model.Script(hold, modeltest.Turn{Text: "interrupted", Match: dreaming})
	d2, err := c.Beta.Dreams.New(ctx, anthropic.BetaDreamNewParams{
		Inputs: []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfMemoryStore(in.ID),
			anthropic.BetaDreamInputParamOfSessions(sessions[:1])},
		Model:          anthropic.BetaDreamNewParamsModelUnion{OfString: anthropic.String("claude-sonnet-4-5")},
		OutputBehavior: anthropic.BetaOutputBehaviorParamOfUpdateExisting(in.ID),
	})
	if err != nil {
		t.Fatal(err)
	}
	d2 = waitDream(ctx, t, c, d2.ID, anthropic.BetaDreamStatusRunning)
	for ctx.Err() == nil {
		evs := listEvents(t, s.client(), d2.SessionID)
		if slices.ContainsFunc(evs, func(e map[string]any) bool { return e["type"] == "agent.tool_use" }) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	c2, err := c.Beta.Dreams.Cancel(ctx, d2.ID, anthropic.BetaDreamCancelParams{})
	if err != nil || c2.Status != anthropic.BetaDreamStatusCanceled || c2.Outputs[0].MemoryStoreID != in.ID {
		t.Fatalf("cancel: %v %s", err, c2.RawJSON())
	}
	evs := waitIdle(t, s.client(), d2.SessionID)
	if !slices.ContainsFunc(evs, func(e map[string]any) bool { return e["type"] == "user.interrupt" }) {
		t.Errorf("the canceled dream's session was not interrupted: %v", types(evs))
	}
	time.Sleep(3 * time.Second) // a runner pass after the cancel changes nothing
	if g, err := c.Beta.Dreams.Get(ctx, d2.ID, anthropic.BetaDreamGetParams{}); err != nil || g.Status != anthropic.BetaDreamStatusCanceled {
		t.Fatalf("after the cancel: %v %s", err, g.RawJSON())
	}
}

// waitDream polls a dream until it has the status; a dream that ends with another fails the test.
func waitDream(ctx context.Context, t *testing.T, c anthropic.Client, id string, want anthropic.BetaDreamStatus) *anthropic.BetaDream {
	t.Helper()
	for {
		d, err := c.Beta.Dreams.Get(ctx, id, anthropic.BetaDreamGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Status == want {
			return d
		}
		switch d.Status {
		case anthropic.BetaDreamStatusCompleted, anthropic.BetaDreamStatusFailed, anthropic.BetaDreamStatusCanceled:
			t.Fatalf("dream %s ended %s, want %s: %s", id, d.Status, want, d.RawJSON())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("dream %s is %s, want %s", id, d.Status, want)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// memories returns a store's memories by path, with their contents.
func memories(ctx context.Context, t *testing.T, c anthropic.Client, storeID string) map[string]string {
	t.Helper()
	out := map[string]string{}
	page, err := c.Beta.MemoryStores.Memories.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryListParams{
		View: anthropic.BetaManagedAgentsMemoryViewFull, Limit: anthropic.Int(20)})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range page.Data {
		if m.Type == "memory" {
			out[m.Path] = m.Content
		}
	}
	return out
}
