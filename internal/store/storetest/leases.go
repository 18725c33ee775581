package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// shortTTL is long enough for the calls a test makes under the lease (on a loaded machine), short enough to wait
// out.
const shortTTL = time.Second

// claim claims one session.
func claim(s store.Store, owner string, ttl time.Duration, sessionID string) (*store.Lease, error) {
	ls, err := s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: owner, TTL: ttl, SessionID: sessionID})
	if err != nil {
		return nil, err
	}
	if len(ls) != 1 {
		return nil, fmt.Errorf("claim of one session returned %d leases", len(ls))
	}
	return ls[0], nil
}

// wake appends a user message that wakes the session.
func wake(t *testing.T, s store.Store, sessionID, text, what string) {
	t.Helper()
	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sessionID, Wake: true,
		Events: []apitype.NewEvent{userMessage(text)}})
	must(t, err, what)
}

// waitExpired sleeps until l has expired.
func waitExpired(l *store.Lease) {
	time.Sleep(time.Until(l.ExpiresAt) + 20*time.Millisecond)
}

func testLeaseClaimNoWork(t *testing.T, h Harness) {
	s := h.open(t)
	_, err := claim(s, "brain", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "claim on an empty store")
	sess := createSession(t, s)
	appendEvents(t, s, sess.ID, agentMessage("no wake"))
	_, err = claim(s, "brain", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "claim with no woken session")
}

func testLeaseFencing(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s, userMessage("go"))

	a, err := claim(s, "brain-a", shortTTL, "")
	must(t, err, "a claims")
	equal(t, a.SessionID, sess.ID, "claimed session")
	equal(t, a.Owner, "brain-a", "owner")
	if a.Token == "" {
		t.Fatal("empty lease token")
	}
	if !a.ExpiresAt.After(time.Now()) {
		t.Fatalf("lease expires at %v, in the past", a.ExpiresAt)
	}
	_, err = claim(s, "brain-b", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "b claims while a's lease is live")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: a, ExpectedSeq: 2,
		Events: []apitype.NewEvent{agentMessage("from a")}})
	must(t, err, "a appends under its lease")
	must(t, s.EventMarkProcessed(ctxBg, &store.EventMarkProcessedParams{SessionID: sess.ID, Lease: a,
		Seqs: []int64{1}, At: apitype.Now()}), "a marks processed under its lease")

	forged := *a
	forged.Token = "not-the-token"
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: &forged,
		Events: []apitype.NewEvent{agentMessage("forged")}})
	mustIs(t, err, store.ErrLeaseLost, "append with a wrong token")

	waitExpired(a)
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: a,
		Events: []apitype.NewEvent{agentMessage("expired")}})
	mustIs(t, err, store.ErrLeaseLost, "append under an expired, unclaimed lease")

	b, err := claim(s, "brain-b", time.Minute, "")
	must(t, err, "b claims the expired lease")
	equal(t, b.SessionID, sess.ID, "b's session")
	if b.Token == a.Token {
		t.Fatal("b got a's token")
	}

	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: a,
		Events: []apitype.NewEvent{agentMessage("stale a")}})
	mustIs(t, err, store.ErrLeaseLost, "a appends after b took over")
	_, err = s.LeaseRenew(ctxBg, a, time.Minute)
	mustIs(t, err, store.ErrLeaseLost, "a renews after b took over")
	mustIs(t, s.EventMarkProcessed(ctxBg, &store.EventMarkProcessedParams{SessionID: sess.ID, Lease: a,
		Seqs: []int64{1}, At: apitype.Now()}), store.ErrLeaseLost, "a marks processed after b took over")
	mustIs(t, s.LeaseRelease(ctxBg, a), store.ErrLeaseLost, "a releases after b took over")

	got, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: b, ExpectedSeq: 3,
		Events: []apitype.NewEvent{agentMessage("from b")}})
	must(t, err, "b appends")
	equalSeqs(t, got, []int64{3}, "b resumes from the last event")
	equalSeqs(t, allEvents(t, s, sess.ID), []int64{1, 2, 3}, "log")

	must(t, s.LeaseRelease(ctxBg, b), "b releases")
	mustIs(t, s.LeaseRelease(ctxBg, b), store.ErrLeaseLost, "b releases twice")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: b,
		Events: []apitype.NewEvent{agentMessage("after release")}})
	mustIs(t, err, store.ErrLeaseLost, "append after release")

	// A client append needs no lease.
	wake(t, s, sess.ID, "client", "client append")

	// Fenced calls on a deleted session: the adapter may answer ErrLeaseLost or ErrNotFound.
	c, err := claim(s, "brain-c", time.Minute, "")
	must(t, err, "c claims")
	must(t, s.SessionDelete(ctxBg, sess.ID), "delete session")
	_, err = s.LeaseRenew(ctxBg, c, time.Minute)
	mustIsOneOf(t, err, "renew on a deleted session", store.ErrLeaseLost, store.ErrNotFound)
	mustIsOneOf(t, s.LeaseRelease(ctxBg, c), "release on a deleted session", store.ErrLeaseLost, store.ErrNotFound)
}

