package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func workspaceID(w *apitype.Workspace) string { return w.ID }
func agentID(a *apitype.Agent) string         { return a.ID }

// testWorkspace: the default workspace is there from the start; a workspace is created, read, updated and
// archived (once, for good); lists leave archived ones out unless asked.
func testWorkspace(t *testing.T, h Harness) {
	s := h.open(t)
	def, err := s.WorkspaceGet(ctxBg, apitype.DefaultWorkspaceID)
	must(t, err, "get the default workspace")
	equal(t, def.Name, "Default Workspace", "default name")
	_, err = s.WorkspaceGet(ctxBg, "wrkspc_missing")
	mustIs(t, err, store.ErrNotFound, "get a missing workspace")

	a := store.NewWorkspace(apitype.NewID(apitype.PrefixWorkspace), "team a", base)
	a.Tags["cost"] = "1"
	b := store.NewWorkspace(apitype.NewID(apitype.PrefixWorkspace), "team b", base.Add(time.Second))
	must(t, s.WorkspaceCreate(ctxBg, a), "create a")
	must(t, s.WorkspaceCreate(ctxBg, b), "create b")
	mustIs(t, s.WorkspaceCreate(ctxBg, a), store.ErrConflict, "create a twice")
	got, err := s.WorkspaceGet(ctxBg, a.ID)
	must(t, err, "get a")
	equal(t, got.Name, "team a", "name")
	equal(t, got.Tags["cost"], "1", "tag")
	sameTime(t, got.CreatedAt, base, "created_at")

	at := base.Add(time.Hour)
	up, err := s.WorkspaceUpdate(ctxBg, a.ID, func(w *apitype.Workspace) error {
		w.Name, w.ArchivedAt, w.CreatedAt = "team a archived", &at, base.Add(time.Minute)
		return nil
	})
	must(t, err, "archive a")
	equal(t, up.Name, "team a archived", "renamed")
	sameTime(t, up.CreatedAt, base, "created_at kept")
	later := at.Add(time.Hour)
	up, err = s.WorkspaceUpdate(ctxBg, a.ID, func(w *apitype.Workspace) error { w.ArchivedAt = &later; return nil })
	must(t, err, "archive a again")
	sameTime(t, *up.ArchivedAt, at, "the first archival stays")
	up, err = s.WorkspaceUpdate(ctxBg, a.ID, func(w *apitype.Workspace) error { w.ArchivedAt = nil; return nil })
	must(t, err, "unarchive a")
	if up.ArchivedAt == nil {
		t.Fatal("an archived workspace was unarchived")
	}
	_, err = s.WorkspaceUpdate(ctxBg, "wrkspc_missing", func(*apitype.Workspace) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update a missing workspace")

	list := func(p *store.ListParams) string {
		t.Helper()
		ws, err := s.WorkspaceList(ctxBg, p)
		must(t, err, "list workspaces")
		var out []apitype.Workspace
		for _, w := range ws {
			if w.ID != apitype.DefaultWorkspaceID { // created when the store was opened: now, after base
				out = append(out, w)
			}
		}
		return ids(out, workspaceID)
	}
	equal(t, list(&store.ListParams{}), b.ID, "archived left out")
	equal(t, list(&store.ListParams{IncludeArchived: true}), a.ID+","+b.ID, "with archived")
	equal(t, list(&store.ListParams{IncludeArchived: true, Desc: true, Workspace: b.ID}), b.ID+","+a.ID,
		"newest first; Workspace does not filter workspaces")
}

// testWorkspaceOwners: a resource's owner is recorded once; one without an owner is in the default workspace;
// lists with Workspace list one workspace's resources, paging within it.
func testWorkspaceOwners(t *testing.T, h Harness) {
	s := h.open(t)
	wa, wb := apitype.NewID(apitype.PrefixWorkspace), apitype.NewID(apitype.PrefixWorkspace)
	ws, err := s.OwnerOf(ctxBg, "agent_unowned")
	must(t, err, "owner of an unowned id")
	equal(t, ws, apitype.DefaultWorkspaceID, "unowned is the default workspace's")

	var inA, inB, unowned []apitype.Agent
	for i := range 6 {
		a := newAgent(base.Add(time.Duration(i) * time.Second))
		switch i % 3 {
		case 0:
			must(t, s.Own(ctxBg, a.ID, wa), "own in a")
			inA = append(inA, *a)
		case 1:
			must(t, s.Own(ctxBg, a.ID, wb), "own in b")
			inB = append(inB, *a)
		default:
			unowned = append(unowned, *a)
		}
		must(t, s.AgentCreate(ctxBg, a), "create agent")
	}
	mustIs(t, s.Own(ctxBg, inA[0].ID, wb), store.ErrConflict, "own an owned id again")
	ws, err = s.OwnerOf(ctxBg, inB[0].ID)
	must(t, err, "owner of b's agent")
	equal(t, ws, wb, "owner")

	list := func(p *store.ListParams) string {
		t.Helper()
		got, err := s.AgentList(ctxBg, p)
		must(t, err, "list agents")
		return ids(got, agentID)
	}
	equal(t, list(&store.ListParams{Workspace: wa}), ids(inA, agentID), "a's agents")
	equal(t, list(&store.ListParams{Workspace: wb, Desc: true, Limit: 1}), inB[1].ID, "b's newest agent")
	equal(t, list(&store.ListParams{Workspace: wb, Desc: true, Limit: 1,
		After: &store.Cursor{CreatedAt: inB[1].CreatedAt, ID: inB[1].ID}}), inB[0].ID, "b's next page")
	equal(t, list(&store.ListParams{Workspace: apitype.DefaultWorkspaceID}), ids(unowned, agentID),
		"the unowned agents are the default workspace's")
	equal(t, list(&store.ListParams{Workspace: "wrkspc_none"}), "", "a workspace with no agents")

	// Environment names are unique within a workspace, not across workspaces.
	named := func(ws string) *apitype.Environment {
		e := newEnvironment(base)
		e.Name = "shared name"
		if ws != "" {
			must(t, s.Own(ctxBg, e.ID, ws), "own environment")
		}
		return e
	}
	must(t, s.EnvironmentCreate(ctxBg, named(wa)), "a's environment")
	must(t, s.EnvironmentCreate(ctxBg, named(wb)), "b's environment of the same name")
	must(t, s.EnvironmentCreate(ctxBg, named("")), "the default workspace's environment of the same name")
	mustIs(t, s.EnvironmentCreate(ctxBg, named(wa)), store.ErrConflict, "a second of a's")
	renamed := newEnvironment(base)
	must(t, s.Own(ctxBg, renamed.ID, wb), "own environment")
	must(t, s.EnvironmentCreate(ctxBg, renamed), "another of b's")
	_, err = s.EnvironmentUpdate(ctxBg, renamed.ID, func(e *apitype.Environment) error { e.Name = "shared name"; return nil })
	mustIs(t, err, store.ErrConflict, "renamed to a name b has")
}

// testAPIKeyUpdate: a key's workspace is kept; its name and state change; revoking it is once and for good.
func testAPIKeyUpdate(t *testing.T, h Harness) {
	s := h.open(t)
	k := &apitype.APIKey{ID: apitype.NewID(apitype.PrefixAPIKey), Name: "team", Hash: "hash-ws", Hint: "wxyz",
		CreatedAt: base, WorkspaceID: "wrkspc_team"}
	must(t, s.APIKeyCreate(ctxBg, k), "create")
	got, err := s.APIKeyGet(ctxBg, k.ID)
	must(t, err, "get")
	equal(t, got.WorkspaceID, "wrkspc_team", "workspace")
	equal(t, got.Status(), apitype.APIKeyActive, "status")
	_, err = s.APIKeyGet(ctxBg, "apikey_missing")
	mustIs(t, err, store.ErrNotFound, "get a missing key")

	got, err = s.APIKeyUpdate(ctxBg, k.ID, func(k *apitype.APIKey) error {
		k.Name, k.Inactive, k.WorkspaceID, k.Hash = "renamed", true, "wrkspc_other", "hash-other"
		return nil
	})
	must(t, err, "turn off")
	equal(t, got.Name, "renamed", "name")
	equal(t, got.Status(), apitype.APIKeyInactive, "status")
	got, err = s.APIKeyByHash(ctxBg, "hash-ws")
	must(t, err, "by hash after the update")
	equal(t, got.WorkspaceID, "wrkspc_team", "the workspace is kept")
	equal(t, got.Inactive, true, "inactive stored")

	at := base.Add(time.Hour)
	_, err = s.APIKeyUpdate(ctxBg, k.ID, func(k *apitype.APIKey) error { k.Inactive, k.RevokedAt = false, &at; return nil })
	must(t, err, "archive")
	got, err = s.APIKeyUpdate(ctxBg, k.ID, func(k *apitype.APIKey) error { k.RevokedAt = nil; return nil })
	must(t, err, "unarchive")
	equal(t, got.Status(), apitype.APIKeyArchived, "an archived key stays archived")
	_, err = s.APIKeyByHash(ctxBg, "hash-ws")
	mustIs(t, err, store.ErrNotFound, "by hash of an archived key")
	_, err = s.APIKeyUpdate(ctxBg, "apikey_missing", func(*apitype.APIKey) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update a missing key")
}

// testWebhookFanOutWorkspaces: an event reaches the endpoints of its workspace alone: the one its data names,
// or else its vault's or its object's, and its delivered data names that workspace.
func testWebhookFanOutWorkspaces(t *testing.T, h Harness) {
	s := h.open(t)
	wa, wb := apitype.NewID(apitype.PrefixWorkspace), apitype.NewID(apitype.PrefixWorkspace)
	owned := func(ws string) *store.WebhookEndpointRecord {
		e := newEndpoint(base, "vault.created", "vault_credential.refresh_failed")
		must(t, s.Own(ctxBg, e.Endpoint.ID, ws), "own endpoint")
		must(t, s.WebhookEndpointCreate(ctxBg, e), "create endpoint")
		return e
	}
	epA, epB := owned(wa), owned(wb)
	epDefault := createEndpoint(t, s, base, "vault.created")
	vaultA, vaultB := apitype.NewID(apitype.PrefixVault), apitype.NewID(apitype.PrefixVault)
	must(t, s.Own(ctxBg, vaultA, wa), "own vault a")
	must(t, s.Own(ctxBg, vaultB, wb), "own vault b")

	at := base.Add(time.Hour)
	ofA := webhookEvent("vault.created", vaultA, at)
	named := webhookEvent("vault.created", "vlt_unowned", at.Add(time.Second))
	named.Data.WorkspaceID = wb
	credB := webhookEvent("vault_credential.refresh_failed", "vcrd_unowned", at.Add(2*time.Second))
	credB.Data.VaultID = vaultB
	legacy := webhookEvent("vault.created", "vlt_legacy", at.Add(3*time.Second))
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{ofA, named, credB, legacy}), "append events")
	equal(t, fanOut(t, s, 10), 4, "fanned out")

	got := func(ep *store.WebhookEndpointRecord, ws string) string {
		t.Helper()
		ds := deliveries(t, s, ep.Endpoint.ID)
		for _, d := range ds {
			equal(t, d.Event.Data.WorkspaceID, ws, "the delivered event's workspace")
		}
		return ids(ds, deliveryEventID)
	}
	equal(t, got(epA, wa), ofA.ID, "a's endpoint: its vault's event")
	equal(t, got(epB, wb), credB.ID+","+named.ID, "b's endpoint, newest first: its vault's credential, the event naming b")
	equal(t, got(epDefault, apitype.DefaultWorkspaceID), legacy.ID, "the default workspace's endpoint: the unowned object's")
}

