package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// newEndpoint is an enabled endpoint created at created, receiving the given event types.
func newEndpoint(created time.Time, events ...string) *store.WebhookEndpointRecord {
	id := apitype.NewID(apitype.PrefixWebhookEndpoint)
	return &store.WebhookEndpointRecord{
		Endpoint: apitype.WebhookEndpoint{Type: "webhook_endpoint", ID: id, URL: "https://example.com/hooks/" + id,
			Name: "hooks", EnabledEvents: events, State: apitype.WebhookEnabled, CreatedAt: created, UpdatedAt: created},
		Secret: sealed(id, "signing_secret", "key_1", 7),
	}
}

func createEndpoint(t testing.TB, s store.Store, created time.Time, events ...string) *store.WebhookEndpointRecord {
	t.Helper()
	e := newEndpoint(created, events...)
	must(t, s.WebhookEndpointCreate(ctxBg, e), "create webhook endpoint")
	return e
}

func endpointID(e *store.WebhookEndpointRecord) string { return e.Endpoint.ID }

func deliveryEventID(d *store.WebhookDelivery) string { return d.Event.ID }

func deliveryKey(d *store.WebhookDelivery) string { return d.Event.ID + "/" + d.EndpointID }

// deliveries lists every delivery of an endpoint, newest first.
func deliveries(t testing.TB, s store.Store, endpointID string) []store.WebhookDelivery {
	t.Helper()
	out, err := s.WebhookDeliveryList(ctxBg, &store.WebhookDeliveryListParams{EndpointID: endpointID, Limit: 10000})
	must(t, err, "list deliveries")
	return out
}

// fresh returns the deliveries of an endpoint not in seen, and adds them to it.
func fresh(t testing.TB, s store.Store, endpointID string, seen map[string]bool) []store.WebhookDelivery {
	t.Helper()
	var out []store.WebhookDelivery
	for _, d := range deliveries(t, s, endpointID) {
		if !seen[d.Event.ID] {
			seen[d.Event.ID] = true
			out = append(out, d)
		}
	}
	return out
}

func fanOut(t testing.TB, s store.Store, limit int) int {
	t.Helper()
	n, err := s.WebhookFanOut(ctxBg, limit)
	must(t, err, "fan out")
	return n
}

// webhookEvent is an event of type typ about the object id, at at, with a random id.
func webhookEvent(typ, id string, at time.Time) apitype.WebhookEvent {
	return apitype.NewWebhookEvent(apitype.WebhookEventType(typ), id, "", at)
}

func sessionIdle(reason apitype.StopReasonType) apitype.NewEvent {
	e, err := apitype.MakeEvent(apitype.EventSessionStatusIdle, apitype.SessionIdle{
		StopReason: apitype.StopReason{Type: reason, EventIDs: []string{"sevt_x"}}})
	if err != nil {
		panic(err)
	}
	return e
}

