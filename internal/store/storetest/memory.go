package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var (
	apiActor     = apitype.Actor{Type: apitype.ActorAPI, APIKeyID: "apikey_011Cmemory"}
	sessionActor = apitype.Actor{Type: apitype.ActorSession, SessionID: "sesn_011Cmemory"}
)

func newMemoryStore(created time.Time) *apitype.MemoryStore {
	return &apitype.MemoryStore{Type: apitype.ObjectMemoryStore, ID: apitype.NewID(apitype.PrefixMemoryStore),
		Name: "Notes", Description: "what we learnt", Metadata: map[string]string{"team": "a"},
		CreatedAt: created, UpdatedAt: created}
}

func memoryStoreID(s *apitype.MemoryStore) string     { return s.ID }
func memoryVersionID(v *apitype.MemoryVersion) string { return v.ID }

// memWriter writes the memories of one store, each write a second after the one before.
type memWriter struct {
	s       store.Store
	storeID string
	at      time.Time
}

func newMemWriter(t *testing.T, s store.Store) *memWriter {
	t.Helper()
	st := newMemoryStore(base)
	must(t, s.MemoryStoreCreate(ctxBg, st), "create memory store")
	return &memWriter{s: s, storeID: st.ID, at: base}
}

// write runs p on the writer's store with fresh ids, at the next second, by apiActor unless p has an actor.
func (w *memWriter) write(p store.MemoryWriteParams) (*store.MemoryWriteResult, error) {
	w.at = w.at.Add(time.Second)
	p.StoreID, p.At = w.storeID, w.at
	if p.Actor.Type == "" {
		p.Actor = apiActor
	}
	p.NewMemoryID, p.NewVersionID = apitype.NewID(apitype.PrefixMemory), apitype.NewID(apitype.PrefixMemVersion)
	return w.s.MemoryWrite(ctxBg, &p)
}

func (w *memWriter) mustWrite(t *testing.T, p store.MemoryWriteParams, what string) *store.MemoryWriteResult {
	t.Helper()
	res, err := w.write(p)
	must(t, err, what)
	return res
}

func (w *memWriter) create(t *testing.T, path, content string) *apitype.Memory {
	t.Helper()
	return w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpCreate, Path: &path, Content: &content}, "create "+path).Memory
}

func (w *memWriter) versions(t *testing.T, p store.MemoryVersionListParams) []apitype.MemoryVersion {
	t.Helper()
	p.StoreID = w.storeID
	if p.Limit == 0 {
		p.Limit = 100
	}
	list, err := w.s.MemoryVersionList(ctxBg, &p)
	must(t, err, "list versions")
	return list
}

