package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func testAgentCreateGet(t *testing.T, h Harness) {
	s := h.open(t)
	a := newAgent(base)
	must(t, s.AgentCreate(ctxBg, a), "create agent")
	mustIs(t, s.AgentCreate(ctxBg, newAgentWithID(a.ID)), store.ErrConflict, "create duplicate agent")

	for _, v := range []int{0, 1} {
		got, err := s.AgentGet(ctxBg, &store.AgentGetParams{ID: a.ID, Version: v})
		must(t, err, "get agent")
		equal(t, got.ID, a.ID, "id")
		equal(t, got.Version, 1, "version")
		equal(t, got.Name, a.Name, "name")
		equal(t, got.System, a.System, "system")
		equal(t, got.Model.ID, a.Model.ID, "model")
		equal(t, len(got.Tools), 1, "tools")
		equal(t, got.Metadata["team"], "a", "metadata")
		sameTime(t, got.CreatedAt, a.CreatedAt, "created_at")
		if got.ArchivedAt != nil {
			t.Fatalf("archived_at = %v, want nil", got.ArchivedAt)
		}
	}
	_, err := s.AgentGet(ctxBg, &store.AgentGetParams{ID: a.ID, Version: 2})
	mustIs(t, err, store.ErrNotFound, "get missing version")
	_, err = s.AgentGet(ctxBg, &store.AgentGetParams{ID: "agent_missing"})
	mustIs(t, err, store.ErrNotFound, "get unknown agent")
}

func newAgentWithID(id string) *apitype.Agent {
	a := newAgent(base)
	a.ID = id
	return a
}

func testAgentPutVersion(t *testing.T, h Harness) {
	s := h.open(t)
	a := newAgent(base)
	must(t, s.AgentCreate(ctxBg, a), "create agent")
	for v := 2; v <= 4; v++ {
		next := *a
		next.Version = v
		next.Name = "name-" + string(rune('0'+v))
		next.UpdatedAt = base.Add(time.Duration(v) * time.Minute)
		must(t, s.AgentPutVersion(ctxBg, &next), "put version")
	}
	latest, err := s.AgentGet(ctxBg, &store.AgentGetParams{ID: a.ID})
	must(t, err, "get latest")
	equal(t, latest.Version, 4, "latest version")
	equal(t, latest.Name, "name-4", "latest name")
	sameTime(t, latest.CreatedAt, base, "created_at kept")
	v2, err := s.AgentGet(ctxBg, &store.AgentGetParams{ID: a.ID, Version: 2})
	must(t, err, "get v2")
	equal(t, v2.Name, "name-2", "v2 name")
	v1, err := s.AgentGet(ctxBg, &store.AgentGetParams{ID: a.ID, Version: 1})
	must(t, err, "get v1")
	equal(t, v1.Name, "agent", "v1 name")

	stale := *a
	stale.Version = 4
	mustIs(t, s.AgentPutVersion(ctxBg, &stale), store.ErrConflict, "put stale version")
	stale.Version = 6
	mustIs(t, s.AgentPutVersion(ctxBg, &stale), store.ErrConflict, "put version with a gap")
	unknown := newAgent(base)
	unknown.Version = 2
	mustIs(t, s.AgentPutVersion(ctxBg, unknown), store.ErrNotFound, "put version of unknown agent")

	versions, err := s.AgentVersionList(ctxBg, &store.AgentVersionListParams{ID: a.ID, Limit: 10})
	must(t, err, "list versions")
	equal(t, versionsOf(versions), "4,3,2,1", "versions, newest first")
	versions, err = s.AgentVersionList(ctxBg, &store.AgentVersionListParams{ID: a.ID, Limit: 2, BeforeVersion: 4})
	must(t, err, "list versions page")
	equal(t, versionsOf(versions), "3,2", "versions before 4, limit 2")
	versions, err = s.AgentVersionList(ctxBg, &store.AgentVersionListParams{ID: a.ID, Limit: 2, BeforeVersion: 2})
	must(t, err, "list last page")
	equal(t, versionsOf(versions), "1", "versions before 2")
	_, err = s.AgentVersionList(ctxBg, &store.AgentVersionListParams{ID: "agent_missing", Limit: 10})
	mustIs(t, err, store.ErrNotFound, "list versions of unknown agent")
}

func versionsOf(as []apitype.Agent) string {
	var out []byte
	for i, a := range as {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, []byte(strconv.Itoa(a.Version))...)
	}
	return string(out)
}