// testWebhookEndpoint: create (the signing secret shown once is not stored; the sealed one is), get, the Update
// rule, delete.
func testWebhookEndpoint(t *testing.T, h Harness) {
	s := h.open(t)
	e := newEndpoint(base, "session.created", "vault.created")
	e.Endpoint.SigningSecret = "whsec_shown_once"
	must(t, s.WebhookEndpointCreate(ctxBg, e), "create endpoint")
	mustIs(t, s.WebhookEndpointCreate(ctxBg, e), store.ErrConflict, "create endpoint twice")
	got, err := s.WebhookEndpointGet(ctxBg, e.Endpoint.ID)
	must(t, err, "get endpoint")
	equal(t, got.Endpoint.URL, e.Endpoint.URL, "url")
	equal(t, got.Endpoint.State, apitype.WebhookEnabled, "state")
	equal(t, slices.Equal(got.Endpoint.EnabledEvents, e.Endpoint.EnabledEvents), true, "enabled events")
	sameTime(t, got.Endpoint.CreatedAt, base, "created_at")
	equal(t, got.Endpoint.SigningSecret, "", "the plaintext secret is not stored")
	equal(t, string(got.Secret.Ciphertext), string(e.Secret.Ciphertext), "sealed secret")
	equal(t, got.Secret.KeyID, "key_1", "sealed secret key")
	_, err = s.WebhookEndpointGet(ctxBg, "whep_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown endpoint")

	later := base.Add(time.Hour)
	upd, err := s.WebhookEndpointUpdate(ctxBg, e.Endpoint.ID, func(r *store.WebhookEndpointRecord) error {
		r.Endpoint.ID, r.Endpoint.CreatedAt = "whep_other", later // the store keeps both
		r.Endpoint.SigningSecret = "whsec_again"
		r.Endpoint.State, r.Endpoint.UpdatedAt = apitype.WebhookDisabled, later
		r.Endpoint.EnabledEvents = []string{"session.deleted"}
		return nil
	})
	must(t, err, "update endpoint")
	equal(t, upd.Endpoint.ID, e.Endpoint.ID, "id kept")
	got, err = s.WebhookEndpointGet(ctxBg, e.Endpoint.ID)
	must(t, err, "get updated endpoint")
	sameTime(t, got.Endpoint.CreatedAt, base, "created_at kept")
	sameTime(t, got.Endpoint.UpdatedAt, later, "updated_at")
	equal(t, got.Endpoint.State, apitype.WebhookDisabled, "state updated")
	equal(t, ids(got.Endpoint.EnabledEvents, func(s *string) string { return *s }), "session.deleted", "events updated")
	equal(t, got.Endpoint.SigningSecret, "", "no plaintext secret after an update")
	boom := fmt.Errorf("boom")
	_, err = s.WebhookEndpointUpdate(ctxBg, e.Endpoint.ID, func(*store.WebhookEndpointRecord) error { return boom })
	mustIs(t, err, boom, "update whose fn fails")
	_, err = s.WebhookEndpointUpdate(ctxBg, "whep_missing", func(*store.WebhookEndpointRecord) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update unknown endpoint")

	must(t, s.WebhookEndpointDelete(ctxBg, e.Endpoint.ID), "delete endpoint")
	_, err = s.WebhookEndpointGet(ctxBg, e.Endpoint.ID)
	mustIs(t, err, store.ErrNotFound, "get deleted endpoint")
	mustIs(t, s.WebhookEndpointDelete(ctxBg, e.Endpoint.ID), store.ErrNotFound, "delete twice")
}

// testWebhookEndpointList: by (created_at, id) both ways, with paging and created_at filters.
func testWebhookEndpointList(t *testing.T, h Harness) {
	s := h.open(t)
	var all []*store.WebhookEndpointRecord
	for i := range 5 {
		all = append(all, createEndpoint(t, s, base.Add(time.Duration(i)*time.Second), "session.created"))
	}
	list := func(p *store.ListParams) string {
		t.Helper()
		got, err := s.WebhookEndpointList(ctxBg, p)
		must(t, err, "list endpoints")
		return ids(got, endpointID)
	}
	join := func(es ...*store.WebhookEndpointRecord) string {
		return ids(es, func(e **store.WebhookEndpointRecord) string { return (*e).Endpoint.ID })
	}
	cursor := func(e *store.WebhookEndpointRecord) *store.Cursor {
		return &store.Cursor{CreatedAt: e.Endpoint.CreatedAt, ID: e.Endpoint.ID}
	}
	equal(t, list(&store.ListParams{}), join(all...), "oldest first")
	equal(t, list(&store.ListParams{Desc: true}), join(all[4], all[3], all[2], all[1], all[0]), "newest first")
	equal(t, list(&store.ListParams{Limit: 2}), join(all[0], all[1]), "first page")
	equal(t, list(&store.ListParams{Limit: 2, After: cursor(all[1])}), join(all[2], all[3]), "next page")
	equal(t, list(&store.ListParams{Limit: 2, After: cursor(all[3])}), join(all[4]), "last page")
	equal(t, list(&store.ListParams{Desc: true, Limit: 2, After: cursor(all[3])}), join(all[2], all[1]),
		"a page newest first")
	gt := all[2].Endpoint.CreatedAt
	equal(t, list(&store.ListParams{CreatedAfter: &gt}), join(all[3], all[4]), "created_at gt")
}

// testWebhookLogEvents: EventAppend and SessionCreate record the webhook events of what they append in the
// outbox (LogWebhookEvents, SessionCreatedWebhookEvent), with the ids derived from it, and nothing for the rest.
func testWebhookLogEvents(t *testing.T, h Harness) {
	s := h.open(t)
	ep := createEndpoint(t, s, base, apitype.WebhookEventTypes...)

	seen := map[string]bool{}
	sess := createSession(t, s)
	equal(t, fanOut(t, s, 0), 1, "events of a new session")
	got := fresh(t, s, ep.Endpoint.ID, seen)
	want := store.SessionCreatedWebhookEvent(sess)
	equal(t, ids(got, deliveryEventID), want.ID, "session.created")
	equal(t, got[0].Event.Data.Type, "session.created", "type")
	equal(t, got[0].Event.Data.ID, sess.ID, "the event names the session")
	equal(t, got[0].Event.Data.OrganizationID, apitype.DefaultOrganizationID, "organization")
	sameTime(t, got[0].Event.CreatedAt, sess.CreatedAt, "the session's creation time")

	appendEvents(t, s, sess.ID, agentMessage("nothing to tell"), userMessage("nor this"))
	equal(t, fanOut(t, s, 0), 0, "a plain message tells no webhook event")

	appended := appendEvents(t, s, sess.ID, agentMessage("before"), sessionIdle(apitype.StopRequiresAction))
	wantEvents := store.LogWebhookEvents(sess.ID, appended)
	equal(t, len(wantEvents), 2, "an idle session that requires action tells two events")
	equal(t, fanOut(t, s, 0), 2, "events of the append")
	got = fresh(t, s, ep.Endpoint.ID, seen)
	equal(t, len(got), 2, "deliveries of the append")
	slices.SortFunc(got, func(a, b store.WebhookDelivery) int {
		return strings.Compare(string(a.Event.Data.Type), string(b.Event.Data.Type))
	})
	equal(t, got[0].Event.Data.Type, "session.requires_action", "requires_action")
	equal(t, got[1].Event.Data.Type, "session.status_idled", "status_idled")
	for _, d := range got {
		i := slices.IndexFunc(wantEvents, func(w apitype.WebhookEvent) bool { return w.ID == d.Event.ID })
		if i < 0 {
			t.Fatalf("recorded event %s (%s) is not one LogWebhookEvents derives", d.Event.ID, d.Event.Data.Type)
		}
		equal(t, d.Event.Data.ID, sess.ID, "the event names the session")
		sameTime(t, d.Event.CreatedAt, appended[1].CreatedAt, "the log event's time")
	}

	// A session created with initial events records its own event and theirs, in its transaction.
	running, err := apitype.MakeEvent(apitype.EventSessionStatusRunning, nil)
	must(t, err, "make event")
	sess2, initial, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{
		Session: newSession("agent_x", 1, apitype.Now()), InitialEvents: []apitype.NewEvent{userMessage("hi"), running},
	})
	must(t, err, "create session with initial events")
	wantIDs := []string{store.SessionCreatedWebhookEvent(sess2).ID}
	for _, w := range store.LogWebhookEvents(sess2.ID, initial) {
		wantIDs = append(wantIDs, w.ID)
	}
	equal(t, len(wantIDs), 2, "session.created and session.status_run_started")
	equal(t, fanOut(t, s, 0), 2, "events of the new session")
	got = fresh(t, s, ep.Endpoint.ID, seen)
	equal(t, len(got), 2, "deliveries of the new session")
	gotIDs := []string{got[0].Event.ID, got[1].Event.ID}
	slices.Sort(gotIDs)
	slices.Sort(wantIDs)
	equal(t, slices.Equal(gotIDs, wantIDs), true, "the initial events' ids: "+fmt.Sprint(gotIDs, wantIDs))

	// Concurrent appends, which adapters group into shared transactions, each record theirs.
	const n = 16
	sessions := make([]*apitype.Session, n)
	for i := range sessions {
		sessions[i] = createSession(t, s)
	}
	equal(t, fanOut(t, s, 0), n, "the sessions' events")
	fresh(t, s, ep.Endpoint.ID, seen)
	var wg sync.WaitGroup
	errs := make([]error, n)
	appends := make([][]apitype.Event, n)
	for i, sess := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idle := sessionIdle(apitype.StopEndTurn)
			if i%2 == 0 {
				idle = agentMessage("quiet") // half of them tell nothing
			}
			appends[i], errs[i] = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID,
				Events: []apitype.NewEvent{agentMessage("done"), idle}})
		}()
	}
	wg.Wait()
	var wantConcurrent []string
	for i, err := range errs {
		must(t, err, fmt.Sprintf("append %d", i))
		for _, w := range store.LogWebhookEvents(sessions[i].ID, appends[i]) {
			wantConcurrent = append(wantConcurrent, w.ID)
		}
	}
	equal(t, len(wantConcurrent), n/2, "one session.status_idled per idle session")
	equal(t, fanOut(t, s, 0), n/2, "the concurrent appends' events")
	got = fresh(t, s, ep.Endpoint.ID, seen)
	gotIDs = gotIDs[:0]
	for _, d := range got {
		gotIDs = append(gotIDs, d.Event.ID)
	}
	slices.Sort(gotIDs)
	slices.Sort(wantConcurrent)
	equal(t, slices.Equal(gotIDs, wantConcurrent), true, "the concurrent appends' event ids")
}

