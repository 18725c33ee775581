package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestMemoryMounted is memory stores in sessions end to end, through the official SDK against a real `corral
// serve`, in every isolating backend: a session with a read_write store and a read_only one is told about both
// in its system prompt; its bash reads the read_only store's memory, cannot write there, and writes a file in
// the read_write store, which once the turn ends is a memory whose version's actor is the session; a second
// session sees it.
func TestMemoryMounted(t *testing.T) {
	t.Parallel()
	isolatingBackends(t, testMemoryMounted)
}

func testMemoryMounted(t *testing.T, sandboxArgs []string) {
	model := modeltest.NewServer(t)
	s := startServer(t, t.TempDir(), model, sandboxArgs...)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	notes, err := c.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "Notes", Description: anthropic.String("what we learnt")})
	if err != nil {
		t.Fatal(err)
	}
	style, err := c.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "Style"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.MemoryStores.Memories.New(ctx, style.ID, anthropic.BetaMemoryStoreMemoryNewParams{
		Path: "/rules.md", Content: anthropic.String("be brief")}); err != nil {
		t.Fatal(err)
	}
	model.Script(
		bashTurn(t, "cat /mnt/memory/style/rules.md; echo; (echo x > /mnt/memory/style/new.md) 2>/dev/null && echo ro-writable || echo ro-refused; "+
			"mkdir -p /mnt/memory/notes/notes && echo 'the answer is 42' > /mnt/memory/notes/notes/a.md && echo written"),
		modeltest.Turn{Text: "Noted."},
		bashTurn(t, "cat /mnt/memory/notes/notes/a.md"),
		modeltest.Turn{Text: "I remember."},
	)
	agentID, envID := sdkAgentEnv(ctx, t, c, anthropic.BetaEnvironmentNewParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{}})
	newSession := func(res ...anthropic.BetaSessionNewParamsResourceUnion) string {
		t.Helper()
		sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID, Resources: res})
		if err != nil {
			t.Fatal(err)
		}
		return sess.ID
	}
	rw := anthropic.BetaSessionNewParamsResourceUnion{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{
		MemoryStoreID: notes.ID, Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadWrite,
		Instructions: anthropic.String("Write one file per topic.")}}
	ro := anthropic.BetaSessionNewParamsResourceUnion{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{
		MemoryStoreID: style.ID, Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly}}

	first := newSession(rw, ro)
	events, _ := sendAndWait(ctx, t, c, first, "Remember the answer.")
	results := toolResults(events)
	if want := "be brief\nro-refused\nwritten"; len(results) != 1 || results[0].isError || results[0].text != want {
		t.Fatalf("tool results %+v, want one: %q", results, want)
	}
	reqs := model.Requests()
	if len(reqs) == 0 {
		t.Fatal("no model request")
	}
	for _, want := range []string{"/mnt/memory/notes (read-write): Notes — what we learnt", "Instructions for this store: Write one file per topic.",
		"/mnt/memory/style (read-only): Style", "persist across sessions"} {
		if !strings.Contains(reqs[0].System, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, reqs[0].System)
		}
	}
	vs, err := c.Beta.MemoryStores.MemoryVersions.List(ctx, notes.ID, anthropic.BetaMemoryStoreMemoryVersionListParams{SessionID: anthropic.String(first)})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.Data) != 1 || vs.Data[0].Operation != "created" || vs.Data[0].CreatedBy.Type != "session_actor" || vs.Data[0].CreatedBy.SessionID != first {
		t.Fatalf("versions of the session: %s", vs.RawJSON())
	}
	mem, err := c.Beta.MemoryStores.Memories.Get(ctx, vs.Data[0].MemoryID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: notes.ID})
	if err != nil || mem.Path != "/notes/a.md" || mem.Content != "the answer is 42\n" {
		t.Fatalf("the memory: %v %s", err, mem.RawJSON())
	}
	if page, err := c.Beta.MemoryStores.Memories.List(ctx, style.ID, anthropic.BetaMemoryStoreMemoryListParams{}); err != nil || len(page.Data) != 1 {
		t.Fatalf("the read_only store was written: %v %s", err, page.RawJSON())
	}

	second := newSession(rw)
	events, _ = sendAndWait(ctx, t, c, second, "What is the answer?")
	if results := toolResults(events); len(results) != 1 || results[0].text != "the answer is 42" {
		t.Fatalf("second session: %+v", results)
	}
}