func testAgentPutVersionRace(t *testing.T, h Harness) {
	s := h.open(t)
	a := newAgent(base)
	must(t, s.AgentCreate(ctxBg, a), "create agent")
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			next := *a
			next.Version = 2
			next.Name = "writer-" + strconv.Itoa(i)
			errs[i] = s.AgentPutVersion(ctxBg, &next)
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both put version 2", winner, i)
			}
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("writer %d: got %v, want nil or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer put version 2")
	}
	got, err := s.AgentGet(ctxBg, &store.AgentGetParams{ID: a.ID})
	must(t, err, "get agent")
	equal(t, got.Version, 2, "version")
	equal(t, got.Name, "writer-"+strconv.Itoa(winner), "the winner's version is stored")
}

func testAgentArchive(t *testing.T, h Harness) {
	s := h.open(t)
	a := newAgent(base)
	must(t, s.AgentCreate(ctxBg, a), "create agent")
	other := newAgent(base.Add(time.Second))
	must(t, s.AgentCreate(ctxBg, other), "create other agent")
	next := *a
	next.Version = 2
	must(t, s.AgentPutVersion(ctxBg, &next), "put version")

	at := base.Add(time.Hour)
	got, err := s.AgentArchive(ctxBg, a.ID, at)
	must(t, err, "archive")
	equal(t, got.Version, 2, "archive returns the latest version")
	if got.ArchivedAt == nil || !got.ArchivedAt.Equal(at) {
		t.Fatalf("archived_at = %v, want %v", got.ArchivedAt, at)
	}
	got, err = s.AgentArchive(ctxBg, a.ID, at.Add(time.Hour))
	must(t, err, "archive again")
	if got.ArchivedAt == nil || !got.ArchivedAt.Equal(at) {
		t.Fatalf("archive is not idempotent: archived_at = %v, want %v", got.ArchivedAt, at)
	}
	got, err = s.AgentGet(ctxBg, &store.AgentGetParams{ID: a.ID, Version: 1})
	must(t, err, "get archived v1")
	if got.ArchivedAt == nil || !got.ArchivedAt.Equal(at) {
		t.Fatalf("get v1: archived_at = %v, want the agent's %v", got.ArchivedAt, at)
	}
	_, err = s.AgentArchive(ctxBg, "agent_missing", at)
	mustIs(t, err, store.ErrNotFound, "archive unknown agent")

	list, err := s.AgentList(ctxBg, &store.ListParams{Limit: 10})
	must(t, err, "list")
	equal(t, agentIDs(list), other.ID, "list excludes archived")
	list, err = s.AgentList(ctxBg, &store.ListParams{Limit: 10, IncludeArchived: true})
	must(t, err, "list with archived")
	equal(t, agentIDs(list), a.ID+","+other.ID, "list includes archived")
}

func agentIDs(as []apitype.Agent) string {
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return strings.Join(ids, ",")
}