// testWebhookNoEndpointEnabled: while no endpoint is enabled the outbox records nothing (no event would reach
// anyone: an endpoint gets the events of the time it is enabled), so an endpoint created or enabled later gets
// none of that time's events, and the next ones reach it.
func testWebhookNoEndpointEnabled(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	appendEvents(t, s, sess.ID, sessionIdle(apitype.StopEndTurn))
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{webhookEvent("vault.created", "vlt_a", apitype.Now())}), "append an event")
	equal(t, fanOut(t, s, 0), 0, "events recorded with no endpoint")

	off := createEndpoint(t, s, base, apitype.WebhookEventTypes...)
	_, err := s.WebhookEndpointUpdate(ctxBg, off.Endpoint.ID, func(r *store.WebhookEndpointRecord) error {
		r.Endpoint.State = apitype.WebhookDisabled
		return nil
	})
	must(t, err, "disable endpoint")
	appendEvents(t, s, sess.ID, sessionIdle(apitype.StopEndTurn))
	createSession(t, s)
	equal(t, fanOut(t, s, 0), 0, "events recorded with only a disabled endpoint")

	_, err = s.WebhookEndpointUpdate(ctxBg, off.Endpoint.ID, func(r *store.WebhookEndpointRecord) error {
		r.Endpoint.State = apitype.WebhookEnabled
		return nil
	})
	must(t, err, "enable endpoint")
	equal(t, len(deliveries(t, s, off.Endpoint.ID)), 0, "deliveries of the time no endpoint was enabled")
	appended := appendEvents(t, s, sess.ID, sessionIdle(apitype.StopEndTurn))
	equal(t, fanOut(t, s, 0), 1, "the next event, once an endpoint is enabled")
	equal(t, ids(deliveries(t, s, off.Endpoint.ID), deliveryEventID), store.LogWebhookEvents(sess.ID, appended)[0].ID,
		"its delivery")
}