func testMemoryStore(t *testing.T, h Harness) {
	s := h.open(t)
	var sids []string
	for i := range 3 {
		st := newMemoryStore(base.Add(time.Duration(i) * time.Minute))
		must(t, s.MemoryStoreCreate(ctxBg, st), "create memory store")
		sids = append(sids, st.ID)
	}
	dup := newMemoryStore(base)
	dup.ID = sids[0]
	mustIs(t, s.MemoryStoreCreate(ctxBg, dup), store.ErrConflict, "create an existing id")
	got, err := s.MemoryStoreGet(ctxBg, sids[0])
	must(t, err, "get memory store")
	equal(t, got.Name, "Notes", "name")
	equal(t, got.Metadata["team"], "a", "metadata")
	sameTime(t, got.CreatedAt, base, "created_at")
	_, err = s.MemoryStoreGet(ctxBg, "memstore_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown store")

	upd, err := s.MemoryStoreUpdate(ctxBg, sids[0], func(st *apitype.MemoryStore) error {
		st.ID, st.Name, st.UpdatedAt = "memstore_other", "Renamed", base.Add(time.Hour)
		return nil
	})
	must(t, err, "update memory store")
	equal(t, upd.ID, sids[0], "update keeps the id")
	equal(t, upd.Name, "Renamed", "updated name")
	got, err = s.MemoryStoreGet(ctxBg, sids[0])
	must(t, err, "get updated store")
	equal(t, got.Name, "Renamed", "stored name")
	sameTime(t, got.UpdatedAt, base.Add(time.Hour), "stored updated_at")
	_, err = s.MemoryStoreUpdate(ctxBg, sids[0], func(*apitype.MemoryStore) error { return fmt.Errorf("refused: %w", store.ErrConflict) })
	mustIs(t, err, store.ErrConflict, "update refused by fn")
	_, err = s.MemoryStoreUpdate(ctxBg, "memstore_missing", func(*apitype.MemoryStore) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update unknown store")

	at := base.Add(2 * time.Hour)
	arch, err := s.MemoryStoreArchive(ctxBg, &store.ArchiveParams{ID: sids[1], At: at})
	must(t, err, "archive")
	sameTime(t, *arch.ArchivedAt, at, "archived_at")
	sameTime(t, arch.UpdatedAt, at, "archive sets updated_at")
	again, err := s.MemoryStoreArchive(ctxBg, &store.ArchiveParams{ID: sids[1], At: at.Add(time.Hour)})
	must(t, err, "archive again")
	sameTime(t, *again.ArchivedAt, at, "archiving again keeps the first time")
	sameTime(t, again.UpdatedAt, at, "archiving again keeps updated_at")
	_, err = s.MemoryStoreArchive(ctxBg, &store.ArchiveParams{ID: "memstore_missing", At: at})
	mustIs(t, err, store.ErrNotFound, "archive unknown store")

	list, err := s.MemoryStoreList(ctxBg, &store.ListParams{Limit: 10})
	must(t, err, "list")
	equal(t, ids(list, memoryStoreID), sids[0]+","+sids[2], "list hides the archived store")
	list, err = s.MemoryStoreList(ctxBg, &store.ListParams{Limit: 10, IncludeArchived: true, Desc: true})
	must(t, err, "list with archived")
	equal(t, ids(list, memoryStoreID), sids[2]+","+sids[1]+","+sids[0], "list desc with archived")
	from, to := base.Add(time.Minute), base.Add(time.Minute)
	list, err = s.MemoryStoreList(ctxBg, &store.ListParams{Limit: 10, IncludeArchived: true, CreatedFrom: &from, CreatedTo: &to})
	must(t, err, "list by created_at")
	equal(t, ids(list, memoryStoreID), sids[1], "created_at from and to")
	list, err = s.MemoryStoreList(ctxBg, &store.ListParams{Limit: 10, CreatedAfter: &from})
	must(t, err, "list created after")
	equal(t, ids(list, memoryStoreID), sids[2], "created_at after")
	list, err = s.MemoryStoreList(ctxBg, &store.ListParams{Limit: 1, IncludeArchived: true, After: &store.Cursor{CreatedAt: base, ID: sids[0]}})
	must(t, err, "list page")
	equal(t, ids(list, memoryStoreID), sids[1], "page after the first")

	must(t, s.MemoryStoreDelete(ctxBg, sids[2]), "delete")
	_, err = s.MemoryStoreGet(ctxBg, sids[2])
	mustIs(t, err, store.ErrNotFound, "get deleted store")
	mustIs(t, s.MemoryStoreDelete(ctxBg, sids[2]), store.ErrNotFound, "delete twice")
}

// testMemoryStoreDelete: deleting a store removes its memories and their versions, those of deleted memories too.
func testMemoryStoreDelete(t *testing.T, h Harness) {
	s := h.open(t)
	w := newMemWriter(t, s)
	kept := w.create(t, "/kept.md", "kept")
	gone := w.create(t, "/gone.md", "gone")
	del := w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpDelete, ID: gone.ID}, "delete memory")
	other := newMemWriter(t, s)
	otherMem := other.create(t, "/kept.md", "other store")

	must(t, s.MemoryStoreDelete(ctxBg, w.storeID), "delete store")
	_, err := s.MemoryGet(ctxBg, w.storeID, kept.ID)
	mustIs(t, err, store.ErrNotFound, "memory of a deleted store")
	for _, id := range []string{kept.MemoryVersionID, gone.MemoryVersionID, del.Version.ID} {
		_, err = s.MemoryVersionGet(ctxBg, w.storeID, id)
		mustIs(t, err, store.ErrNotFound, "version of a deleted store")
	}
	_, err = s.MemoryList(ctxBg, &store.MemoryListParams{StoreID: w.storeID, Limit: 10})
	mustIs(t, err, store.ErrNotFound, "list memories of a deleted store")
	_, err = s.MemoryVersionList(ctxBg, &store.MemoryVersionListParams{StoreID: w.storeID, Limit: 10})
	mustIs(t, err, store.ErrNotFound, "list versions of a deleted store")
	// A store of the same id starts empty: nothing of the old one was left behind.
	again := newMemoryStore(base)
	again.ID = w.storeID
	must(t, s.MemoryStoreCreate(ctxBg, again), "create the id again")
	items, err := s.MemoryList(ctxBg, &store.MemoryListParams{StoreID: w.storeID, Limit: 10})
	must(t, err, "list the new store")
	equal(t, len(items), 0, "memories of the new store")
	equal(t, len(w.versions(t, store.MemoryVersionListParams{})), 0, "versions of the new store")
	// The other store is untouched.
	got, err := s.MemoryGet(ctxBg, other.storeID, otherMem.ID)
	must(t, err, "memory of the other store")
	equal(t, *got.Content, "other store", "other store's content")
}