func testAgentList(t *testing.T, h Harness) {
	s := h.open(t)
	var ids []string
	for i := range 5 {
		a := newAgent(base.Add(time.Duration(i) * time.Second))
		must(t, s.AgentCreate(ctxBg, a), "create agent")
		ids = append(ids, a.ID)
	}
	next := newAgentWithID(ids[1])
	next.Version = 2
	next.Name = "second, v2"
	next.CreatedAt = base.Add(time.Second)
	must(t, s.AgentPutVersion(ctxBg, next), "put version")

	list, err := s.AgentList(ctxBg, &store.ListParams{Limit: 10})
	must(t, err, "list")
	equal(t, agentIDs(list), strings.Join(ids, ","), "ascending")
	equal(t, list[1].Version, 2, "list shows the latest version")
	equal(t, list[1].Name, "second, v2", "latest version's name")

	// Paging with a cursor, both directions.
	for _, desc := range []bool{false, true} {
		want := slices.Clone(ids)
		if desc {
			slices.Reverse(want)
		}
		var got []string
		p := &store.ListParams{Limit: 2, Desc: desc}
		for range 10 {
			page, err := s.AgentList(ctxBg, p)
			must(t, err, "list page")
			if len(page) > 2 {
				t.Fatalf("page of %d items, limit 2", len(page))
			}
			if len(page) == 0 {
				break
			}
			for _, a := range page {
				got = append(got, a.ID)
			}
			last := page[len(page)-1]
			p.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		equal(t, strings.Join(got, ","), strings.Join(want, ","), "paged list (desc="+boolStr(desc)+")")
	}

	t1, t3 := base.Add(time.Second), base.Add(3*time.Second)
	for _, tc := range []struct {
		name string
		p    store.ListParams
		want []string
	}{
		{"created_after", store.ListParams{CreatedAfter: &t1}, ids[2:]},
		{"created_from", store.ListParams{CreatedFrom: &t1}, ids[1:]},
		{"created_before", store.ListParams{CreatedBefore: &t3}, ids[:3]},
		{"created_to", store.ListParams{CreatedTo: &t3}, ids[:4]},
		{"range", store.ListParams{CreatedFrom: &t1, CreatedBefore: &t3}, ids[1:3]},
		{"desc limit", store.ListParams{Desc: true, Limit: 2}, []string{ids[4], ids[3]}},
	} {
		p := tc.p
		if p.Limit == 0 {
			p.Limit = 10
		}
		list, err := s.AgentList(ctxBg, &p)
		must(t, err, tc.name)
		equal(t, agentIDs(list), strings.Join(tc.want, ","), tc.name)
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func testEnvironment(t *testing.T, h Harness) {
	s := h.open(t)
	e := newEnvironment(base)
	must(t, s.EnvironmentCreate(ctxBg, e), "create environment")
	dup := newEnvironment(base)
	dup.ID = e.ID
	mustIs(t, s.EnvironmentCreate(ctxBg, dup), store.ErrConflict, "create duplicate environment")

	got, err := s.EnvironmentGet(ctxBg, e.ID)
	must(t, err, "get environment")
	equal(t, got.Name, "env", "name")
	equal(t, got.Config.Type, apitype.EnvironmentCloud, "config type")
	equal(t, got.Config.Networking.Type, apitype.NetworkingUnrestricted, "networking")
	sameTime(t, got.CreatedAt, base, "created_at")

	updated, err := s.EnvironmentUpdate(ctxBg, e.ID, func(e *apitype.Environment) error {
		e.Name = "renamed"
		e.Metadata = map[string]string{"x": "y"}
		return nil
	})
	must(t, err, "update environment")
	equal(t, updated.Name, "renamed", "updated name")
	got, err = s.EnvironmentGet(ctxBg, e.ID)
	must(t, err, "get updated environment")
	equal(t, got.Name, "renamed", "stored name")
	equal(t, got.Metadata["x"], "y", "stored metadata")

	errFn := errors.New("refused")
	_, err = s.EnvironmentUpdate(ctxBg, e.ID, func(e *apitype.Environment) error {
		e.Name = "not stored"
		return errFn
	})
	mustIs(t, err, errFn, "update fn error is returned")
	got, err = s.EnvironmentGet(ctxBg, e.ID)
	must(t, err, "get environment")
	equal(t, got.Name, "renamed", "failed update stores nothing")

	_, err = s.EnvironmentGet(ctxBg, "env_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown environment")
	_, err = s.EnvironmentUpdate(ctxBg, "env_missing", func(*apitype.Environment) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update unknown environment")

	// The image status: set, replaced by one of the same image, refused over another image's.
	building := &apitype.EnvironmentImage{Status: apitype.ImageBuilding, ID: "img-a", UpdatedAt: base}
	must(t, s.EnvironmentImageSet(ctxBg, e.ID, building), "set image status")
	failed := &apitype.EnvironmentImage{Status: apitype.ImageFailed, ID: "img-a", UpdatedAt: base.Add(time.Second),
		Error: &apitype.ImageBuildError{Manager: "pip", Package: "nosuch==1.0", Message: "unknown package"}}
	must(t, s.EnvironmentImageSet(ctxBg, e.ID, failed), "set image status of the same image")
	mustIs(t, s.EnvironmentImageSet(ctxBg, e.ID, &apitype.EnvironmentImage{Status: apitype.ImageReady, ID: "img-old"}),
		store.ErrConflict, "set the status of another image")
	got, err = s.EnvironmentGet(ctxBg, e.ID)
	must(t, err, "get environment with image")
	if got.Image == nil || got.Image.Status != apitype.ImageFailed || got.Image.ID != "img-a" || got.Image.Error == nil ||
		got.Image.Error.Package != "nosuch==1.0" || got.Image.Error.Manager != "pip" || got.Image.Error.Message != "unknown package" {
		t.Errorf("stored image = %+v", got.Image)
	}
	sameTime(t, got.UpdatedAt, updated.UpdatedAt, "updated_at after image statuses")
	mustIs(t, s.EnvironmentImageSet(ctxBg, "env_missing", building), store.ErrNotFound, "image of unknown environment")

	must(t, s.EnvironmentDelete(ctxBg, e.ID), "delete environment")
	_, err = s.EnvironmentGet(ctxBg, e.ID)
	mustIs(t, err, store.ErrNotFound, "get deleted environment")
	mustIs(t, s.EnvironmentDelete(ctxBg, e.ID), store.ErrNotFound, "delete again")
}

// testEnvironmentNames: names are unique among the environments that are not archived, on create and on rename;
// archiving or deleting an environment frees its name.
func testEnvironmentNames(t *testing.T, h Harness) {
	s := h.open(t)
	prod := newEnvironment(base)
	prod.Name = "prod"
	must(t, s.EnvironmentCreate(ctxBg, prod), "create prod")
	again := newEnvironment(base)
	again.Name = "prod"
	mustIs(t, s.EnvironmentCreate(ctxBg, again), store.ErrConflict, "create a second prod")
	other := newEnvironment(base)
	other.Name = "staging"
	must(t, s.EnvironmentCreate(ctxBg, other), "create staging")
	_, err := s.EnvironmentUpdate(ctxBg, other.ID, func(e *apitype.Environment) error {
		e.Name = "prod"
		return nil
	})
	mustIs(t, err, store.ErrConflict, "rename staging to prod")
	got, err := s.EnvironmentGet(ctxBg, other.ID)
	must(t, err, "get staging")
	equal(t, got.Name, "staging", "a refused rename stores nothing")
	_, err = s.EnvironmentUpdate(ctxBg, other.ID, func(e *apitype.Environment) error {
		e.Metadata = map[string]string{"k": "v"}
		return nil
	})
	must(t, err, "update staging, keeping its name")

	at := base.Add(time.Hour)
	_, err = s.EnvironmentUpdate(ctxBg, prod.ID, func(e *apitype.Environment) error {
		e.ArchivedAt = &at
		return nil
	})
	must(t, err, "archive prod")
	must(t, s.EnvironmentCreate(ctxBg, again), "create prod once the first is archived")
	_, err = s.EnvironmentUpdate(ctxBg, prod.ID, func(e *apitype.Environment) error {
		e.Metadata = map[string]string{"k": "v"}
		return nil
	})
	must(t, err, "update the archived prod")

	must(t, s.EnvironmentDelete(ctxBg, again.ID), "delete the second prod")
	third := newEnvironment(base)
	third.Name = "prod"
	must(t, s.EnvironmentCreate(ctxBg, third), "create prod once the second is deleted")
}

func testEnvironmentList(t *testing.T, h Harness) {
	s := h.open(t)
	var ids []string
	for i := range 4 {
		e := newEnvironment(base.Add(time.Duration(i) * time.Second))
		e.Name = fmt.Sprintf("env-%d", i)
		must(t, s.EnvironmentCreate(ctxBg, e), "create environment")
		ids = append(ids, e.ID)
	}
	at := base.Add(time.Hour)
	_, err := s.EnvironmentUpdate(ctxBg, ids[2], func(e *apitype.Environment) error {
		e.ArchivedAt = &at
		return nil
	})
	must(t, err, "archive environment")

	envIDs := func(es []apitype.Environment) string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.ID
		}
		return strings.Join(out, ",")
	}
	list, err := s.EnvironmentList(ctxBg, &store.ListParams{Limit: 10})
	must(t, err, "list")
	equal(t, envIDs(list), strings.Join([]string{ids[0], ids[1], ids[3]}, ","), "list excludes archived")
	list, err = s.EnvironmentList(ctxBg, &store.ListParams{Limit: 10, IncludeArchived: true, Desc: true})
	must(t, err, "list desc")
	equal(t, envIDs(list), strings.Join([]string{ids[3], ids[2], ids[1], ids[0]}, ","), "list desc with archived")
	list, err = s.EnvironmentList(ctxBg, &store.ListParams{
		Limit: 1, After: &store.Cursor{CreatedAt: base, ID: ids[0]},
	})
	must(t, err, "list after cursor")
	equal(t, envIDs(list), ids[1], "list after cursor")
}

func testAPIKey(t *testing.T, h Harness) {
	s := h.open(t)
	k1 := &apitype.APIKey{ID: apitype.NewID(apitype.PrefixAPIKey), Name: "ci", Hash: "hash-1", Hint: "abcd",
		CreatedAt: base}
	k2 := &apitype.APIKey{ID: apitype.NewID(apitype.PrefixAPIKey), Name: "laptop", Hash: "hash-2", Hint: "efgh",
		CreatedAt: base.Add(time.Second)}
	must(t, s.APIKeyCreate(ctxBg, k1), "create key 1")
	must(t, s.APIKeyCreate(ctxBg, k2), "create key 2")
	dupID := *k1
	dupID.Hash = "hash-3"
	mustIs(t, s.APIKeyCreate(ctxBg, &dupID), store.ErrConflict, "create key with duplicate id")
	dupHash := *k1
	dupHash.ID = apitype.NewID(apitype.PrefixAPIKey)
	mustIs(t, s.APIKeyCreate(ctxBg, &dupHash), store.ErrConflict, "create key with duplicate hash")

	got, err := s.APIKeyByHash(ctxBg, "hash-2")
	must(t, err, "by hash")
	equal(t, got.ID, k2.ID, "id")
	equal(t, got.Name, "laptop", "name")
	equal(t, got.Hint, "efgh", "hint")
	equal(t, got.Hash, "hash-2", "hash")
	sameTime(t, got.CreatedAt, k2.CreatedAt, "created_at")
	_, err = s.APIKeyByHash(ctxBg, "hash-unknown")
	mustIs(t, err, store.ErrNotFound, "by unknown hash")

	at := base.Add(time.Hour)
	must(t, s.APIKeyRevoke(ctxBg, k1.ID, at), "revoke")
	_, err = s.APIKeyByHash(ctxBg, "hash-1")
	mustIs(t, err, store.ErrNotFound, "by hash of revoked key")
	mustIs(t, s.APIKeyRevoke(ctxBg, "apikey_missing", at), store.ErrNotFound, "revoke unknown key")

	keys, err := s.APIKeyList(ctxBg)
	must(t, err, "list")
	equal(t, len(keys), 2, "keys")
	equal(t, keys[0].ID, k1.ID, "first key")
	if keys[0].RevokedAt == nil || !keys[0].RevokedAt.Equal(at) {
		t.Fatalf("revoked_at = %v, want %v", keys[0].RevokedAt, at)
	}
	if keys[1].RevokedAt != nil {
		t.Fatalf("unrevoked key has revoked_at %v", keys[1].RevokedAt)
	}
}

func testClose(t *testing.T, h Harness) {
	s, err := h.Open(ctxBg, h.NewDSN(t))
	must(t, err, "open")
	sess := createSession(t, s)
	must(t, s.Close(), "close")
	must(t, s.Close(), "close again")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{
		userMessage("after close"),
	}})
	mustIs(t, err, store.ErrClosed, "append after close")
}