// testWebhookEventAppend: an event recorded twice is one event, fanned out once.
func testWebhookEventAppend(t *testing.T, h Harness) {
	s := h.open(t)
	ep := createEndpoint(t, s, base, "vault.created", "vault.deleted")
	must(t, s.WebhookEventAppend(ctxBg, nil), "append no events")
	a := webhookEvent("vault.created", "vlt_a", base.Add(time.Second))
	b := webhookEvent("vault.deleted", "vlt_a", base.Add(2*time.Second))
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{a, b}), "append events")
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{a}), "append an event again")
	equal(t, fanOut(t, s, 0), 2, "two events")
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{b, a}), "append them after their fan-out")
	equal(t, fanOut(t, s, 0), 0, "an event recorded again does not fan out again")
	got := deliveries(t, s, ep.Endpoint.ID)
	equal(t, len(got), 2, "one delivery per event")
	for _, d := range got {
		want := a
		if d.Event.ID == b.ID {
			want = b
		}
		equal(t, d.Event.ID, want.ID, "event id")
		equal(t, d.Event.Type, "event", "payload type")
		equal(t, d.Event.Data, want.Data, "event data")
		sameTime(t, d.Event.CreatedAt, want.CreatedAt, "event time")
	}
}

// testWebhookFanOut: oldest first, up to limit; one delivery per subscribed, enabled endpoint created at or
// before the event; pending and due at once; never twice.
func testWebhookFanOut(t *testing.T, h Harness) {
	s := h.open(t)
	t0 := base.Add(time.Hour)
	a := createEndpoint(t, s, base, "vault.created")
	b := createEndpoint(t, s, base, "vault.deleted", "vault.created")
	late := createEndpoint(t, s, t0.Add(time.Minute), "vault.created")       // created after the first event
	same := createEndpoint(t, s, t0, "vault.created")                        // created with it
	off := createEndpoint(t, s, base, "vault.created", "vault.deleted")      // disabled below
	other := createEndpoint(t, s, base, "session.created", "vault.archived") // subscribed to neither
	_, err := s.WebhookEndpointUpdate(ctxBg, off.Endpoint.ID, func(r *store.WebhookEndpointRecord) error {
		r.Endpoint.State = apitype.WebhookDisabled
		return nil
	})
	must(t, err, "disable endpoint")

	created := webhookEvent("vault.created", "vlt_a", t0)
	deleted := webhookEvent("vault.deleted", "vlt_a", t0.Add(2*time.Minute))
	credential := webhookEvent("vault_credential.created", "vlt_a", t0.Add(3*time.Minute))
	// Appended newest first: the fan-out takes them by time.
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{credential, deleted, created}), "append events")

	equal(t, fanOut(t, s, 2), 2, "up to the limit")
	equal(t, fanOut(t, s, 2), 1, "the rest")
	equal(t, fanOut(t, s, 2), 0, "nothing left")

	equal(t, ids(deliveries(t, s, a.Endpoint.ID), deliveryEventID), created.ID, "a: vault.created")
	gotB := deliveries(t, s, b.Endpoint.ID)
	gotBIDs := []string{gotB[0].Event.ID, gotB[1].Event.ID}
	slices.Sort(gotBIDs)
	wantB := []string{created.ID, deleted.ID}
	slices.Sort(wantB)
	equal(t, slices.Equal(gotBIDs, wantB), true, "b: both of its types")
	equal(t, len(deliveries(t, s, late.Endpoint.ID)), 0, "an endpoint created after the event gets nothing")
	equal(t, ids(deliveries(t, s, same.Endpoint.ID), deliveryEventID), created.ID, "one created with the event gets it")
	equal(t, len(deliveries(t, s, off.Endpoint.ID)), 0, "a disabled endpoint gets nothing")
	equal(t, len(deliveries(t, s, other.Endpoint.ID)), 0, "an endpoint subscribed to neither gets nothing")

	for _, d := range append(gotB, deliveries(t, s, a.Endpoint.ID)...) {
		equal(t, d.State, store.DeliveryPending, "pending")
		equal(t, d.Attempts, 0, "no attempt yet")
		equal(t, d.LastAttemptAt == nil, true, "no last attempt")
		equal(t, d.LastStatus, 0, "no last status")
		sameTime(t, d.NextAttemptAt, d.Event.CreatedAt, "due from its event's time, whatever the store's clock")
		sameTime(t, d.CreatedAt, d.Event.CreatedAt, "created at its event's time")
	}

	// Recording them again, or fanning out again, makes no second delivery.
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{created, deleted}), "append again")
	equal(t, fanOut(t, s, 0), 0, "nothing to fan out")
	equal(t, len(deliveries(t, s, b.Endpoint.ID)), 2, "no duplicate delivery")
}