func testLeaseRenew(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s, userMessage("go"))
	a, err := claim(s, "brain-a", shortTTL, sess.ID)
	must(t, err, "claim")
	appendEvents(t, s, sess.ID, agentMessage("no wake"))
	wake(t, s, sess.ID, "more", "wake during the lease")

	r, err := s.LeaseRenew(ctxBg, a, time.Minute)
	must(t, err, "renew")
	equal(t, r.Token, a.Token, "renewal keeps the token")
	equal(t, r.SessionID, a.SessionID, "session")
	if r.ExpiresAt.Before(time.Now().Add(50 * time.Second)) {
		t.Fatalf("renewed lease expires at %v, want about a minute from now", r.ExpiresAt)
	}
	if r.WakeSeq <= a.WakeSeq {
		t.Fatalf("renewal did not refresh WakeSeq: %d, was %d", r.WakeSeq, a.WakeSeq)
	}

	waitExpired(a) // the original expiry has passed; the renewal holds
	_, err = claim(s, "brain-b", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "claim while the renewed lease is live")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: r,
		Events: []apitype.NewEvent{agentMessage("still mine")}})
	must(t, err, "append under the renewed lease")
	must(t, s.LeaseRelease(ctxBg, r), "release the renewed lease")
	_, err = claim(s, "brain-b", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "wake-ups up to the renewal's WakeSeq are handled")
}

func testLeaseReleaseWakeSeq(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s, userMessage("go"))
	wait, stop := s.WaitRunnable()
	defer stop()

	// Not woken during the lease: not runnable after release.
	l, err := claim(s, "brain", time.Minute, "")
	must(t, err, "claim")
	must(t, s.LeaseRelease(ctxBg, l), "release")
	_, err = claim(s, "brain", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "claim after a release that handled every wake-up")

	// Woken again: runnable.
	wake(t, s, sess.ID, "again", "wake")
	l, err = claim(s, "brain", time.Minute, "")
	must(t, err, "claim the woken session")

	// Woken during the lease: still runnable after release, and waiters hear about it.
	wake(t, s, sess.ID, "while you were busy", "wake during the lease")
	_, err = claim(s, "other", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "a woken session under a live lease is not claimable")
	drain(wait)
	must(t, s.LeaseRelease(ctxBg, l), "release with a stale WakeSeq")
	waitSignal(t, wait, "runnable waiter woken by a release with work left")
	l2, err := claim(s, "other", time.Minute, "")
	must(t, err, "claim after release with work left")
	equal(t, l2.SessionID, sess.ID, "session")
	if l2.WakeSeq <= l.WakeSeq {
		t.Fatalf("new lease WakeSeq %d, want > %d", l2.WakeSeq, l.WakeSeq)
	}
	must(t, s.LeaseRelease(ctxBg, l2), "release")
	_, err = claim(s, "brain", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "every wake-up handled")
}