// testRateTake: a bucket starts full, gives at most burst tokens at once, refills at its rate (a time before its
// last take counts as that time), says how long until its next token, and gives exactly burst tokens to
// concurrent takes.
func testRateTake(t *testing.T, h Harness) {
	s := h.open(t)
	take := func(key string, at time.Time) time.Duration {
		t.Helper()
		wait, err := s.RateTake(ctxBg, key, 2, 3, at)
		must(t, err, "take")
		return wait
	}
	for i := range 3 {
		equal(t, take("a", base), 0, fmt.Sprintf("take %d of a full bucket", i))
	}
	equal(t, take("a", base), 500*time.Millisecond, "an empty bucket at 2 a second: half a second to wait")
	equal(t, take("b", base), 0, "another bucket is full")
	equal(t, take("a", base.Add(-time.Hour)), 500*time.Millisecond, "a time in the past counts as the last")
	equal(t, take("a", base.Add(750*time.Millisecond)), 0, "1.5 tokens refilled: one taken")
	equal(t, take("a", base.Add(750*time.Millisecond)), 250*time.Millisecond, "0.5 left: a quarter second to wait")
	equal(t, take("a", base.Add(time.Hour)), 0, "refilled, to the burst at most")
	equal(t, take("a", base.Add(time.Hour)), 0, "second")
	equal(t, take("a", base.Add(time.Hour)), 0, "third")
	if take("a", base.Add(time.Hour)) == 0 {
		t.Fatal("a bucket refilled past its burst")
	}

	var taken atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			wait, err := s.RateTake(ctxBg, "c", 0.001, 5, base)
			if err != nil {
				t.Error(err)
			}
			if wait == 0 {
				taken.Add(1)
			}
		})
	}
	wg.Wait()
	equal(t, taken.Load(), int32(5), "concurrent takes of a bucket of 5")
}

