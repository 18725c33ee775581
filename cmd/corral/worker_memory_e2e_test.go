package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestCorralWorkerMemory: `corral worker` mounts a self-hosted session's memory stores in its bwrap sandbox at
// /mnt/memory/<slug>, with the store's memories read through the API with the work item's sessions token; the
// read_only store refuses writes; what the bash writes, changes and removes in the read_write store is
// collected at the end of each turn as versions whose actor is the session (created, modified, deleted); a link
// there is not stored, and the next tool result says why; a file written after the turn ended is collected
// before the worker lets the session's work item go.
func TestCorralWorkerMemory(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	s, c := workerServer(t, "10s",
		bashTurn(t, "cat /mnt/memory/style/rules.md; echo; (echo x > /mnt/memory/style/new.md) 2>/dev/null && echo ro-refused-not || echo ro-refused; "+
			"cat /mnt/memory/notes/seed.md; echo; echo v2 > /mnt/memory/notes/seed.md && "+
			"mkdir -p /mnt/memory/notes/notes && echo 'from the worker' > /mnt/memory/notes/notes/w.md && ln -s /etc/passwd /mnt/memory/notes/link && echo written"),
		modeltest.Turn{Text: "Noted."},
		bashTurn(t, "cat /mnt/memory/notes/notes/w.md && rm /mnt/memory/notes/seed.md && echo removed"),
		modeltest.Turn{Text: "Done."},
		bashTurn(t, "(sleep 1; echo late > /mnt/memory/notes/late.md) >/dev/null 2>&1 & echo later"),
		modeltest.Turn{Text: "Later."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	notes, err := c.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "Notes"})
	if err != nil {
		t.Fatal(err)
	}
	style, err := c.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "Style"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ store, path, content string }{{style.ID, "/rules.md", "be brief"}, {notes.ID, "/seed.md", "seeded"}} {
		if _, err := c.Beta.MemoryStores.Memories.New(ctx, m.store, anthropic.BetaMemoryStoreMemoryNewParams{
			Path: m.path, Content: anthropic.String(m.content)}); err != nil {
			t.Fatal(err)
		}
	}
	envID, key, agentID := selfHostedEnv(ctx, t, c, "worker-memory")
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{
				MemoryStoreID: notes.ID, Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadWrite}},
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{
				MemoryStoreID: style.ID, Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	// A short hold: the worker lets the session's item go 3 s after a turn ends, and takes the next one.
	startWorker(t, s, envID, key, data, "worker-mem", 420000, 3*time.Second)

	// versions waits until the session's versions in the notes store are want (operation and path, oldest
	// first): the worker collects once it sees the turn end, just after the client does.
	versions := func(want ...string) {
		t.Helper()
		var got []string
		for {
			vs, err := c.Beta.MemoryStores.MemoryVersions.List(ctx, notes.ID, anthropic.BetaMemoryStoreMemoryVersionListParams{SessionID: anthropic.String(sess.ID)})
			if err != nil {
				t.Fatal(err)
			}
			got = got[:0]
			for _, v := range vs.Data {
				if v.CreatedBy.Type != "session_actor" || v.CreatedBy.SessionID != sess.ID {
					t.Fatalf("a version of the session not written as its session_actor: %s", v.RawJSON())
				}
				got = append(got, string(v.Operation)+" "+v.Path)
			}
			slices.Sort(got)
			if slices.Equal(got, want) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("versions of the session %v, want %v", got, want)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	l := sendAndFollow(ctx, t, c, sess.ID, "Remember.")
	if want := "be brief\nro-refused\nseeded\nwritten"; len(l.uses) != 1 || strings.TrimSpace(l.results[l.uses[0]]) != want {
		t.Fatalf("uses %v, results %q; want %q", l.uses, l.results, want)
	}
	versions("created /notes/w.md", "modified /seed.md")
	page, err := c.Beta.MemoryStores.Memories.List(ctx, notes.ID, anthropic.BetaMemoryStoreMemoryListParams{
		View: anthropic.BetaManagedAgentsMemoryViewFull})
	if err != nil {
		t.Fatal(err)
	}
	var mems []string
	for _, m := range page.Data {
		mems = append(mems, m.Path+"="+m.Content)
	}
	if want := []string{"/notes/w.md=from the worker\n", "/seed.md=v2\n"}; !slices.Equal(mems, want) {
		t.Fatalf("the notes store holds %q, want %q", mems, want)
	}
	if page, err := c.Beta.MemoryStores.Memories.List(ctx, style.ID, anthropic.BetaMemoryStoreMemoryListParams{}); err != nil || len(page.Data) != 1 {
		t.Fatalf("the read_only store was written: %v %s", err, page.RawJSON())
	}
	// The store lives in the worker's session directory, not in the workspace.
	if _, err := os.Stat(filepath.Join(data, "workspaces", sess.ID, "notes")); !os.IsNotExist(err) {
		t.Errorf("the store's directory is in the workspace: %v", err)
	}

	// The next tool result starts with why the link was not stored.
	l = sendAndFollow(ctx, t, c, sess.ID, "Forget the seed.")
	if len(l.uses) != 1 || !strings.HasSuffix(l.results[l.uses[0]], "from the worker\nremoved") ||
		!strings.Contains(l.results[l.uses[0]], "/mnt/memory/notes/link: it is a symbolic link") {
		t.Fatalf("uses %v, results %q", l.uses, l.results)
	}
	versions("created /notes/w.md", "deleted /seed.md", "modified /seed.md")

	// A file written after the turn ended is collected before the worker lets the item go.
	l = sendAndFollow(ctx, t, c, sess.ID, "Write it later.")
	if len(l.uses) != 1 || strings.TrimSpace(l.results[l.uses[0]]) != "later" {
		t.Fatalf("uses %v, results %q", l.uses, l.results)
	}
	versions("created /late.md", "created /notes/w.md", "deleted /seed.md", "modified /seed.md")
}