func testLeaseClaimSessionID(t *testing.T, h Harness) {
	s := h.open(t)
	first := createSession(t, s, userMessage("1"))
	second := createSession(t, s, userMessage("2"))
	idle := createSession(t, s)

	l, err := claim(s, "brain", time.Minute, second.ID)
	must(t, err, "claim a chosen session")
	equal(t, l.SessionID, second.ID, "claimed the chosen session")
	_, err = claim(s, "brain", time.Minute, second.ID)
	mustIs(t, err, store.ErrNoWork, "claim a leased session by id")
	_, err = claim(s, "brain", time.Minute, idle.ID)
	mustIs(t, err, store.ErrNoWork, "claim a session that is not runnable")
	_, err = claim(s, "brain", time.Minute, "sesn_missing")
	mustIsOneOf(t, err, "claim an unknown session", store.ErrNoWork, store.ErrNotFound)

	l, err = claim(s, "brain", time.Minute, "")
	must(t, err, "claim any")
	equal(t, l.SessionID, first.ID, "the remaining runnable session")
	_, err = claim(s, "brain", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "all runnable sessions leased")
}

func testLeaseClaimLimit(t *testing.T, h Harness) {
	s := h.open(t)
	var woken []string
	for i := range 5 {
		woken = append(woken, createSession(t, s, userMessage(fmt.Sprint("work ", i))).ID)
	}
	createSession(t, s) // never woken

	for _, limit := range []int{-1, store.MaxClaimLimit + 1} {
		_, err := s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "brain", TTL: time.Minute, Limit: limit})
		if err == nil || errors.Is(err, store.ErrNoWork) || !strings.Contains(err.Error(), "limit") {
			t.Errorf("claim with limit %d: got %v, want an error naming the limit", limit, err)
		}
	}
	first, err := s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "brain", TTL: time.Minute, Limit: 3})
	must(t, err, "claim three")
	rest, err := s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "brain", TTL: time.Minute, Limit: 10})
	must(t, err, "claim the rest")
	_, err = s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "brain", TTL: time.Minute, Limit: 10})
	mustIs(t, err, store.ErrNoWork, "claim with every runnable session leased")

	all := append(first, rest...)
	equal(t, len(first), 3, "leases of a claim with limit 3")
	equal(t, len(all), len(woken), "leases of both claims")
	tokens := map[string]bool{}
	for i, l := range all {
		equal(t, l.SessionID, woken[i], fmt.Sprintf("lease %d: sessions woken longest ago first", i))
		equal(t, l.Owner, "brain", "owner")
		if l.Token == "" || tokens[l.Token] {
			t.Fatalf("lease %d: token %q empty or shared", i, l.Token)
		}
		tokens[l.Token] = true
		// Each lease fences its own session.
		_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: l.SessionID, Lease: l,
			Events: []apitype.NewEvent{agentMessage("ok")}})
		must(t, err, "append under a batch-claimed lease")
		must(t, s.LeaseRelease(ctxBg, l), "release a batch-claimed lease")
	}
	_, err = s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "brain", TTL: time.Minute, Limit: 10})
	mustIs(t, err, store.ErrNoWork, "claim after every wake-up was handled")
}

// testLeaseClaimLapsedFirst: a claim takes the sessions whose lease lapsed (a brain stopped in their turn), by
// when it lapsed, before those holding none, however long ago these were woken, and returns what it took woken
// longest ago first.
func testLeaseClaimLapsedFirst(t *testing.T, h Harness) {
	s := h.open(t)
	var ids []string
	for i := range 4 {
		ids = append(ids, createSession(t, s, userMessage(fmt.Sprint("work ", i))).ID)
		time.Sleep(time.Millisecond) // distinct wake-up times
	}
	// A brain claims the two woken last, one after the other, and stops: their leases lapse in that order.
	var stopped []*store.Lease
	for _, id := range ids[2:] {
		l, err := claim(s, "stopped", shortTTL, id)
		must(t, err, "claim "+id)
		stopped = append(stopped, l)
		time.Sleep(time.Millisecond)
	}
	waitExpired(stopped[1])

	claimed := func(limit int) []string {
		t.Helper()
		ls, err := s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "brain", TTL: time.Minute, Limit: limit})
		must(t, err, fmt.Sprintf("claim %d", limit))
		var got []string
		for _, l := range ls {
			got = append(got, l.SessionID)
		}
		return got
	}
	equal(t, fmt.Sprint(claimed(1)), fmt.Sprint(ids[2:3]), "a claim of one: the lease that lapsed first")
	equal(t, fmt.Sprint(claimed(2)), fmt.Sprint([]string{ids[0], ids[3]}),
		"a claim of two: the other lapsed lease and the longest woken of those holding none, by wake-up")
	equal(t, fmt.Sprint(claimed(5)), fmt.Sprint(ids[1:2]), "a claim of five: the one left")
}