func testMemoryWrite(t *testing.T, h Harness) {
	s := h.open(t)
	w := newMemWriter(t, s)
	path, content := "/notes/a.md", "hello"
	res := w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpCreate, Path: &path, Content: &content,
		Actor: sessionActor}, "create")
	m, v := res.Memory, res.Version
	equal(t, m.Type, apitype.ObjectMemory, "memory type")
	equal(t, m.Path, path, "path")
	equal(t, m.ContentSHA256, apitype.ContentSHA256("hello"), "sha256")
	equal(t, m.ContentSizeBytes, int64(5), "size")
	equal(t, m.MemoryVersionID, v.ID, "current version")
	equal(t, v.Operation, apitype.MemoryCreated, "operation")
	equal(t, *v.Content, "hello", "version content")
	equal(t, *v.CreatedBy, sessionActor, "created_by")

	got, err := s.MemoryGet(ctxBg, w.storeID, m.ID)
	must(t, err, "get memory")
	equal(t, *got.Content, "hello", "stored content")
	equal(t, got.Path, path, "stored path")
	equal(t, got.MemoryStoreID, w.storeID, "store id")
	equal(t, got.MemoryVersionID, v.ID, "stored current version")
	sameTime(t, got.CreatedAt, w.at, "created_at")
	sameTime(t, got.UpdatedAt, w.at, "updated_at")
	created := w.at
	_, err = s.MemoryGet(ctxBg, w.storeID, "mem_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown memory")
	_, err = s.MemoryGet(ctxBg, "memstore_other", m.ID)
	mustIs(t, err, store.ErrNotFound, "get a memory through another store")
	gv, err := s.MemoryVersionGet(ctxBg, w.storeID, v.ID)
	must(t, err, "get version")
	equal(t, *gv.Content, "hello", "got version's content")
	equal(t, *gv.Path, path, "got version's path")
	equal(t, *gv.ContentSizeBytes, int64(5), "got version's size")
	equal(t, gv.RedactedAt == nil && gv.RedactedBy == nil, true, "not redacted")

	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpCreate, Path: &path, Content: &content})
	mustIs(t, err, store.ErrMemoryPathTaken, "create at a taken path")
	mustIs(t, err, store.ErrConflict, "a taken path is a conflict")
	b := w.create(t, "/notes/b.md", "bee")

	// Update the content under a precondition.
	next := "hello, world"
	res = w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: m.ID, Content: &next,
		ExpectSHA256: apitype.ContentSHA256("hello")}, "update content")
	equal(t, res.Memory.ID, m.ID, "updated id")
	equal(t, res.Version.Operation, apitype.MemoryModified, "update's operation")
	equal(t, res.Memory.MemoryVersionID, res.Version.ID, "update's version is current")
	got, err = s.MemoryGet(ctxBg, w.storeID, m.ID)
	must(t, err, "get updated")
	equal(t, *got.Content, next, "updated content")
	equal(t, got.ContentSHA256, apitype.ContentSHA256(next), "updated sha256")
	equal(t, got.ContentSizeBytes, int64(len(next)), "updated size")
	sameTime(t, got.CreatedAt, created, "update keeps created_at")
	sameTime(t, got.UpdatedAt, w.at, "update sets updated_at")

	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: m.ID, Content: &content,
		ExpectSHA256: apitype.ContentSHA256("hello")})
	mustIs(t, err, store.ErrMemoryPrecondition, "update under a stale precondition")
	mustIs(t, err, store.ErrConflict, "a failed precondition is a conflict")
	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpDelete, ID: m.ID, ExpectSHA256: apitype.ContentSHA256("hello")})
	mustIs(t, err, store.ErrMemoryPrecondition, "delete under a stale precondition")

	// A no-op writes no version.
	before := len(w.versions(t, store.MemoryVersionListParams{}))
	res = w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: m.ID, Content: &next, Path: &path}, "no-op update")
	equal(t, res.Version == nil, true, "a no-op has no version")
	equal(t, res.Memory.MemoryVersionID, got.MemoryVersionID, "a no-op keeps the current version")
	equal(t, len(w.versions(t, store.MemoryVersionListParams{})), before, "versions after a no-op")
	got, err = s.MemoryGet(ctxBg, w.storeID, m.ID)
	must(t, err, "get after no-op")
	equal(t, got.MemoryVersionID, res.Memory.MemoryVersionID, "stored version after a no-op")

	// Rename: the id stays, the version records the new path.
	renamed := "/notes/c.md"
	res = w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: m.ID, Path: &renamed}, "rename")
	equal(t, res.Memory.ID, m.ID, "rename keeps the id")
	equal(t, *res.Version.Path, renamed, "rename's version path")
	equal(t, *res.Version.Content, next, "rename's version content")
	got, err = s.MemoryGet(ctxBg, w.storeID, m.ID)
	must(t, err, "get renamed")
	equal(t, got.Path, renamed, "renamed path")
	equal(t, *got.Content, next, "renamed content")
	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: m.ID, Path: &b.Path})
	mustIs(t, err, store.ErrMemoryPathTaken, "rename onto a taken path")
	// The old path is free again.
	w.create(t, path, "new at the old path")
	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: "mem_missing", Content: &next})
	mustIs(t, err, store.ErrNotFound, "update unknown memory")

	// Delete: a version without content, and the versions outlive the memory.
	res = w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpDelete, ID: m.ID, ExpectSHA256: apitype.ContentSHA256(next)}, "delete")
	equal(t, res.Memory == nil, true, "a delete returns no memory")
	equal(t, res.Version.Operation, apitype.MemoryDeleted, "delete's operation")
	equal(t, *res.Version.Path, renamed, "delete's version path")
	equal(t, res.Version.Content == nil && res.Version.ContentSHA256 == nil && res.Version.ContentSizeBytes == nil, true,
		"a deletion has no content, sha256 or size")
	dv, err := s.MemoryVersionGet(ctxBg, w.storeID, res.Version.ID)
	must(t, err, "get deletion")
	equal(t, dv.Content == nil && dv.ContentSHA256 == nil && dv.ContentSizeBytes == nil, true, "stored deletion has no content")
	equal(t, *dv.Path, renamed, "stored deletion's path")
	_, err = s.MemoryGet(ctxBg, w.storeID, m.ID)
	mustIs(t, err, store.ErrNotFound, "get deleted memory")
	ops := []string{}
	for _, v := range w.versions(t, store.MemoryVersionListParams{MemoryID: m.ID}) {
		ops = append(ops, string(v.Operation))
	}
	equal(t, strings.Join(ops, ","), "deleted,modified,modified,created", "versions of the deleted memory")
	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpDelete, ID: m.ID})
	mustIs(t, err, store.ErrNotFound, "delete twice")

	// Put creates, then updates the memory at the path.
	pp, c1, c2 := "/put.md", "one", "two"
	res = w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpPut, Path: &pp, Content: &c1}, "put new")
	equal(t, res.Version.Operation, apitype.MemoryCreated, "put of a new path creates")
	putID := res.Memory.ID
	res = w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpPut, Path: &pp, Content: &c2,
		ExpectSHA256: apitype.ContentSHA256(c1)}, "put existing")
	equal(t, res.Version.Operation, apitype.MemoryModified, "put of an existing path updates")
	equal(t, res.Memory.ID, putID, "put keeps the memory")
	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpPut, Path: &pp, Content: &c1, ExpectSHA256: apitype.ContentSHA256(c1)})
	mustIs(t, err, store.ErrMemoryPrecondition, "put under a stale precondition")

	// An archived store's memories are read and delete only.
	_, err = s.MemoryStoreArchive(ctxBg, &store.ArchiveParams{ID: w.storeID, At: w.at})
	must(t, err, "archive store")
	np := "/new.md"
	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpCreate, Path: &np, Content: &c1})
	mustIs(t, err, store.ErrMemoryStoreArchived, "create in an archived store")
	mustIs(t, err, store.ErrConflict, "an archived store is a conflict")
	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: putID, Content: &c1})
	mustIs(t, err, store.ErrMemoryStoreArchived, "update in an archived store")
	_, err = w.write(store.MemoryWriteParams{Op: store.MemoryOpPut, Path: &pp, Content: &c1})
	mustIs(t, err, store.ErrMemoryStoreArchived, "put in an archived store")
	got, err = s.MemoryGet(ctxBg, w.storeID, putID)
	must(t, err, "read in an archived store")
	equal(t, *got.Content, c2, "content kept in an archived store")
	items, err := s.MemoryList(ctxBg, &store.MemoryListParams{StoreID: w.storeID, Limit: 10})
	must(t, err, "list an archived store")
	equal(t, len(items), 3, "memories of the archived store")
	w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpDelete, ID: b.ID}, "delete in an archived store")

	_, err = s.MemoryWrite(ctxBg, &store.MemoryWriteParams{StoreID: "memstore_missing", Op: store.MemoryOpCreate,
		Path: &np, Content: &c1, NewMemoryID: "mem_x", NewVersionID: "memver_x", At: base, Actor: apiActor})
	mustIs(t, err, store.ErrNotFound, "write to an unknown store")
}

