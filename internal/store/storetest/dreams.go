package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func newDream(created time.Time, behavior apitype.DreamOutputBehavior) *apitype.Dream {
	return &apitype.Dream{Type: apitype.ObjectDream, ID: apitype.NewID(apitype.PrefixDream), Status: apitype.DreamPending,
		Inputs: []apitype.DreamInput{
			{Type: apitype.DreamInputMemoryStore, MemoryStoreID: "memstore_in"},
			{Type: apitype.DreamInputSessions, SessionIDs: []string{"sesn_a", "sesn_b"}},
		},
		Model: apitype.DreamModel{ID: "claude-test"}, OutputBehavior: behavior, Outputs: []apitype.DreamOutput{},
		CreatedAt: created}
}

func dreamID(d *apitype.Dream) string { return d.ID }

var createNew = apitype.DreamOutputBehavior{Type: apitype.DreamCreateNew}

// testDream: create, get, the Update rule (a terminal status stays), and the one-dream-per-updated-store rule.
func testDream(t *testing.T, h Harness) {
	s := h.open(t)
	d := newDream(base, createNew)
	must(t, s.DreamCreate(ctxBg, d), "create dream")
	mustIs(t, s.DreamCreate(ctxBg, d), store.ErrConflict, "create dream twice")
	got, err := s.DreamGet(ctxBg, d.ID)
	must(t, err, "get dream")
	equal(t, got.Status, apitype.DreamPending, "status")
	equal(t, got.SessionInputs()[1], "sesn_b", "inputs")
	equal(t, got.MemoryStoreInput(), "memstore_in", "memory store input")
	sameTime(t, got.CreatedAt, base, "created_at")
	_, err = s.DreamGet(ctxBg, "drm_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown dream")

	sesn := "sesn_dream"
	upd, err := s.DreamUpdate(ctxBg, d.ID, func(d *apitype.Dream) error {
		d.Status, d.SessionID = apitype.DreamRunning, &sesn
		d.Outputs = []apitype.DreamOutput{{Type: "memory_store", MemoryStoreID: "memstore_out"}}
		d.Inputs = nil // the store keeps the inputs
		return nil
	})
	must(t, err, "update dream")
	equal(t, upd.Status, apitype.DreamRunning, "running")
	equal(t, len(upd.Inputs), 2, "inputs kept")
	boom := errors.New("boom")
	_, err = s.DreamUpdate(ctxBg, d.ID, func(d *apitype.Dream) error { d.Status = apitype.DreamFailed; return boom })
	mustIs(t, err, boom, "update whose fn fails")
	_, err = s.DreamUpdate(ctxBg, "drm_missing", func(*apitype.Dream) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update unknown dream")

	ended := base.Add(time.Minute)
	_, err = s.DreamUpdate(ctxBg, d.ID, func(d *apitype.Dream) error {
		d.Status, d.EndedAt = apitype.DreamCanceled, &ended
		return nil
	})
	must(t, err, "cancel dream")
	// A terminal status stays; usage may still change.
	upd, err = s.DreamUpdate(ctxBg, d.ID, func(d *apitype.Dream) error {
		d.Status, d.EndedAt = apitype.DreamCompleted, nil
		d.Usage.InputTokens = 7
		return nil
	})
	must(t, err, "update canceled dream")
	equal(t, upd.Status, apitype.DreamCanceled, "a terminal status stays")
	equal(t, upd.EndedAt != nil, true, "ended_at stays")
	got, err = s.DreamGet(ctxBg, d.ID)
	must(t, err, "get canceled dream")
	equal(t, got.Status, apitype.DreamCanceled, "stored status")
	equal(t, got.Usage.InputTokens, int64(7), "usage still changes")
	equal(t, *got.SessionID, sesn, "session id")
	equal(t, got.Outputs[0].MemoryStoreID, "memstore_out", "outputs")
	fresh := newDream(base, createNew)
	must(t, s.DreamCreate(ctxBg, fresh), "create another dream")
	_, err = s.DreamUpdate(ctxBg, fresh.ID, func(d *apitype.Dream) error { d.Status = "dreaming"; return nil })
	if err == nil {
		t.Fatal("an unknown status was stored")
	}
}

// testDreamTarget: at most one dream that has not ended updates a memory store; an ended one frees it.
func testDreamTarget(t *testing.T, h Harness) {
	s := h.open(t)
	upd := apitype.DreamOutputBehavior{Type: apitype.DreamUpdateExisting, MemoryStoreID: "memstore_in"}
	a := newDream(base, upd)
	must(t, s.DreamCreate(ctxBg, a), "create updating dream")
	mustIs(t, s.DreamCreate(ctxBg, newDream(base, upd)), store.ErrConflict, "a second dream updating the store")
	must(t, s.DreamCreate(ctxBg, newDream(base, createNew)), "a dream creating a store beside it")
	other := newDream(base, apitype.DreamOutputBehavior{Type: apitype.DreamUpdateExisting, MemoryStoreID: "memstore_other"})
	must(t, s.DreamCreate(ctxBg, other), "a dream updating another store")
	_, err := s.DreamUpdate(ctxBg, a.ID, func(d *apitype.Dream) error { d.Status = apitype.DreamRunning; return nil })
	must(t, err, "run dream")
	mustIs(t, s.DreamCreate(ctxBg, newDream(base, upd)), store.ErrConflict, "while the first runs")
	ended := base.Add(time.Minute)
	_, err = s.DreamUpdate(ctxBg, a.ID, func(d *apitype.Dream) error {
		d.Status, d.EndedAt = apitype.DreamFailed, &ended
		d.Error = &apitype.DreamError{Type: apitype.DreamErrTimeout, Message: "too long"}
		return nil
	})
	must(t, err, "fail dream")
	must(t, s.DreamCreate(ctxBg, newDream(base, upd)), "a dream updating the store once the first ended")
}

// testDreamList: newest first, paging, statuses, created_at filters, archived ones, and the active list.
func testDreamList(t *testing.T, h Harness) {
	s := h.open(t)
	var all []*apitype.Dream
	for i := range 5 {
		d := newDream(base.Add(time.Duration(i)*time.Second), createNew)
		must(t, s.DreamCreate(ctxBg, d), "create dream")
		all = append(all, d)
	}
	set := func(d *apitype.Dream, st apitype.DreamStatus, archive bool) {
		t.Helper()
		_, err := s.DreamUpdate(ctxBg, d.ID, func(d *apitype.Dream) error {
			d.Status = st
			if st.Terminal() {
				at := base.Add(time.Hour)
				d.EndedAt = &at
			}
			if archive {
				at := base.Add(2 * time.Hour)
				d.ArchivedAt = &at
			}
			return nil
		})
		must(t, err, "update dream")
	}
	set(all[1], apitype.DreamRunning, false)
	set(all[2], apitype.DreamCompleted, false)
	set(all[3], apitype.DreamFailed, true)

	list := func(p *store.DreamListParams) string {
		t.Helper()
		got, err := s.DreamList(ctxBg, p)
		must(t, err, "list dreams")
		return ids(got, dreamID)
	}
	join := func(ds ...*apitype.Dream) string { return ids(ds, func(d **apitype.Dream) string { return (*d).ID }) }
	equal(t, list(&store.DreamListParams{ListParams: store.ListParams{Desc: true}}),
		join(all[4], all[2], all[1], all[0]), "newest first, archived left out")
	equal(t, list(&store.DreamListParams{ListParams: store.ListParams{Desc: true, IncludeArchived: true}}),
		join(all[4], all[3], all[2], all[1], all[0]), "with archived")
	equal(t, list(&store.DreamListParams{ListParams: store.ListParams{Desc: true, Limit: 2,
		After: &store.Cursor{CreatedAt: all[2].CreatedAt, ID: all[2].ID}}}), join(all[1], all[0]), "a page")
	equal(t, list(&store.DreamListParams{ListParams: store.ListParams{Desc: true, IncludeArchived: true},
		Statuses: []apitype.DreamStatus{apitype.DreamFailed, apitype.DreamCompleted}}), join(all[3], all[2]), "statuses")
	gt, lt := all[0].CreatedAt, all[3].CreatedAt
	equal(t, list(&store.DreamListParams{ListParams: store.ListParams{Desc: true, CreatedAfter: &gt, CreatedBefore: &lt}}),
		join(all[2], all[1]), "created_at gt and lt")

	active, err := s.DreamListActive(ctxBg, 0)
	must(t, err, "list active dreams")
	equal(t, ids(active, dreamID), join(all[0], all[1], all[4]), "active: pending and running, oldest first")
	set(all[0], apitype.DreamRunning, true)
	active, err = s.DreamListActive(ctxBg, 2)
	must(t, err, "list active dreams")
	equal(t, ids(active, dreamID), join(all[0], all[1]), "active: archived too, limited")
}