// testSlots: a group holds at most max unexpired slots; a held slot renews; an expired one frees its place; a
// released one too; concurrent takes of a group's last places take exactly as many as there are.
func testSlots(t *testing.T, h Harness) {
	s := h.open(t)
	until := base.Add(time.Minute)
	take := func(group, id string, now time.Time) (bool, int) {
		t.Helper()
		held, n, err := s.SlotTake(ctxBg, group, id, 2, now, now.Add(time.Minute))
		must(t, err, "take")
		return held, n
	}
	held, n := take("g", "a", base)
	equal(t, held && n == 1, true, "first slot")
	held, n = take("g", "b", base)
	equal(t, held && n == 2, true, "second slot")
	held, n = take("g", "c", base)
	equal(t, !held && n == 2, true, "a third is refused")
	held, _ = take("other", "c", base)
	equal(t, held, true, "another group has its own")
	held, n = take("g", "a", base.Add(30*time.Second))
	equal(t, held && n == 2, true, "a held slot renews")
	held, _ = take("g", "c", until.Add(time.Second))
	equal(t, held, true, "b expired: its place is free (a was renewed)")
	must(t, s.SlotRelease(ctxBg, "c"), "release")
	must(t, s.SlotRelease(ctxBg, "never"), "release a slot never taken")
	held, _ = take("g", "d", until.Add(time.Second))
	equal(t, held, true, "c released: its place is free")

	var took atomic.Int32
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			held, _, err := s.SlotTake(ctxBg, "race", fmt.Sprint("r", i), 3, base, until)
			if err != nil {
				t.Error(err)
			}
			if held {
				took.Add(1)
			}
		})
	}
	wg.Wait()
	equal(t, took.Load(), int32(3), "concurrent takes of 3 places")
}