// testMemoryPutRace: concurrent puts of one new path all land, one as the create and the others as updates. Each
// round's writers start together, on a store whose connections are already open, so that they do race.
func testMemoryPutRace(t *testing.T, h Harness) {
	s := h.open(t)
	w := newMemWriter(t, s)
	const n, rounds = 8, 4
	openConnections(s, w.storeID, n)
	var wg sync.WaitGroup
	for round := range rounds {
		path := fmt.Sprintf("/race/%d.md", round)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				content := fmt.Sprintf("writer %d", i)
				<-start
				_, errs[i] = s.MemoryWrite(ctxBg, &store.MemoryWriteParams{StoreID: w.storeID, Op: store.MemoryOpPut,
					Path: &path, Content: &content, Actor: sessionActor, At: base.Add(time.Duration(i) * time.Millisecond),
					NewMemoryID: apitype.NewID(apitype.PrefixMemory), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)})
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			must(t, err, fmt.Sprintf("round %d: put %d", round, i))
		}
	}
	items, err := s.MemoryList(ctxBg, &store.MemoryListParams{StoreID: w.storeID, Limit: 10, Content: true})
	must(t, err, "list")
	equal(t, len(items), rounds, "one memory per path")
	for _, it := range items {
		m := it.Memory
		vs := w.versions(t, store.MemoryVersionListParams{MemoryID: m.ID, Content: true})
		equal(t, len(vs), n, m.Path+": versions")
		contents := map[string]bool{}
		created := 0
		for _, v := range vs {
			contents[*v.Content] = true
			if v.Operation == apitype.MemoryCreated {
				created++
			}
		}
		equal(t, created, 1, m.Path+": created versions")
		equal(t, len(contents), n, m.Path+": every writer's content has its version")
		cur, err := s.MemoryVersionGet(ctxBg, w.storeID, m.MemoryVersionID)
		must(t, err, "get the current version")
		equal(t, *cur.Content, *m.Content, m.Path+": the memory's content is its current version's")
		_, err = s.MemoryVersionRedact(ctxBg, &store.MemoryRedactParams{StoreID: w.storeID, ID: cur.ID, Actor: apiActor, At: base})
		mustIs(t, err, store.ErrMemoryVersionCurrent, m.Path+": the last write is current")
	}
	equal(t, len(w.versions(t, store.MemoryVersionListParams{})), n*rounds, "versions in all")
}

