package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/store"
)

// newMemoryStore creates a memory store in st (the client has no call for it: the worker only uses memories).
func newMemoryStore(t *testing.T, st store.Store, name string) string {
	t.Helper()
	now := time.Now().UTC()
	m := &apitype.MemoryStore{Type: apitype.ObjectMemoryStore, ID: apitype.NewID(apitype.PrefixMemoryStore), Name: name,
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if err := st.MemoryStoreCreate(ctxT(t), m); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

func errType(err error) string {
	if e, ok := errors.AsType[*client.Error](err); ok {
		return e.Type
	}
	return ""
}

// The memory calls against a real server: create (a taken path is a memory_path_conflict_error), list in the
// full view page by page and with a depth, update and delete with their content_sha256 preconditions.
func TestMemories(t *testing.T) {
	t.Parallel()
	c, st, _ := newServer(t)
	ctx := ctxT(t)
	storeID := newMemoryStore(t, st, "notes")

	a, err := c.MemoryCreate(ctx, storeID, "/a.md", "one")
	if err != nil || a.Path != "/a.md" || a.Content == nil || *a.Content != "one" || a.ContentSHA256 != apitype.ContentSHA256("one") {
		t.Fatalf("create: %+v %v", a, err)
	}
	if _, err := c.MemoryCreate(ctx, storeID, "/a.md", "two"); !isStatus(err, http.StatusConflict) || errType(err) != string(apitype.ErrMemoryPathConflict) {
		t.Fatalf("create at a taken path: %v", err)
	}
	for i := range 25 {
		if _, err := c.MemoryCreate(ctx, storeID, fmt.Sprintf("/d/m%02d.md", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	var paths []string
	p := &client.MemoryListParams{Full: true, Limit: 20}
	for pages := 0; ; pages++ {
		page, err := c.MemoryList(ctx, storeID, p)
		if err != nil {
			t.Fatal(err)
		}
		if pages == 0 && len(page.Data) != 20 {
			t.Fatalf("first page of %d items, want 20", len(page.Data))
		}
		for _, m := range page.Data {
			if m.Content == nil || m.ContentSHA256 != apitype.ContentSHA256(*m.Content) {
				t.Fatalf("a memory of the full view without its content: %+v", m)
			}
			paths = append(paths, m.Path)
		}
		if p.Page = page.Next(); p.Page == "" {
			break
		}
	}
	if len(paths) != 26 || paths[0] != "/a.md" || paths[25] != "/d/m24.md" || !slices.IsSorted(paths) {
		t.Fatalf("listed %v", paths)
	}
	page, err := c.MemoryList(ctx, storeID, &client.MemoryListParams{PathPrefix: "/", Depth: 1})
	if err != nil || len(page.Data) != 2 || page.Data[0].Path != "/a.md" || page.Data[0].Content != nil ||
		page.Data[1].Type != apitype.ObjectMemoryPrefix || page.Data[1].Path != "/d/" {
		t.Fatalf("depth 1: %+v %v", page, err)
	}

	two := "two"
	if _, err := c.MemoryUpdate(ctx, storeID, a.ID, &client.MemoryUpdateParams{Content: &two, ExpectSHA256: apitype.ContentSHA256("nope")}); errType(err) != string(apitype.ErrMemoryPrecondition) {
		t.Fatalf("update with a stale precondition: %v", err)
	}
	u, err := c.MemoryUpdate(ctx, storeID, a.ID, &client.MemoryUpdateParams{Content: &two, ExpectSHA256: a.ContentSHA256})
	if err != nil || u.ID != a.ID || *u.Content != "two" {
		t.Fatalf("update: %+v %v", u, err)
	}
	if err := c.MemoryDelete(ctx, storeID, a.ID, a.ContentSHA256); errType(err) != string(apitype.ErrMemoryPrecondition) {
		t.Fatalf("delete with a stale precondition: %v", err)
	}
	if err := c.MemoryDelete(ctx, storeID, a.ID, u.ContentSHA256); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MemoryGet(ctx, storeID, a.ID); !client.IsNotFound(err) {
		t.Fatalf("get a deleted memory: %v", err)
	}
}