// testWebhookFanOutRace: concurrent fan-outs over many events make exactly one delivery per (event, endpoint).
func testWebhookFanOutRace(t *testing.T, h Harness) {
	s := h.open(t)
	const n, events, batch = 8, 200, 7
	eps := []*store.WebhookEndpointRecord{
		createEndpoint(t, s, base, "agent.created"),
		createEndpoint(t, s, base, "agent.created", "agent.updated"),
	}
	var all []apitype.WebhookEvent
	for i := range events {
		all = append(all, webhookEvent("agent.created", fmt.Sprintf("agent_%d", i), base.Add(time.Duration(i)*time.Second)))
	}
	must(t, s.WebhookEventAppend(ctxBg, all), "append events")
	openConnections(s, "memstore_none", n)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		errs  = make([]error, n)
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				k, err := s.WebhookFanOut(ctxBg, batch)
				if err != nil {
					errs[i] = err
					return
				}
				if k == 0 {
					return
				}
				mu.Lock()
				total += k
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		must(t, err, fmt.Sprintf("fan-out %d", i))
	}
	equal(t, fanOut(t, s, 0), 0, "nothing left after the race")
	equal(t, total, events, "each event taken once")
	for _, ep := range eps {
		got := deliveries(t, s, ep.Endpoint.ID)
		equal(t, len(got), events, "one delivery per event")
		seen := map[string]bool{}
		for _, d := range got {
			if seen[d.Event.ID] {
				t.Fatalf("two deliveries of %s to %s", d.Event.ID, ep.Endpoint.ID)
			}
			seen[d.Event.ID] = true
		}
	}
}

// dueAt reads the deliveries due at now without claiming them (a zero Until).
func dueAt(s store.Store, now time.Time, limit int) ([]store.WebhookDelivery, error) {
	return s.WebhookClaimDue(ctxBg, &store.WebhookClaimParams{Now: now, Limit: limit})
}

// testWebhookDeliveriesDue: pending deliveries due at now, to enabled endpoints, soonest first, up to limit,
// with the endpoint's URL and sealed secret.
func testWebhookDeliveriesDue(t *testing.T, h Harness) {
	s := h.open(t)
	a := createEndpoint(t, s, base, "vault.created")
	b := createEndpoint(t, s, base, "vault.created")
	var evs []apitype.WebhookEvent
	for i := range 3 {
		evs = append(evs, webhookEvent("vault.created", fmt.Sprintf("vlt_%d", i), base.Add(time.Duration(i)*time.Second)))
	}
	must(t, s.WebhookEventAppend(ctxBg, evs), "append events")
	equal(t, fanOut(t, s, 0), 3, "fan out")
	now := apitype.Now()
	due, err := dueAt(s, now, 0)
	must(t, err, "deliveries due")
	equal(t, len(due), 6, "every delivery is due at once")
	for _, d := range due {
		ep := a
		if d.EndpointID == b.Endpoint.ID {
			ep = b
		}
		equal(t, d.URL, ep.Endpoint.URL, "the endpoint's url")
		equal(t, d.Secret.CredentialID, ep.Endpoint.ID, "the endpoint's sealed secret")
		equal(t, string(d.Secret.WrappedKey), string(ep.Secret.WrappedKey), "the sealed secret's key")
	}
	past, err := dueAt(s, base.Add(-time.Second), 0)
	must(t, err, "deliveries due before the fan-out")
	equal(t, len(past), 0, "none due before their events")

	// Retries at distinct times: the order is the due time's.
	retry := func(ev apitype.WebhookEvent, ep *store.WebhookEndpointRecord, next time.Time) {
		t.Helper()
		must(t, s.WebhookAttempt(ctxBg, &store.WebhookAttemptParams{EventID: ev.ID, EndpointID: ep.Endpoint.ID,
			Attempt: 1, At: now, Status: 500, Error: "HTTP 500", State: store.DeliveryPending, NextAttemptAt: next}),
			"retry later")
	}
	retry(evs[0], a, now.Add(3*time.Hour))
	retry(evs[1], a, now.Add(time.Hour))
	retry(evs[2], a, now.Add(2*time.Hour))
	retry(evs[0], b, now.Add(4*time.Hour))
	must(t, s.WebhookAttempt(ctxBg, &store.WebhookAttemptParams{EventID: evs[1].ID, EndpointID: b.Endpoint.ID,
		Attempt: 1, At: now, Status: 200, State: store.DeliveryDelivered}), "deliver")
	dueKeys := func(at time.Time, limit int) string {
		t.Helper()
		got, err := dueAt(s, at, limit)
		must(t, err, "deliveries due")
		return ids(got, deliveryKey)
	}
	key := func(ev apitype.WebhookEvent, ep *store.WebhookEndpointRecord) string {
		return ev.ID + "/" + ep.Endpoint.ID
	}
	equal(t, dueKeys(now, 0), key(evs[2], b), "only the one not retried is due now; the delivered one is not")
	equal(t, dueKeys(now.Add(2*time.Hour), 0), key(evs[2], b)+","+key(evs[1], a)+","+key(evs[2], a),
		"soonest first, up to now")
	equal(t, dueKeys(now.Add(5*time.Hour), 2), key(evs[2], b)+","+key(evs[1], a), "up to the limit")
	equal(t, dueKeys(now.Add(5*time.Hour), 0),
		key(evs[2], b)+","+key(evs[1], a)+","+key(evs[2], a)+","+key(evs[0], a)+","+key(evs[0], b), "all")

	_, err = s.WebhookEndpointUpdate(ctxBg, b.Endpoint.ID, func(r *store.WebhookEndpointRecord) error {
		r.Endpoint.State = apitype.WebhookDisabled
		return nil
	})
	must(t, err, "disable b")
	equal(t, dueKeys(now.Add(5*time.Hour), 0), key(evs[1], a)+","+key(evs[2], a)+","+key(evs[0], a),
		"only enabled endpoints' deliveries")
	equal(t, len(deliveries(t, s, b.Endpoint.ID)), 3, "a disabled endpoint keeps its deliveries")
}