// testMemoryRenameRace: memories renamed concurrently onto one free path: one rename wins, every other is
// refused with ErrMemoryPathTaken, and no memory is lost (each loser keeps its path, content and version).
func testMemoryRenameRace(t *testing.T, h Harness) {
	s := h.open(t)
	w := newMemWriter(t, s)
	const n, rounds = 8, 3
	openConnections(s, w.storeID, n)
	var wg sync.WaitGroup
	for round := range rounds {
		mems := make([]*apitype.Memory, n)
		for i := range n {
			mems[i] = w.create(t, fmt.Sprintf("/r%d/m%d.md", round, i), fmt.Sprintf("memory %d", i))
		}
		target := fmt.Sprintf("/r%d/target.md", round)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = s.MemoryWrite(ctxBg, &store.MemoryWriteParams{StoreID: w.storeID, Op: store.MemoryOpUpdate,
					ID: mems[i].ID, Path: &target, Actor: sessionActor, At: base.Add(time.Hour),
					NewVersionID: apitype.NewID(apitype.PrefixMemVersion)})
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("round %d: renames %d and %d both won %s", round, won, i, target)
			default:
				mustIs(t, err, store.ErrMemoryPathTaken, fmt.Sprintf("round %d: losing rename %d", round, i))
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no rename won", round)
		}
		items, err := s.MemoryList(ctxBg, &store.MemoryListParams{StoreID: w.storeID, Prefix: fmt.Sprintf("/r%d/", round),
			Limit: 100, Content: true})
		must(t, err, "list")
		equal(t, len(items), n, fmt.Sprintf("round %d: memories after the race", round))
		for i, m := range mems {
			got, err := s.MemoryGet(ctxBg, w.storeID, m.ID)
			must(t, err, "get a raced memory")
			want := m.Path
			if i == won {
				want = target
			}
			equal(t, got.Path, want, fmt.Sprintf("round %d: memory %d's path", round, i))
			equal(t, *got.Content, fmt.Sprintf("memory %d", i), fmt.Sprintf("round %d: memory %d's content", round, i))
		}
	}
}