func testEventAppendRelease(t *testing.T, h Harness) {
	s := h.open(t)
	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: createSession(t, s).ID, Release: true,
		Events: []apitype.NewEvent{agentMessage("x")}})
	if err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("release without a lease: got %v, want an error", err)
	}

	// Every wake-up handled: the append releases the lease and the session is not runnable.
	sess := createSession(t, s, userMessage("go"))
	l, err := claim(s, "brain", time.Minute, "")
	must(t, err, "claim")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: l, Release: true,
		Status: apitype.StatusIdle, Events: []apitype.NewEvent{agentMessage("done")}})
	must(t, err, "append that releases")
	_, err = claim(s, "other", time.Minute, "")
	mustIs(t, err, store.ErrNoWork, "claim after a releasing append that handled every wake-up")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: l,
		Events: []apitype.NewEvent{agentMessage("late")}})
	mustIs(t, err, store.ErrLeaseLost, "append under the released lease")
	got, err := s.SessionGet(ctxBg, sess.ID)
	must(t, err, "get session")
	equal(t, got.Status, apitype.StatusIdle, "status set by the releasing append")

	// A wake-up after the claim keeps the session runnable, and waiters hear of it.
	wake(t, s, sess.ID, "again", "wake")
	l, err = claim(s, "brain", time.Minute, "")
	must(t, err, "claim again")
	wake(t, s, sess.ID, "while working", "wake while leased")
	wait, stop := s.WaitRunnable()
	defer stop()
	drain(wait)
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: l, Release: true,
		Events: []apitype.NewEvent{agentMessage("done again")}})
	must(t, err, "append that releases with an unhandled wake-up")
	waitSignal(t, wait, "waiter woken by a release that left the session runnable")
	l2, err := claim(s, "other", time.Minute, "")
	must(t, err, "claim the session woken after the first claim")
	equal(t, l2.SessionID, sess.ID, "claimed session")
}

func testLeaseClaimRace(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s, userMessage("race"))
	const brains = 8
	leases := make([]*store.Lease, brains)
	errs := make([]error, brains)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range brains {
		wg.Go(func() {
			<-start
			var ls []*store.Lease
			ls, errs[i] = s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "brain", TTL: time.Minute, Limit: i % 3})
			if errs[i] == nil {
				leases[i] = ls[0]
				if len(ls) != 1 {
					errs[i] = fmt.Errorf("one runnable session, %d leases", len(ls))
				}
			}
		})
	}
	close(start)
	wg.Wait()
	var winner *store.Lease
	for i := range brains {
		switch {
		case errs[i] == nil:
			if winner != nil {
				t.Fatalf("two brains claimed %s", sess.ID)
			}
			winner = leases[i]
		case !errors.Is(errs[i], store.ErrNoWork):
			t.Fatalf("brain %d: got %v, want nil or ErrNoWork", i, errs[i])
		}
	}
	if winner == nil {
		t.Fatal("no brain claimed the session")
	}
	equal(t, winner.SessionID, sess.ID, "claimed session")
}

func testWaitRunnable(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	wait, stop := s.WaitRunnable()
	defer stop()
	drain(wait)
	go func() {
		_, _ = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Wake: true,
			Events: []apitype.NewEvent{userMessage("work")}})
	}()
	waitSignal(t, wait, "waiter woken by a Wake append")
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := claim(s, "brain", time.Minute, "")
		if err == nil {
			equal(t, l.SessionID, sess.ID, "claimed session")
			break
		}
		mustIs(t, err, store.ErrNoWork, "claim")
		if time.Now().After(deadline) {
			t.Fatal("woken waiter cannot claim the session")
		}
		time.Sleep(time.Millisecond)
	}
}
