package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestDreamSurvivesCrash is issue 24: a dream survives the crash of the process that runs it like any session.
// One `corral serve` on SQLite, killed with SIGKILL twice and started again on the same data each time:
//
//  1. Right after POST /v1/dreams, before the runner's next pass: the restarted server (once its maintain leader
//     lease is free again) starts the dream, once.
//  2. In the middle of the dream's turn, the server being both the brain holding the dream's session and the
//     maintain leader following the dream: the session's first bash call has written a memory through the
//     output store's mount, and its next model request is held. The restarted server resumes the session (the
//     held request asked again, the finished one not), the session's second bash call writes another memory,
//     and its turn ends.
//
// The dream then completes: its output store holds both memories (the one written before the crash, never
// collected by the killed server, and the one written after), the input store is unchanged, the usage is each
// answered model request's once, and the dream has one session, one output store and one start message.
func TestDreamSurvivesCrash(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	data := t.TempDir()
	s1 := startServer(t, data, model)
	c := sdkClient(s1)
	// The maintain leader lease of a killed server lasts 30 s (maintain.DefaultTTL): each restart waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The dream's inputs: one session of one turn, and a store of two memories.
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "worker", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "dream-crash"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	model.Script(modeltest.Turn{Text: "Noted: TOPIC-CRASH deploys with make"})
	if _, err := c.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{
				Text: "remember TOPIC-CRASH"}}})}}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s1.client(), sess.ID)
	in, err := c.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "crash notes"})
	if err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{"/deploy.md": "deploy with make", "/deploy-copy.md": "deploy with make"} {
		if _, err := c.Beta.MemoryStores.Memories.New(ctx, in.ID, anthropic.BetaMemoryStoreMemoryNewParams{
			Path: path, Content: anthropic.String(content)}); err != nil {
			t.Fatal(err)
		}
	}

	// The dream's session: a bash call that writes through the output mount before the crash; a model request
	// held until the crash; after it, a bash call that writes again (and says whether the first write is still
	// in the mount, and whether the input mount is still read-only), and the end of the turn. Each answered
	// request has its own usage, the held one too (it must never be counted).
	const findMounts = `out=""; in=""; for d in /mnt/memory/*/; do if [ -w "$d" ]; then out="$d"; else in="$d"; fi; done
test -n "$out" && test -n "$in"
`
	before := bashTurn(t, findMounts+`echo "written before the crash" > "$out/before.md"
rm "$out/deploy-copy.md"`)
	before.Match, before.Usage = dreaming, modeltest.Usage{InputTokens: 300, OutputTokens: 40}
	hold := make(chan struct{})
	defer close(hold)
	after := bashTurn(t, findMounts+`seen=no; if [ -f "$out/before.md" ]; then seen=yes; fi
ro=no; if ! touch "$in/intruder.md" 2>/dev/null; then ro=yes; fi
ls /mnt/session/uploads/transcripts/ > "$out/transcripts.md"
echo "written after the restart; before.md seen: $seen; input read-only: $ro" > "$out/after.md"`)
	after.Match, after.Usage = dreaming, modeltest.Usage{InputTokens: 500, OutputTokens: 50}
	model.Script(before,
		modeltest.Turn{Text: "held until the crash", Match: dreaming, Hold: hold,
			Usage: modeltest.Usage{InputTokens: 90000, OutputTokens: 9000}},
		after,
		modeltest.Turn{Text: "The memory store is consolidated.", Match: dreaming,
			Usage: modeltest.Usage{InputTokens: 700, OutputTokens: 10, CacheReadInputTokens: 7}})

	// 1. The kill right after the dream's creation.
	d, err := c.Beta.Dreams.New(ctx, anthropic.BetaDreamNewParams{
		Inputs: []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfMemoryStore(in.ID),
			anthropic.BetaDreamInputParamOfSessions([]string{sess.ID})},
		Model: anthropic.BetaDreamNewParamsModelUnion{OfString: anthropic.String("claude-sonnet-4-5")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s1.exited
	if d.Status != anthropic.BetaDreamStatusPending {
		t.Fatalf("created %s", d.RawJSON())
	}
	if n := dreamRequests(model); n > 0 {
		t.Logf("the killed server's runner had started the dream already (%d model requests of its session)", n)
	}

	// 2. The restarted server starts the dream; the kill in the middle of its session's turn.
	killed := time.Now()
	s2 := startServer(t, data, model)
	c = sdkClient(s2)
	for dreamRequests(model) < 2 {
		select {
		case <-ctx.Done():
			g, _ := c.Beta.Dreams.Get(context.Background(), d.ID, anthropic.BetaDreamGetParams{})
			t.Fatalf("the dream's session did not reach its held model request: %d requests; dream %s", dreamRequests(model), g.RawJSON())
		case <-s2.exited:
			t.Fatalf("the restarted server exited:\n%s", s2.stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("the restarted server started the dream; its session reached the held request %v after the first SIGKILL",
		time.Since(killed).Round(time.Millisecond))
	running, err := c.Beta.Dreams.Get(ctx, d.ID, anthropic.BetaDreamGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if running.Status != anthropic.BetaDreamStatusRunning || running.SessionID == "" {
		t.Fatalf("the dream whose session is mid-turn: %s", running.RawJSON())
	}
	if err := s2.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s2.exited

	// 3. The restarted server resumes the session, and its leader follows the dream to its end.
	killed = time.Now()
	s3 := startServer(t, data, model)
	c = sdkClient(s3)
	d = waitDream(ctx, t, c, d.ID, anthropic.BetaDreamStatusCompleted)
	t.Logf("the dream completed %v after the second SIGKILL", time.Since(killed).Round(time.Millisecond))
	if d.SessionID != running.SessionID || len(d.Outputs) != 1 || d.Outputs[0].MemoryStoreID == in.ID ||
		d.JSON.Error.Raw() != "null" {
		t.Fatalf("completed dream %s (running, it was %s)", d.RawJSON(), running.RawJSON())
	}
	events := listEvents(t, s3.client(), d.SessionID)
	defer func() {
		if t.Failed() {
			t.Logf("the dream's session: %v", types(events))
		}
	}()

	// What the model wrote through the output mount, before the crash and after it, is the output store's; the
	// input store is unchanged.
	got := memories(ctx, t, c, d.Outputs[0].MemoryStoreID)
	if _, dup := got["/deploy-copy.md"]; dup || got["/deploy.md"] != "deploy with make" ||
		got["/before.md"] != "written before the crash\n" ||
		got["/after.md"] != "written after the restart; before.md seen: yes; input read-only: yes\n" ||
		got["/transcripts.md"] != sess.ID+".md\n" {
		t.Errorf("output memories %q", got)
	}
	if was := memories(ctx, t, c, in.ID); len(was) != 2 || was["/deploy.md"] != "deploy with make" ||
		was["/deploy-copy.md"] != "deploy with make" {
		t.Errorf("the input store changed: %q", was)
	}

	// The usage: each answered model request's, once (the first bash call's request is not counted again by
	// the resumed brain, the held one not at all); and the dream's is its session's.
	if d.Usage.InputTokens != 1500 || d.Usage.OutputTokens != 100 || d.Usage.CacheReadInputTokens != 7 ||
		d.Usage.CacheCreationInputTokens != 0 {
		t.Errorf("usage %s, want 1500 in, 100 out, 7 cache read (each answered request once)", d.Usage.RawJSON())
	}
	ds, err := c.Beta.Sessions.Get(ctx, d.SessionID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Usage.InputTokens != d.Usage.InputTokens || ds.Usage.OutputTokens != d.Usage.OutputTokens ||
		ds.Usage.CacheReadInputTokens != d.Usage.CacheReadInputTokens {
		t.Errorf("the dream's usage %s is not its session's %s", d.Usage.RawJSON(), ds.Usage.RawJSON())
	}
	if n := dreamRequests(model); n != 4 {
		t.Errorf("%d model requests of the dream's session, want 4 (bash, held, the held one asked again, end)", n)
	}

	// One of everything the dream makes: one session (with one start message, and the takeover said once),
	// one output store.
	var dreamSessions []string
	iter := c.Beta.Sessions.ListAutoPaging(ctx, anthropic.BetaSessionListParams{IncludeArchived: anthropic.Bool(true)})
	for iter.Next() {
		if s := iter.Current(); s.Metadata["dream_id"] == d.ID || strings.Contains(s.Title, d.ID) {
			dreamSessions = append(dreamSessions, s.ID)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(dreamSessions) != 1 || dreamSessions[0] != d.SessionID {
		t.Errorf("the dream's sessions: %v, want only %s", dreamSessions, d.SessionID)
	}
	var outputs []string
	stores := c.Beta.MemoryStores.ListAutoPaging(ctx, anthropic.BetaMemoryStoreListParams{IncludeArchived: anthropic.Bool(true)})
	for stores.Next() {
		if st := stores.Current(); st.Metadata["dream_id"] == d.ID || strings.HasPrefix(st.Name, "crash notes (dreamed") {
			outputs = append(outputs, st.ID)
		}
	}
	if err := stores.Err(); err != nil {
		t.Fatal(err)
	}
	if len(outputs) != 1 || outputs[0] != d.Outputs[0].MemoryStoreID {
		t.Errorf("the dream's output stores: %v, want only %s", outputs, d.Outputs[0].MemoryStoreID)
	}
	assertLogSound(t, events)
	assertCrashRecovered(t, events)
	if n := count(events, "user.message"); n != 1 {
		t.Errorf("%d user messages in the dream's session, want its start's only", n)
	}
	if n := count(events, "agent.tool_use"); n != 2 || count(events, "agent.tool_result") != 2 {
		t.Errorf("%d tool calls and %d results, want the two bash calls, each run once", n, count(events, "agent.tool_result"))
	}
	for _, e := range events {
		if e["type"] == "agent.tool_result" && e["is_error"] == true {
			t.Errorf("a bash call of the dream failed: %v", e)
		}
	}
	if n := count(events, "session.status_idle"); n != 1 {
		t.Errorf("the dream's session idled %d times, want once, at its end", n)
	}
}

// dreamRequests counts the model requests of dreams' sessions.
func dreamRequests(model *modeltest.Server) int {
	n := 0
	for _, r := range model.Requests() {
		if dreaming(&r) {
			n++
		}
	}
	return n
}