// memoryListPaths are in byte order: '-' < '.' < '/' < 'B' < 'b' < 0xC3 (é).
var memoryListPaths = []string{"/a-b.md", "/a.md", "/a/b.md", "/a/c/d.md", "/a/c/e.md", "/aB.md", "/b/x/y/z.md", "/é.md"}

// itemPaths is the items' paths, prefixes marked with a trailing "/".
func itemPaths(items []store.MemoryItem) string {
	out := make([]string, len(items))
	for i, it := range items {
		if it.Memory != nil {
			out[i] = it.Memory.Path
		} else {
			out[i] = it.Prefix
		}
	}
	return strings.Join(out, " ")
}

func testMemoryList(t *testing.T, h Harness) {
	s := h.open(t)
	w := newMemWriter(t, s)
	// Created out of order: the list's order is the paths'.
	for _, i := range []int{7, 3, 0, 5, 1, 6, 2, 4} {
		w.create(t, memoryListPaths[i], "content of "+memoryListPaths[i])
	}
	list := func(p store.MemoryListParams) []store.MemoryItem {
		t.Helper()
		p.StoreID = w.storeID
		items, err := s.MemoryList(ctxBg, &p)
		must(t, err, "list memories")
		return items
	}
	all := list(store.MemoryListParams{Limit: 100})
	equal(t, itemPaths(all), strings.Join(memoryListPaths, " "), "full listing in byte order")
	equal(t, itemPaths(list(store.MemoryListParams{Prefix: "/", Limit: 100})), strings.Join(memoryListPaths, " "), `prefix "/"`)
	for _, it := range all {
		equal(t, it.Memory.Content == nil, true, "no content in the basic view")
		equal(t, it.Memory.ContentSHA256, apitype.ContentSHA256("content of "+it.Memory.Path), "sha256 in the basic view")
	}
	for _, it := range list(store.MemoryListParams{Limit: 100, Content: true}) {
		equal(t, *it.Memory.Content, "content of "+it.Memory.Path, "content in the full view")
	}

	cases := []struct {
		prefix string
		depth  int
		want   string
	}{
		{"/", 1, "/a-b.md /a.md /a/ /aB.md /b/ /é.md"},
		{"/", 2, "/a-b.md /a.md /a/b.md /a/c/ /aB.md /b/x/ /é.md"},
		{"/a/", 1, "/a/b.md /a/c/"},
		{"/a/", 0, "/a/b.md /a/c/d.md /a/c/e.md"},
		{"/a/c/", 1, "/a/c/d.md /a/c/e.md"},
		{"/b/", 1, "/b/x/"},
		{"/c/", 1, ""},
	}
	for _, c := range cases {
		full := list(store.MemoryListParams{Prefix: c.prefix, Depth: c.depth, Limit: 100})
		equal(t, itemPaths(full), c.want, fmt.Sprintf("prefix %q depth %d", c.prefix, c.depth))
		for limit := 1; limit <= 5; limit++ {
			var got []store.MemoryItem
			after := ""
			for page := 0; ; page++ {
				if page > len(memoryListPaths)+1 {
					t.Fatalf("prefix %q depth %d limit %d: the pages do not end", c.prefix, c.depth, limit)
				}
				items := list(store.MemoryListParams{Prefix: c.prefix, Depth: c.depth, Limit: limit, After: after})
				if len(items) > limit {
					t.Fatalf("prefix %q depth %d limit %d: a page of %d items", c.prefix, c.depth, limit, len(items))
				}
				got = append(got, items...)
				if len(items) < limit {
					break
				}
				last := items[len(items)-1]
				if after = last.Prefix; last.Memory != nil {
					after = last.Memory.Path
				}
			}
			equal(t, itemPaths(got), c.want, fmt.Sprintf("prefix %q depth %d paged by %d", c.prefix, c.depth, limit))
		}
	}
	_, err := s.MemoryList(ctxBg, &store.MemoryListParams{StoreID: "memstore_missing", Limit: 10})
	mustIs(t, err, store.ErrNotFound, "list an unknown store")
}