// testWebhookAttempt: attempts are fenced by their number; delivered and failed are final; an attempt may
// disable its endpoint.
func testWebhookAttempt(t *testing.T, h Harness) {
	s := h.open(t)
	a := createEndpoint(t, s, base, "vault.created")
	b := createEndpoint(t, s, base, "vault.created")
	ev := webhookEvent("vault.created", "vlt_a", base.Add(time.Second))
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{ev}), "append event")
	equal(t, fanOut(t, s, 0), 1, "fan out")
	at := base.Add(time.Hour)
	attempt := func(ep *store.WebhookEndpointRecord, n int, state string, status int, disable string) error {
		return s.WebhookAttempt(ctxBg, &store.WebhookAttemptParams{EventID: ev.ID, EndpointID: ep.Endpoint.ID,
			Attempt: n, At: at.Add(time.Duration(n) * time.Minute), Status: status, Error: fmt.Sprintf("error %d", n),
			State: state, NextAttemptAt: at.Add(time.Duration(n) * time.Hour), DisableReason: disable})
	}

	mustIs(t, attempt(a, 2, store.DeliveryPending, 500, ""), store.ErrConflict, "attempt 2 before attempt 1")
	must(t, attempt(a, 1, store.DeliveryPending, 503, ""), "attempt 1")
	mustIs(t, attempt(a, 1, store.DeliveryPending, 500, ""), store.ErrConflict, "attempt 1 again (another process)")
	got := deliveries(t, s, a.Endpoint.ID)[0]
	equal(t, got.State, store.DeliveryPending, "pending after a retryable failure")
	equal(t, got.Attempts, 1, "attempts")
	equal(t, got.LastStatus, 503, "last status")
	equal(t, got.LastError, "error 1", "last error")
	sameTime(t, *got.LastAttemptAt, at.Add(time.Minute), "last attempt")
	sameTime(t, got.NextAttemptAt, at.Add(time.Hour), "next attempt")

	must(t, attempt(a, 2, store.DeliveryDelivered, 204, ""), "attempt 2 delivers")
	mustIs(t, attempt(a, 3, store.DeliveryPending, 500, ""), store.ErrConflict, "an attempt after delivery")
	got = deliveries(t, s, a.Endpoint.ID)[0]
	equal(t, got.State, store.DeliveryDelivered, "delivered")
	equal(t, got.Attempts, 2, "attempts")
	equal(t, got.LastStatus, 204, "last status")
	sameTime(t, *got.LastAttemptAt, at.Add(2*time.Minute), "last attempt")

	// b's delivery fails for good and disables b.
	must(t, attempt(b, 1, store.DeliveryFailed, 410, "endpoint gone (HTTP 410)"), "attempt that gives up")
	mustIs(t, attempt(b, 2, store.DeliveryPending, 500, ""), store.ErrConflict, "an attempt after giving up")
	got = deliveries(t, s, b.Endpoint.ID)[0]
	equal(t, got.State, store.DeliveryFailed, "failed")
	equal(t, got.LastStatus, 410, "last status")
	ep, err := s.WebhookEndpointGet(ctxBg, b.Endpoint.ID)
	must(t, err, "get b")
	equal(t, ep.Endpoint.State, apitype.WebhookDisabled, "b disabled")
	equal(t, ep.Endpoint.DisabledReason, "endpoint gone (HTTP 410)", "disabled reason")
	sameTime(t, ep.Endpoint.UpdatedAt, at.Add(time.Minute), "updated at the attempt")
	equal(t, ep.Endpoint.URL, b.Endpoint.URL, "the rest of b stays")
	ep, err = s.WebhookEndpointGet(ctxBg, a.Endpoint.ID)
	must(t, err, "get a")
	equal(t, ep.Endpoint.State, apitype.WebhookEnabled, "a stays enabled")

	// A fenced-out attempt disables nothing.
	c := createEndpoint(t, s, base, "vault.created")
	ev2 := webhookEvent("vault.created", "vlt_b", base.Add(2*time.Second))
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{ev2}), "append event")
	equal(t, fanOut(t, s, 0), 1, "fan out")
	mustIs(t, s.WebhookAttempt(ctxBg, &store.WebhookAttemptParams{EventID: ev2.ID, EndpointID: c.Endpoint.ID,
		Attempt: 2, At: at, State: store.DeliveryFailed, DisableReason: "stale"}), store.ErrConflict, "stale attempt")
	ep, err = s.WebhookEndpointGet(ctxBg, c.Endpoint.ID)
	must(t, err, "get c")
	equal(t, ep.Endpoint.State, apitype.WebhookEnabled, "a stale attempt disables nothing")
	mustIs(t, s.WebhookAttempt(ctxBg, &store.WebhookAttemptParams{EventID: "whe_missing", EndpointID: c.Endpoint.ID,
		Attempt: 1, At: at, State: store.DeliveryDelivered}), store.ErrConflict, "attempt at an unknown delivery")
	if err := s.WebhookAttempt(ctxBg, &store.WebhookAttemptParams{EventID: ev2.ID, EndpointID: c.Endpoint.ID,
		Attempt: 1, At: at, State: "lost"}); err == nil {
		t.Fatal("an unknown delivery state was stored")
	}
}

