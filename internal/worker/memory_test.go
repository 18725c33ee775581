package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/workspace"
)

// apiServer is a real API server over SQLite, a client of it with its API key, and its store.
func apiServer(t *testing.T) (*client.Client, store.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Keys: &api.KeyAuth{Static: "test-key", Store: st}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = st.Close()
	})
	c, err := client.New(client.Config{BaseURL: srv.URL, APIKey: "test-key", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

// TestMemoriesOverAPI: the worker's workspace.Memories against a real server (with the API key: the sessions
// token's scope and actor are the API's, tested there). A store is listed whole, past a page of the full view;
// a put creates the memory at a path or updates the one there, whether the adapter saw it (its id) or not (it
// looks the path up), and after a deletion elsewhere creates it again; a delete's precondition, a deleted memory
// and an archived store get the workspace's errors; a session the worker does not hold gets no call.
func TestMemoriesOverAPI(t *testing.T) {
	t.Parallel()
	c, st := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC()
	ms := &apitype.MemoryStore{Type: apitype.ObjectMemoryStore, ID: apitype.NewID(apitype.PrefixMemoryStore), Name: "notes",
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if err := st.MemoryStoreCreate(ctx, ms); err != nil {
		t.Fatal(err)
	}
	for i := range 23 {
		if _, err := c.MemoryCreate(ctx, ms.ID, fmt.Sprintf("/d/m%02d.md", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	h := newHeld()
	m := newMemories(h)
	if _, err := m.ListMemories(ctx, ms.ID); !errors.Is(err, errNotHeld) {
		t.Fatalf("list of a store of no held session: %v", err)
	}
	release := h.hold("sesn_1", c, &sandbox.Recipe{Resources: []apitype.Resource{{Type: apitype.ResourceMemoryStore, MemoryStoreID: ms.ID}}})
	mems, err := m.ListMemories(ctx, ms.ID)
	if err != nil || len(mems) != 23 || mems[22].Path != "/d/m22.md" || mems[22].Content != "22" || mems[22].SHA256 != apitype.ContentSHA256("22") {
		t.Fatalf("list: %d memories, %v", len(mems), err)
	}

	// An update of a memory the list saw, a create, an update of a memory created elsewhere.
	up, err := m.PutMemory(ctx, ms.ID, "sesn_1", "/d/m00.md", "zero", "")
	if err != nil || up.ID != mems[0].ID || up.SHA256 != apitype.ContentSHA256("zero") {
		t.Fatalf("put over a listed memory: %+v %v (want id %s)", up, err, mems[0].ID)
	}
	cr, err := m.PutMemory(ctx, ms.ID, "sesn_1", "/new/a.md", "a", "")
	if err != nil || cr.ID == "" || cr.Path != "/new/a.md" {
		t.Fatalf("put at a new path: %+v %v", cr, err)
	}
	other, err := c.MemoryCreate(ctx, ms.ID, "/new/b.md", "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := m.PutMemory(ctx, ms.ID, "sesn_1", "/new/b.md", "b", ""); err != nil || b.ID != other.ID {
		t.Fatalf("put at a path taken elsewhere: %+v %v (want id %s)", b, err, other.ID)
	}
	// Deleted elsewhere: the put creates it again.
	if err := c.MemoryDelete(ctx, ms.ID, cr.ID, ""); err != nil {
		t.Fatal(err)
	}
	again, err := m.PutMemory(ctx, ms.ID, "sesn_1", "/new/a.md", "a2", "")
	if err != nil || again.ID == cr.ID {
		t.Fatalf("put after a deletion elsewhere: %+v %v", again, err)
	}
	if got, err := c.MemoryGet(ctx, ms.ID, again.ID); err != nil || *got.Content != "a2" {
		t.Fatalf("the memory put: %+v %v", got, err)
	}

	if err := m.DeleteMemory(ctx, ms.ID, "sesn_1", again.ID, apitype.ContentSHA256("stale")); !errors.Is(err, workspace.ErrMemoryPrecondition) {
		t.Fatalf("delete with a stale digest: %v", err)
	}
	if err := m.DeleteMemory(ctx, ms.ID, "sesn_1", again.ID, again.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteMemory(ctx, ms.ID, "sesn_1", again.ID, again.SHA256); !errors.Is(err, workspace.ErrMemoryNotFound) {
		t.Fatalf("delete of a deleted memory: %v", err)
	}
	if _, err := st.MemoryStoreArchive(ctx, &store.ArchiveParams{ID: ms.ID, At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutMemory(ctx, ms.ID, "sesn_1", "/d/m01.md", "one", ""); !errors.Is(err, workspace.ErrMemoryStoreArchived) {
		t.Fatalf("put in an archived store: %v", err)
	}

	release()
	if _, err := m.PutMemory(ctx, ms.ID, "sesn_1", "/d/m01.md", "one", ""); !errors.Is(err, errNotHeld) {
		t.Fatalf("put for a released session: %v", err)
	}
}
