package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/internal/workspace/memstore"
)

func open(t *testing.T) (store.Store, string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC()
	ms := &apitype.MemoryStore{Type: apitype.ObjectMemoryStore, ID: apitype.NewID(apitype.PrefixMemoryStore), Name: "s",
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if err := st.MemoryStoreCreate(t.Context(), ms); err != nil {
		t.Fatal(err)
	}
	return st, ms.ID
}

// TestMemories: puts and deletes are the session's (session_actor), a stale delete is a precondition failure, a
// write to an archived store says so, and a list reads every memory across pages.
func TestMemories(t *testing.T) {
	st, id := open(t)
	m := memstore.New(st)
	ctx := t.Context()
	for i := range 1200 { // more than a page
		if _, err := m.PutMemory(ctx, id, "sesn_x", fmt.Sprintf("/p/%04d.md", i), "c", ""); err != nil {
			t.Fatal(err)
		}
	}
	all, err := m.ListMemories(ctx, id)
	if err != nil || len(all) != 1200 || all[1199].Path != "/p/1199.md" || all[0].Content != "c" || all[0].SHA256 != apitype.ContentSHA256("c") {
		t.Fatalf("list: %d memories, %v", len(all), err)
	}
	if err := m.DeleteMemory(ctx, id, "sesn_x", all[0].ID, apitype.ContentSHA256("other")); !errors.Is(err, workspace.ErrMemoryPrecondition) {
		t.Errorf("stale delete: %v", err)
	}
	if err := m.DeleteMemory(ctx, id, "sesn_x", all[0].ID, all[0].SHA256); err != nil {
		t.Errorf("delete: %v", err)
	}
	if err := m.DeleteMemory(ctx, id, "sesn_x", all[0].ID, all[0].SHA256); !errors.Is(err, workspace.ErrMemoryNotFound) {
		t.Errorf("delete again: %v", err)
	}
	vs, err := st.MemoryVersionList(ctx, &store.MemoryVersionListParams{StoreID: id, SessionID: "sesn_x", Limit: 2000})
	if err != nil || len(vs) != 1201 || vs[0].Operation != apitype.MemoryDeleted || vs[0].CreatedBy.Type != apitype.ActorSession {
		t.Fatalf("versions: %d, %v", len(vs), err)
	}
	if _, err := st.MemoryStoreArchive(ctx, &store.ArchiveParams{ID: id, At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutMemory(ctx, id, "sesn_x", "/a.md", "a", ""); !errors.Is(err, workspace.ErrMemoryStoreArchived) {
		t.Errorf("put to an archived store: %v", err)
	}
}

// TestMemoriesTooMany: a store of more than workspace.MaxMountedMemories memories is refused, with the reason.
func TestMemoriesTooMany(t *testing.T) {
	st, id := open(t)
	m := memstore.New(st)
	for i := range workspace.MaxMountedMemories + 1 {
		if _, err := m.PutMemory(t.Context(), id, "sesn_x", fmt.Sprintf("/%05d.md", i), "c", ""); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.ListMemories(t.Context(), id)
	if !errors.Is(err, workspace.ErrMemoryStoreTooLarge) || err.Error() != "the memory store is too large to be mounted: it holds more than 5000 memories" {
		t.Errorf("list: %v", err)
	}
	// Such a store is not mounted: its resource's error says why, and the session goes on.
	placer, err := workspace.New(workspace.Config{Memories: m})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	host := sandbox.HostDirs{Workspace: filepath.Join(root, "sesn_x"), Session: sandbox.SessionDir(root, "sesn_x")}
	r := &sandbox.Recipe{SessionID: "sesn_x", Resources: []apitype.Resource{{ID: "sesrsc_1", Type: apitype.ResourceMemoryStore,
		MemoryStoreID: id, Name: "s", Access: apitype.AccessReadWrite, MountPath: "/mnt/memory/s"}}}
	errs := placer.Place(t.Context(), r, host)
	if len(errs) != 1 || errs[0].MountPath != "/mnt/memory/s" || !strings.Contains(errs[0].Error(), "too large to be mounted: it holds more than 5000 memories") {
		t.Errorf("placement: %v", errs)
	}
}