// testMemoryListLiteral: a prefix's '%' and '_' are characters, not patterns.
func testMemoryListLiteral(t *testing.T, h Harness) {
	s := h.open(t)
	w := newMemWriter(t, s)
	for _, p := range []string{"/a_/x.md", "/ab/y.md", "/a%/z.md", "/a%b/w.md"} {
		w.create(t, p, p)
	}
	for prefix, want := range map[string]string{"/a_/": "/a_/x.md", "/a%/": "/a%/z.md"} {
		items, err := s.MemoryList(ctxBg, &store.MemoryListParams{StoreID: w.storeID, Prefix: prefix, Limit: 10})
		must(t, err, "list")
		equal(t, itemPaths(items), want, "prefix "+prefix)
	}
}

func testMemoryVersions(t *testing.T, h Harness) {
	s := h.open(t)
	w := newMemWriter(t, s)
	x, y := "/x.md", "/y.md"
	c := func(s string) *string { return &s }
	v1 := w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpCreate, Path: &x, Content: c("x1")}, "v1").Version
	xID := v1.MemoryID
	v2 := w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: xID, Content: c("x2"), Actor: sessionActor}, "v2").Version
	v3 := w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpCreate, Path: &y, Content: c("y1"), Actor: sessionActor}, "v3").Version
	v4 := w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpDelete, ID: xID}, "v4").Version
	v5 := w.mustWrite(t, store.MemoryWriteParams{Op: store.MemoryOpUpdate, ID: v3.MemoryID, Content: c("y2")}, "v5").Version
	vids := func(vs ...*apitype.MemoryVersion) string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = v.ID
		}
		return strings.Join(out, ",")
	}
	list := func(p store.MemoryVersionListParams) string { return ids(w.versions(t, p), memoryVersionID) }

	equal(t, list(store.MemoryVersionListParams{}), vids(v5, v4, v3, v2, v1), "newest first")
	equal(t, list(store.MemoryVersionListParams{MemoryID: xID}), vids(v4, v2, v1), "by memory_id")
	equal(t, list(store.MemoryVersionListParams{SessionID: sessionActor.SessionID}), vids(v3, v2), "by session_id")
	equal(t, list(store.MemoryVersionListParams{APIKeyID: apiActor.APIKeyID}), vids(v5, v4, v1), "by api_key_id")
	equal(t, list(store.MemoryVersionListParams{APIKeyID: "apikey_other"}), "", "by another api key")
	equal(t, list(store.MemoryVersionListParams{ServiceAccountID: "svac_x"}), "", "by service account")
	equal(t, list(store.MemoryVersionListParams{Operation: apitype.MemoryCreated}), vids(v3, v1), "by operation")
	equal(t, list(store.MemoryVersionListParams{Operation: apitype.MemoryDeleted}), vids(v4), "deletions")
	from, to := v2.CreatedAt, v4.CreatedAt
	equal(t, list(store.MemoryVersionListParams{CreatedFrom: &from, CreatedTo: &to}), vids(v4, v3, v2), "created_at from and to")
	equal(t, list(store.MemoryVersionListParams{CreatedFrom: &from, MemoryID: xID, Operation: apitype.MemoryModified}),
		vids(v2), "filters combine")

	var paged []string
	var after *store.Cursor
	for range 4 {
		page := w.versions(t, store.MemoryVersionListParams{Limit: 2, After: after})
		if len(page) == 0 {
			break
		}
		paged = append(paged, ids(page, memoryVersionID))
		last := page[len(page)-1]
		after = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	equal(t, strings.Join(paged, "|"), vids(v5, v4)+"|"+vids(v3, v2)+"|"+vids(v1), "pages of 2")

	for _, v := range w.versions(t, store.MemoryVersionListParams{}) {
		equal(t, v.Content == nil, true, "no content in the basic view")
		equal(t, v.Path != nil, true, "path in the basic view")
	}
	full := w.versions(t, store.MemoryVersionListParams{Content: true})
	contents := []string{}
	for _, v := range full {
		if v.Content == nil {
			contents = append(contents, "-")
			continue
		}
		contents = append(contents, *v.Content)
	}
	equal(t, strings.Join(contents, ","), "y2,-,y1,x2,x1", "content in the full view")
	equal(t, *full[1].CreatedBy, apiActor, "created_by")
	equal(t, *full[2].CreatedBy, sessionActor, "created_by of a session")

	_, err := s.MemoryVersionList(ctxBg, &store.MemoryVersionListParams{StoreID: "memstore_missing", Limit: 10})
	mustIs(t, err, store.ErrNotFound, "versions of an unknown store")
	_, err = s.MemoryVersionGet(ctxBg, w.storeID, "memver_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown version")

	// Redaction.
	redact := func(id string, at time.Time) (*apitype.MemoryVersion, error) {
		return s.MemoryVersionRedact(ctxBg, &store.MemoryRedactParams{StoreID: w.storeID, ID: id, Actor: sessionActor, At: at})
	}
	_, err = redact(v5.ID, base.Add(time.Hour))
	mustIs(t, err, store.ErrMemoryVersionCurrent, "redact the current version")
	mustIs(t, err, store.ErrConflict, "redacting the current version is a conflict")
	at := base.Add(time.Hour)
	r, err := redact(v3.ID, at)
	must(t, err, "redact an older version")
	checkRedacted := func(r *apitype.MemoryVersion, what string) {
		t.Helper()
		equal(t, r.Path == nil && r.Content == nil && r.ContentSHA256 == nil && r.ContentSizeBytes == nil, true, what+": fields cleared")
		equal(t, r.RedactedAt != nil && r.RedactedAt.Equal(at), true, what+": redacted_at")
		equal(t, r.RedactedBy != nil && *r.RedactedBy == sessionActor, true, what+": redacted_by")
		equal(t, *r.CreatedBy, sessionActor, what+": created_by kept")
		equal(t, r.Operation, apitype.MemoryCreated, what+": operation kept")
	}
	checkRedacted(r, "redact")
	stored, err := s.MemoryVersionGet(ctxBg, w.storeID, v3.ID)
	must(t, err, "get redacted")
	checkRedacted(stored, "stored redaction")
	again, err := redact(v3.ID, at.Add(time.Hour))
	must(t, err, "redact again")
	checkRedacted(again, "redact again keeps the first")
	got, err := s.MemoryGet(ctxBg, w.storeID, v3.MemoryID)
	must(t, err, "get the memory of a redacted version")
	equal(t, *got.Content, "y2", "a redaction leaves the memory")
	// A deleted memory's versions, its deletion included, are redactable.
	for _, v := range []*apitype.MemoryVersion{v2, v4} {
		r, err := redact(v.ID, at)
		must(t, err, "redact a deleted memory's version")
		equal(t, r.Path == nil && r.Content == nil && r.RedactedAt != nil, true, "redacted")
	}
	redacted := []string{}
	for _, v := range w.versions(t, store.MemoryVersionListParams{Content: true}) {
		if v.RedactedAt != nil {
			redacted = append(redacted, v.ID)
		}
	}
	equal(t, strings.Join(redacted, ","), vids(v4, v3, v2), "redacted versions")
	_, err = redact("memver_missing", at)
	mustIs(t, err, store.ErrNotFound, "redact unknown version")
	_, err = s.MemoryVersionRedact(ctxBg, &store.MemoryRedactParams{StoreID: "memstore_missing", ID: v1.ID, Actor: apiActor, At: at})
	mustIs(t, err, store.ErrNotFound, "redact in an unknown store")
}

// openConnections has n readers of the store at once, so that the adapter's connections are open before a race:
// the racers then start together instead of queueing for connections.
func openConnections(s store.Store, storeID string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.MemoryList(ctxBg, &store.MemoryListParams{StoreID: storeID, Limit: 1})
		}()
	}
	wg.Wait()
}