// testCloseDuringAppends closes the store while goroutines append: each append either succeeds, and is in the
// log when the database is opened again, or fails with ErrClosed.
func testCloseDuringAppends(t *testing.T, h Harness) {
	dsn := h.NewDSN(t)
	s, err := h.Open(ctxBg, dsn)
	must(t, err, "open")
	sess := createSession(t, s)

	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	started := make(chan struct{}, 8)
	for range 8 {
		wg.Go(func() {
			signalled := false
			defer func() {
				if !signalled { // failed early: do not keep the test waiting
					started <- struct{}{}
				}
			}()
			for i := 0; ; i++ {
				events, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID,
					Events: []apitype.NewEvent{agentMessage("x")}})
				if err != nil {
					if !errors.Is(err, store.ErrClosed) {
						errs <- err
					}
					return
				}
				mu.Lock()
				acked[events[0].ID] = true
				mu.Unlock()
				if i == 2 {
					signalled = true
					started <- struct{}{}
				}
			}
		})
	}
	for range 8 {
		<-started
	}
	must(t, s.Close(), "close during appends")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("append during close: got %v, want nil or ErrClosed", err)
	}

	s, err = h.Open(ctxBg, dsn)
	must(t, err, "reopen")
	defer func() { must(t, s.Close(), "close") }()
	events := allEvents(t, s, sess.ID)
	checkContiguous(t, events)
	stored := map[string]bool{}
	for _, e := range events {
		stored[e.ID] = true
	}
	for id := range acked {
		if !stored[id] {
			t.Fatalf("acknowledged event %s lost by Close", id)
		}
	}
}