// testWebhookDeliveryList: an endpoint's deliveries newest first (by fan-out), paged back with Before.
func testWebhookDeliveryList(t *testing.T, h Harness) {
	s := h.open(t)
	ep := createEndpoint(t, s, base, "vault.created")
	other := createEndpoint(t, s, base, "vault.created")
	var order []string // event ids in the order they fanned out
	for i := range 5 {
		ev := webhookEvent("vault.created", fmt.Sprintf("vlt_%d", i), base.Add(time.Duration(i)*time.Second))
		must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{ev}), "append event")
		equal(t, fanOut(t, s, 0), 1, "fan out one event")
		order = append(order, ev.ID)
	}
	all := deliveries(t, s, ep.Endpoint.ID)
	equal(t, len(all), 5, "deliveries of the endpoint only")
	for i := 1; i < len(all); i++ {
		p, d := all[i-1], all[i]
		if d.CreatedAt.After(p.CreatedAt) || d.CreatedAt.Equal(p.CreatedAt) && d.Event.ID > p.Event.ID {
			t.Fatalf("delivery %d (%v %s) listed after %d (%v %s): not newest first", i, d.CreatedAt, d.Event.ID,
				i-1, p.CreatedAt, p.Event.ID)
		}
	}
	// Fanned out one after the other, later fan-outs are no older.
	byEvent := map[string]time.Time{}
	for _, d := range all {
		byEvent[d.Event.ID] = d.CreatedAt
	}
	for i := 1; i < len(order); i++ {
		if byEvent[order[i]].Before(byEvent[order[i-1]]) {
			t.Fatalf("event %d's delivery was created before event %d's", i, i-1)
		}
	}
	var paged []store.WebhookDelivery
	var before *store.Cursor
	for {
		page, err := s.WebhookDeliveryList(ctxBg, &store.WebhookDeliveryListParams{EndpointID: ep.Endpoint.ID,
			Limit: 2, Before: before})
		must(t, err, "list a page")
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		last := page[len(page)-1]
		before = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.Event.ID}
	}
	equal(t, ids(paged, deliveryEventID), ids(all, deliveryEventID), "pages of 2 going back")
	equal(t, len(deliveries(t, s, other.Endpoint.ID)), 5, "the other endpoint's")
	got, err := s.WebhookDeliveryList(ctxBg, &store.WebhookDeliveryListParams{EndpointID: "whep_missing", Limit: 5})
	must(t, err, "list an unknown endpoint's deliveries")
	equal(t, len(got), 0, "none")
}

// testWebhookPrune: final deliveries attempted before the time go, and the fanned-out events no delivery shows;
// pending deliveries, their events and the events not fanned out stay.
func testWebhookPrune(t *testing.T, h Harness) {
	s := h.open(t)
	ep := createEndpoint(t, s, base, "vault.created")
	mk := func(i int, typ string) apitype.WebhookEvent {
		return webhookEvent(typ, fmt.Sprintf("vlt_%d", i), base.Add(time.Duration(i)*time.Second))
	}
	delivered, pending, failedLate := mk(1, "vault.created"), mk(2, "vault.created"), mk(3, "vault.created")
	unwanted := mk(4, "vault.deleted") // no endpoint wants it: fans out to nothing
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{delivered, pending, failedLate, unwanted}), "append")
	equal(t, fanOut(t, s, 0), 4, "fan out")
	notYet := mk(5, "vault.created")
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{notYet}), "append an event not fanned out")

	now := apitype.Now()
	n, err := s.WebhookPrune(ctxBg, base)
	must(t, err, "prune before everything")
	equal(t, n, 0, "nothing before the fan-out")

	attempt := func(ev apitype.WebhookEvent, state string, at time.Time) {
		t.Helper()
		must(t, s.WebhookAttempt(ctxBg, &store.WebhookAttemptParams{EventID: ev.ID, EndpointID: ep.Endpoint.ID,
			Attempt: 1, At: at, Status: 500, State: state, NextAttemptAt: at.Add(time.Hour)}), "attempt")
	}
	attempt(delivered, store.DeliveryDelivered, now)
	attempt(pending, store.DeliveryPending, now)
	attempt(failedLate, store.DeliveryFailed, now.Add(2*time.Hour))

	n, err = s.WebhookPrune(ctxBg, now.Add(time.Hour))
	must(t, err, "prune")
	equal(t, n, 3, "the delivered delivery, its event and the event fanned out to nothing")
	left := deliveries(t, s, ep.Endpoint.ID)
	slices.SortFunc(left, func(a, b store.WebhookDelivery) int { return strings.Compare(a.Event.Data.ID, b.Event.Data.ID) })
	equal(t, ids(left, deliveryEventID), pending.ID+","+failedLate.ID,
		"the pending delivery and the final one attempted after the time stay, with their events")
	equal(t, left[0].Event.Data.Type, "vault.created", "the pending delivery's event")
	due, err := dueAt(s, now.Add(2*time.Hour), 0)
	must(t, err, "deliveries due")
	equal(t, ids(due, deliveryEventID), pending.ID, "the pending delivery is still due")
	equal(t, fanOut(t, s, 0), 1, "the event not fanned out stayed")
}

// testWebhookEndpointDelete: deleting an endpoint deletes its deliveries, not the others'.
func testWebhookEndpointDelete(t *testing.T, h Harness) {
	s := h.open(t)
	a := createEndpoint(t, s, base, "vault.created")
	b := createEndpoint(t, s, base, "vault.created")
	ev := webhookEvent("vault.created", "vlt_a", base.Add(time.Second))
	must(t, s.WebhookEventAppend(ctxBg, []apitype.WebhookEvent{ev}), "append event")
	equal(t, fanOut(t, s, 0), 1, "fan out")
	must(t, s.WebhookEndpointDelete(ctxBg, a.Endpoint.ID), "delete a")
	equal(t, len(deliveries(t, s, a.Endpoint.ID)), 0, "a's deliveries went with it")
	mustIs(t, s.WebhookAttempt(ctxBg, &store.WebhookAttemptParams{EventID: ev.ID, EndpointID: a.Endpoint.ID,
		Attempt: 1, At: base, State: store.DeliveryDelivered}), store.ErrConflict, "attempt at a deleted delivery")
	due, err := dueAt(s, apitype.Now(), 0)
	must(t, err, "deliveries due")
	equal(t, ids(due, deliveryKey), ev.ID+"/"+b.Endpoint.ID, "b's delivery stays")
}

// testWebhookClaimDue: a claim takes the due deliveries and pushes them out to its Until: another claim before
// then takes none of them, one after takes them again (their attempts were never recorded); concurrent claims
// take disjoint sets.
func testWebhookClaimDue(t *testing.T, h Harness) {
	s := h.open(t)
	createEndpoint(t, s, base, "vault.created")
	createEndpoint(t, s, base, "vault.created")
	var evs []apitype.WebhookEvent
	for i := range 40 {
		evs = append(evs, webhookEvent("vault.created", fmt.Sprintf("vlt_%d", i), base.Add(time.Duration(i)*time.Millisecond)))
	}
	must(t, s.WebhookEventAppend(ctxBg, evs), "append events")
	equal(t, fanOut(t, s, 0), 40, "fan out")
	now := base.Add(time.Minute)
	claim := func(at, until time.Time, limit int) []store.WebhookDelivery {
		t.Helper()
		got, err := s.WebhookClaimDue(ctxBg, &store.WebhookClaimParams{Now: at, Until: until, Limit: limit})
		must(t, err, "claim")
		return got
	}
	first := claim(now, now.Add(5*time.Minute), 30)
	equal(t, len(first), 30, "the first claim takes its limit")
	equal(t, first[0].Event.ID, evs[0].ID, "soonest first: due from its event's time")
	equal(t, len(claim(now, now.Add(5*time.Minute), 0)), 50, "the second claim takes the rest")
	equal(t, len(claim(now.Add(time.Minute), now.Add(10*time.Minute), 0)), 0, "none while claimed")
	equal(t, len(claim(now.Add(6*time.Minute), now.Add(20*time.Minute), 0)), 80, "all again once the claims lapsed")
	skipped, err := s.WebhookClaimDue(ctxBg, &store.WebhookClaimParams{Now: now.Add(21 * time.Minute),
		Until: now.Add(25 * time.Minute), Skip: []string{first[0].EndpointID}})
	must(t, err, "claim skipping an endpoint")
	equal(t, len(skipped), 40, "the other endpoint's deliveries only")
	for _, d := range skipped {
		if d.EndpointID == first[0].EndpointID {
			t.Fatalf("claimed a delivery of a skipped endpoint")
		}
	}

	// Four claims at once, after the last claims lapsed: each delivery goes to one of them.
	at := now.Add(30 * time.Minute)
	var (
		mu  sync.Mutex
		all []string
		wg  sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			got, err := s.WebhookClaimDue(ctxBg, &store.WebhookClaimParams{Now: at, Until: at.Add(time.Hour), Limit: 30})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for i := range got {
				all = append(all, deliveryKey(&got[i]))
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, k := range all {
		if seen[k] {
			t.Errorf("delivery %s claimed twice", k)
		}
		seen[k] = true
	}
	equal(t, len(seen), 80, "every delivery claimed once by the four")
}
