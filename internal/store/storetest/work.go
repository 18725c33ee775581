package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// queueSession creates a session and queues its work item in environment env.
func queueSession(t *testing.T, s store.Store, env string, at time.Time) (*apitype.Session, *apitype.Work) {
	t.Helper()
	sess := createSession(t, s)
	w, created, err := s.WorkEnsure(ctxBg, &store.WorkEnsureParams{ID: apitype.NewID(apitype.PrefixWork),
		EnvironmentID: env, SessionID: sess.ID, At: at})
	must(t, err, "ensure work")
	equal(t, created, true, "first ensure queues an item")
	return sess, w
}

func poll(s store.Store, env, worker, token string, reclaim time.Duration, at time.Time) (*apitype.Work, error) {
	return s.WorkPoll(ctxBg, &store.WorkPollParams{EnvironmentID: env, WorkerID: worker, ReclaimAfter: reclaim,
		TokenHash: apitype.HashAPIKey(token), At: at})
}

func testWorkLifecycle(t *testing.T, h Harness) {
	s := h.open(t)
	_, _, err := s.WorkEnsure(ctxBg, &store.WorkEnsureParams{ID: apitype.NewID(apitype.PrefixWork),
		EnvironmentID: "env_x", SessionID: apitype.NewID(apitype.PrefixSession), At: apitype.Now()})
	mustIs(t, err, store.ErrNotFound, "ensure work of an unknown session")
	env := apitype.NewID(apitype.PrefixEnvironment)
	now := apitype.Now()
	sess, w := queueSession(t, s, env, now)
	equal(t, w.State, apitype.WorkQueued, "new item state")
	equal(t, w.Data.ID, sess.ID, "item's session")
	equal(t, w.EnvironmentID, env, "item's environment")
	sameTime(t, w.CreatedAt, now, "created_at")

	again, created, err := s.WorkEnsure(ctxBg, &store.WorkEnsureParams{ID: apitype.NewID(apitype.PrefixWork),
		EnvironmentID: env, SessionID: sess.ID, At: now})
	must(t, err, "ensure again")
	equal(t, created, false, "second ensure queues nothing")
	equal(t, again.ID, w.ID, "second ensure returns the queued item")

	_, err = poll(s, apitype.NewID(apitype.PrefixEnvironment), "w1", "t0", 5*time.Second, now)
	mustIs(t, err, store.ErrNoWork, "poll of another environment")
	_, err = s.WorkAck(ctxBg, &store.WorkAckParams{EnvironmentID: env, WorkID: w.ID, TTL: time.Minute, At: now})
	mustIs(t, err, store.ErrConflict, "ack of an item never delivered")

	got, err := poll(s, env, "w1", "t1", 5*time.Second, now)
	must(t, err, "poll")
	equal(t, got.ID, w.ID, "polled item")
	equal(t, got.WorkerID, "w1", "worker id")
	equal(t, got.TokenHash, apitype.HashAPIKey("t1"), "token hash")
	equal(t, got.State, apitype.WorkQueued, "a polled item stays queued until acked")
	byTok, err := s.WorkByTokenHash(ctxBg, apitype.HashAPIKey("t1"))
	must(t, err, "work by token")
	equal(t, byTok.ID, w.ID, "item of the token")

	st, err := s.WorkStats(ctxBg, env)
	must(t, err, "stats")
	equal(t, st.Depth, 0, "depth after the poll")
	equal(t, st.Pending, 1, "pending after the poll")

	_, err = poll(s, env, "w2", "t2", 5*time.Second, now.Add(time.Second))
	mustIs(t, err, store.ErrNoWork, "poll within the reclaim window")
	got, err = poll(s, env, "w2", "t2", 5*time.Second, now.Add(6*time.Second))
	must(t, err, "poll after the reclaim window")
	equal(t, got.WorkerID, "w2", "re-delivered to the second worker")
	_, err = s.WorkByTokenHash(ctxBg, apitype.HashAPIKey("t1"))
	mustIs(t, err, store.ErrNotFound, "the first delivery's token after a re-delivery")

	at := now.Add(7 * time.Second)
	acked, err := s.WorkAck(ctxBg, &store.WorkAckParams{EnvironmentID: env, WorkID: w.ID, TTL: 30 * time.Second, At: at})
	must(t, err, "ack")
	equal(t, acked.State, apitype.WorkStarting, "acked state")
	sameTime(t, *acked.AcknowledgedAt, at, "acknowledged_at")
	_, err = s.WorkAck(ctxBg, &store.WorkAckParams{EnvironmentID: env, WorkID: w.ID, TTL: 30 * time.Second, At: at})
	mustIs(t, err, store.ErrConflict, "second ack")
	_, err = poll(s, env, "w3", "t3", 0, at)
	mustIs(t, err, store.ErrNoWork, "poll once the only item is acked")

	hbp := &store.WorkHeartbeatParams{EnvironmentID: env, WorkID: w.ID, Expected: "", TTL: 20 * time.Second, At: at.Add(time.Second)}
	hb, err := s.WorkHeartbeat(ctxBg, hbp)
	must(t, err, "first heartbeat")
	equal(t, hb.LeaseExtended, true, "lease extended")
	equal(t, hb.State, apitype.WorkActive, "state after the first heartbeat")
	equal(t, hb.TTLSeconds, 20, "ttl")
	if hb.LastHeartbeat == "" {
		t.Fatal("first heartbeat reports no last_heartbeat")
	}
	stale := *hbp
	stale.At = at.Add(2 * time.Second)
	cur, err := s.WorkHeartbeat(ctxBg, &stale)
	mustIs(t, err, store.ErrConflict, "heartbeat expecting no heartbeat after one")
	equal(t, cur.LastHeartbeat, hb.LastHeartbeat, "current state of a failed heartbeat")
	next := stale
	next.Expected = hb.LastHeartbeat
	hb2, err := s.WorkHeartbeat(ctxBg, &next)
	must(t, err, "heartbeat echoing last_heartbeat")
	if hb2.LastHeartbeat == hb.LastHeartbeat {
		t.Fatal("heartbeat did not move last_heartbeat")
	}
	active, err := s.WorkGet(ctxBg, env, w.ID)
	must(t, err, "get active")
	equal(t, active.State, apitype.WorkActive, "stored state")
	equal(t, active.LastHeartbeat(), hb2.LastHeartbeat, "stored last heartbeat")
	sameTime(t, *active.StartedAt, at.Add(time.Second), "started_at is the first heartbeat")

	stopping, err := s.WorkStop(ctxBg, &store.WorkStopParams{EnvironmentID: env, WorkID: w.ID, At: at.Add(3 * time.Second)})
	must(t, err, "graceful stop")
	equal(t, stopping.State, apitype.WorkStopping, "graceful stop of an active item")
	if stopping.StopRequestedAt == nil || stopping.StoppedAt != nil {
		t.Fatalf("stopping item: stop_requested_at %v, stopped_at %v", stopping.StopRequestedAt, stopping.StoppedAt)
	}
	hb3, err := s.WorkHeartbeat(ctxBg, &store.WorkHeartbeatParams{EnvironmentID: env, WorkID: w.ID, Expected: "whatever",
		TTL: 20 * time.Second, At: at.Add(4 * time.Second)})
	must(t, err, "heartbeat while stopping is not compared")
	equal(t, hb3.State, apitype.WorkStopping, "heartbeat state while stopping")
	equal(t, hb3.LeaseExtended, false, "no lease extension while stopping")

	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{agentMessage("a")}})
	must(t, err, "append")
	stopped, err := s.WorkStop(ctxBg, &store.WorkStopParams{EnvironmentID: env, WorkID: w.ID, Force: true, At: at.Add(5 * time.Second)})
	must(t, err, "force stop")
	equal(t, stopped.State, apitype.WorkStopped, "forced stop")
	if stopped.StoppedAt == nil {
		t.Fatal("stopped item has no stopped_at")
	}
	equal(t, stopped.LostSeq, int64(1), "a stop of an acked item records the session's last event")
	_, err = s.WorkStop(ctxBg, &store.WorkStopParams{EnvironmentID: env, WorkID: w.ID, Force: true, At: at.Add(6 * time.Second)})
	mustIs(t, err, store.ErrConflict, "stop of a stopped item")
	_, err = s.WorkByTokenHash(ctxBg, apitype.HashAPIKey("t2"))
	mustIs(t, err, store.ErrNotFound, "token of a stopped item")
	// The stop woke the session: its brain settles what the worker may have run.
	l, err := claim(s, "brain", time.Minute, sess.ID)
	must(t, err, "claim the session the stop woke")
	must(t, s.LeaseRelease(ctxBg, l), "release")

	fresh, created, err := s.WorkEnsure(ctxBg, &store.WorkEnsureParams{ID: apitype.NewID(apitype.PrefixWork),
		EnvironmentID: env, SessionID: sess.ID, At: at.Add(7 * time.Second)})
	must(t, err, "ensure after the stop")
	equal(t, created, true, "a stopped item is replaced by a new one")
	newest, err := s.WorkBySession(ctxBg, sess.ID)
	must(t, err, "work by session")
	equal(t, newest.ID, fresh.ID, "newest item of the session")

	list, err := s.WorkList(ctxBg, env, &store.ListParams{Limit: 10})
	must(t, err, "list")
	equal(t, len(list), 2, "items listed")
	equal(t, list[0].ID, w.ID, "oldest first")
	page, err := s.WorkList(ctxBg, env, &store.ListParams{Limit: 10, After: &store.Cursor{CreatedAt: list[0].CreatedAt, ID: list[0].ID}})
	must(t, err, "list after")
	equal(t, len(page), 1, "items after the first")
	equal(t, page[0].ID, fresh.ID, "second page")

	md, err := s.WorkUpdateMetadata(ctxBg, env, fresh.ID, func(cur map[string]string) (map[string]string, error) {
		cur["a"], cur["b"] = "x", "x"
		return cur, nil
	})
	must(t, err, "update metadata")
	equal(t, md.Metadata["a"], "x", "metadata set")
	md, err = s.WorkUpdateMetadata(ctxBg, env, fresh.ID, func(cur map[string]string) (map[string]string, error) {
		delete(cur, "a")
		return cur, nil
	})
	must(t, err, "delete metadata")
	if _, ok := md.Metadata["a"]; ok || md.Metadata["b"] != "x" {
		t.Fatalf("metadata after the patch: %v", md.Metadata)
	}
	// fn's error aborts the update: nothing is written, and the error comes back.
	refused := errors.New("too many keys")
	_, err = s.WorkUpdateMetadata(ctxBg, env, fresh.ID, func(cur map[string]string) (map[string]string, error) {
		cur["c"] = "y"
		return nil, refused
	})
	mustIs(t, err, refused, "update refused by fn")
	stored, err := s.WorkGet(ctxBg, env, fresh.ID)
	must(t, err, "get after a refused update")
	if len(stored.Metadata) != 1 || stored.Metadata["b"] != "x" {
		t.Fatalf("metadata after a refused update: %v", stored.Metadata)
	}
	_, err = s.WorkUpdateMetadata(ctxBg, apitype.NewID(apitype.PrefixEnvironment), fresh.ID, func(cur map[string]string) (map[string]string, error) { return cur, nil })
	mustIs(t, err, store.ErrNotFound, "update under another environment")
	_, err = s.WorkGet(ctxBg, apitype.NewID(apitype.PrefixEnvironment), fresh.ID)
	mustIs(t, err, store.ErrNotFound, "item under another environment")

	st, err = s.WorkStats(ctxBg, env)
	must(t, err, "stats")
	equal(t, st.Depth, 1, "depth")
	equal(t, st.Pending, 0, "pending")
	if st.OldestQueuedAt == nil || !st.OldestQueuedAt.Equal(fresh.CreatedAt) {
		t.Fatalf("oldest_queued_at %v, want %v", st.OldestQueuedAt, fresh.CreatedAt)
	}

	// A queued item is stopped at once, and nothing of it was acked.
	q, err := s.WorkStop(ctxBg, &store.WorkStopParams{EnvironmentID: env, WorkID: fresh.ID, At: at.Add(8 * time.Second)})
	must(t, err, "stop a queued item")
	equal(t, q.State, apitype.WorkStopped, "a queued item stops at once")
	equal(t, q.LostSeq, int64(0), "a never-acked item lost nothing")
}

// testWorkLeaseExpiry: a worker that stops heartbeating loses the item; it goes back to the queue held, with
// the session woken, until the brain resumes it; the lost worker's heartbeat fails.
func testWorkLeaseExpiry(t *testing.T, h Harness) {
	s := h.open(t)
	env := apitype.NewID(apitype.PrefixEnvironment)
	now := apitype.Now()
	sess, w := queueSession(t, s, env, now)
	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{agentMessage("a")}})
	must(t, err, "append")

	_, err = poll(s, env, "w1", "t1", 5*time.Second, now)
	must(t, err, "poll")
	_, err = s.WorkAck(ctxBg, &store.WorkAckParams{EnvironmentID: env, WorkID: w.ID, TTL: 10 * time.Second, At: now})
	must(t, err, "ack")
	hb, err := s.WorkHeartbeat(ctxBg, &store.WorkHeartbeatParams{EnvironmentID: env, WorkID: w.ID, TTL: 10 * time.Second, At: now})
	must(t, err, "heartbeat")

	_, err = claim(s, "brain", time.Minute, sess.ID)
	mustIs(t, err, store.ErrNoWork, "the session is not runnable while the lease holds")
	later := now.Add(11 * time.Second)
	_, err = s.WorkHeartbeat(ctxBg, &store.WorkHeartbeatParams{EnvironmentID: env, WorkID: w.ID, Expected: hb.LastHeartbeat,
		TTL: 10 * time.Second, At: later})
	mustIs(t, err, store.ErrConflict, "heartbeat after the lease expired")

	_, err = poll(s, env, "w2", "t2", 5*time.Second, later)
	mustIs(t, err, store.ErrNoWork, "a lost item is held for the brain")
	got, err := s.WorkGet(ctxBg, env, w.ID)
	must(t, err, "get")
	equal(t, got.State, apitype.WorkQueued, "a lost item is queued again")
	equal(t, got.Held, true, "held")
	equal(t, got.LostSeq, int64(1), "lost at the session's last event")
	equal(t, got.TokenHash, "", "the lost worker's token is gone")
	if got.AcknowledgedAt != nil || got.LatestHeartbeatAt != nil {
		t.Fatalf("a re-queued item keeps acknowledged_at %v, latest_heartbeat_at %v", got.AcknowledgedAt, got.LatestHeartbeatAt)
	}
	l, err := claim(s, "brain", time.Minute, sess.ID)
	must(t, err, "the lost lease woke the session")
	must(t, s.LeaseRelease(ctxBg, l), "release")

	must(t, s.WorkResume(ctxBg, env, w.ID), "resume")
	again, err := poll(s, env, "w2", "t2", 5*time.Second, later)
	must(t, err, "poll after resume")
	equal(t, again.ID, w.ID, "the same item is delivered again")
	equal(t, again.WorkerID, "w2", "to the new worker")

	// A worker that acks and never heartbeats loses the item when the ack's lease ends.
	_, err = s.WorkAck(ctxBg, &store.WorkAckParams{EnvironmentID: env, WorkID: w.ID, TTL: 10 * time.Second, At: later})
	must(t, err, "ack without a heartbeat")
	later = later.Add(11 * time.Second)
	_, err = poll(s, env, "w3", "t3", 5*time.Second, later)
	mustIs(t, err, store.ErrNoWork, "poll after a worker that never heartbeated")
	got, err = s.WorkGet(ctxBg, env, w.ID)
	must(t, err, "get")
	equal(t, got.State, apitype.WorkQueued, "an item whose worker never heartbeated is queued again")
	equal(t, got.Held, true, "and held for the brain")
	must(t, s.WorkResume(ctxBg, env, w.ID), "resume")
	_, err = poll(s, env, "w3", "t3", 5*time.Second, later)
	must(t, err, "poll after resume")

	// A stop requested of a holder that then vanishes ends stopped.
	_, err = s.WorkAck(ctxBg, &store.WorkAckParams{EnvironmentID: env, WorkID: w.ID, TTL: 10 * time.Second, At: later})
	must(t, err, "ack again")
	_, err = s.WorkStop(ctxBg, &store.WorkStopParams{EnvironmentID: env, WorkID: w.ID, At: later})
	must(t, err, "graceful stop")
	_, err = poll(s, env, "w3", "t3", 5*time.Second, later.Add(11*time.Second))
	mustIs(t, err, store.ErrNoWork, "poll after the stopping holder vanished")
	got, err = s.WorkGet(ctxBg, env, w.ID)
	must(t, err, "get")
	equal(t, got.State, apitype.WorkStopped, "a stopping item whose holder vanished")
}

// testWorkDurable: items and leases survive a restart of the store.
func testWorkDurable(t *testing.T, h Harness) {
	dsn := h.NewDSN(t)
	s, err := h.Open(ctxBg, dsn)
	must(t, err, "open")
	env := apitype.NewID(apitype.PrefixEnvironment)
	now := apitype.Now()
	_, w := queueSession(t, s, env, now)
	_, err = poll(s, env, "w1", "t1", 5*time.Second, now)
	must(t, err, "poll")
	_, err = s.WorkAck(ctxBg, &store.WorkAckParams{EnvironmentID: env, WorkID: w.ID, TTL: time.Minute, At: now})
	must(t, err, "ack")
	hb, err := s.WorkHeartbeat(ctxBg, &store.WorkHeartbeatParams{EnvironmentID: env, WorkID: w.ID, TTL: time.Minute, At: now})
	must(t, err, "heartbeat")
	must(t, s.Close(), "close")

	s = openDSN(t, h, dsn)
	got, err := s.WorkByTokenHash(ctxBg, apitype.HashAPIKey("t1"))
	must(t, err, "the token after a restart")
	equal(t, got.State, apitype.WorkActive, "state after a restart")
	equal(t, got.LastHeartbeat(), hb.LastHeartbeat, "last heartbeat after a restart")
	_, err = s.WorkHeartbeat(ctxBg, &store.WorkHeartbeatParams{EnvironmentID: env, WorkID: w.ID, Expected: hb.LastHeartbeat,
		TTL: time.Minute, At: now.Add(time.Second)})
	must(t, err, "the lease holds across a restart")
}

// testWorkPollRace: concurrent polls deliver an item once.
func testWorkPollRace(t *testing.T, h Harness) {
	s := h.open(t)
	env := apitype.NewID(apitype.PrefixEnvironment)
	now := apitype.Now()
	const items, pollers = 3, 8
	for range items {
		queueSession(t, s, env, now)
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i := range pollers {
		wg.Go(func() {
			w, err := poll(s, env, "w", apitype.NewID("")+string(rune('a'+i)), time.Minute, now)
			if errors.Is(err, store.ErrNoWork) {
				return
			}
			if err != nil {
				t.Errorf("poll: %v", err)
				return
			}
			mu.Lock()
			got[w.ID]++
			mu.Unlock()
		})
	}
	wg.Wait()
	equal(t, len(got), items, "distinct items delivered")
	for id, n := range got {
		equal(t, n, 1, "deliveries of "+id)
	}
}

// testWaitWork: queuing and resuming wake the environment's pollers.
func testWaitWork(t *testing.T, h Harness) {
	s := h.open(t)
	env := apitype.NewID(apitype.PrefixEnvironment)
	ch, stop := s.WaitWork(env)
	defer stop()
	queueSession(t, s, env, apitype.Now())
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("queuing an item woke no poller")
	}
}

func testEnvironmentKeys(t *testing.T, h Harness) {
	s := h.open(t)
	e := newEnvironment(base)
	must(t, s.EnvironmentCreate(ctxBg, e), "create environment")
	k := &apitype.EnvironmentKey{Type: apitype.ObjectEnvironmentKey, ID: apitype.NewID(apitype.PrefixEnvironmentKey), EnvironmentID: e.ID,
		Name: "w", Hash: apitype.HashAPIKey("secret"), Hint: "cret", CreatedAt: base}
	must(t, s.EnvironmentKeyCreate(ctxBg, k), "create key")
	dup := *k
	dup.ID = apitype.NewID(apitype.PrefixEnvironmentKey)
	mustIs(t, s.EnvironmentKeyCreate(ctxBg, &dup), store.ErrConflict, "a second key with the same hash")
	orphan := *k
	orphan.ID, orphan.Hash, orphan.EnvironmentID = apitype.NewID(apitype.PrefixEnvironmentKey), "h2", apitype.NewID(apitype.PrefixEnvironment)
	mustIs(t, s.EnvironmentKeyCreate(ctxBg, &orphan), store.ErrNotFound, "a key of an unknown environment")

	got, err := s.EnvironmentKeyByHash(ctxBg, apitype.HashAPIKey("secret"))
	must(t, err, "key by hash")
	equal(t, got.ID, k.ID, "id")
	equal(t, got.EnvironmentID, e.ID, "environment")
	sameTime(t, got.CreatedAt, base, "created_at")
	list, err := s.EnvironmentKeyList(ctxBg, e.ID)
	must(t, err, "list")
	equal(t, len(list), 1, "keys listed")

	mustIs(t, s.EnvironmentKeyRevoke(ctxBg, apitype.NewID(apitype.PrefixEnvironment), k.ID, base), store.ErrNotFound,
		"revoke through another environment")
	// An item polled with the key: its sessions token dies with the key.
	sess := createSession(t, s)
	_, _, err = s.WorkEnsure(ctxBg, &store.WorkEnsureParams{ID: apitype.NewID(apitype.PrefixWork), EnvironmentID: e.ID,
		SessionID: sess.ID, At: apitype.Now()})
	must(t, err, "ensure work")
	_, err = s.WorkPoll(ctxBg, &store.WorkPollParams{EnvironmentID: e.ID, WorkerID: "w", ReclaimAfter: time.Minute,
		TokenHash: apitype.HashAPIKey("tok"), KeyID: k.ID, At: apitype.Now()})
	must(t, err, "poll with the key")
	_, err = s.WorkByTokenHash(ctxBg, apitype.HashAPIKey("tok"))
	must(t, err, "the token before the revocation")
	must(t, s.EnvironmentKeyRevoke(ctxBg, e.ID, k.ID, base.Add(time.Second)), "revoke")
	_, err = s.WorkByTokenHash(ctxBg, apitype.HashAPIKey("tok"))
	mustIs(t, err, store.ErrNotFound, "the token of an item polled with a revoked key")
	_, err = s.EnvironmentKeyByHash(ctxBg, apitype.HashAPIKey("secret"))
	mustIs(t, err, store.ErrNotFound, "a revoked key")
	list, err = s.EnvironmentKeyList(ctxBg, e.ID)
	must(t, err, "list")
	if len(list) != 1 || list[0].RevokedAt == nil {
		t.Fatalf("revoked key listed as %+v", list)
	}
}

func testStats(t *testing.T, h Harness) {
	s := h.open(t)
	st, err := s.Stats(ctxBg)
	must(t, err, "stats of an empty store")
	equal(t, len(st.Sessions), 0, "sessions of an empty store")
	equal(t, st.WorkQueued, 0, "work queued in an empty store")

	env := apitype.NewID(apitype.PrefixEnvironment)
	now := apitype.Now()
	queueSession(t, s, env, now)
	queueSession(t, s, env, now)
	idle := createSession(t, s)
	archived := createSession(t, s)
	_, err = s.SessionUpdate(ctxBg, archived.ID, func(sess *apitype.Session) error {
		at := apitype.Now()
		sess.ArchivedAt = &at
		return nil
	})
	must(t, err, "archive")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: idle.ID, Events: []apitype.NewEvent{userMessage("hi")},
		Status: apitype.StatusRunning})
	must(t, err, "append running")
	_, err = poll(s, env, "w1", "t1", 5*time.Second, now)
	must(t, err, "poll")

	st, err = s.Stats(ctxBg)
	must(t, err, "stats")
	total := 0
	for _, n := range st.Sessions {
		total += n
	}
	equal(t, total, 3, "sessions counted (the archived one left out)")
	equal(t, st.Sessions[apitype.StatusRunning], 1, "running sessions")
	equal(t, st.Sessions[apitype.StatusIdle], 2, "idle sessions")
	equal(t, st.WorkQueued, 1, "work queued and not delivered")
}

// commitSizes records the group commits an adapter reports.
type commitSizes struct {
	mu     sync.Mutex
	writes int
	groups int
}

func (c *commitSizes) GroupCommit(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes += n
	c.groups++
}

func testGroupCommits(t *testing.T, h Harness) {
	s := h.open(t)
	co, ok := s.(store.CommitsObserved)
	if !ok {
		t.Skip("this adapter does not group writes into commits")
	}
	sess := createSession(t, s)
	obs := &commitSizes{}
	co.ObserveCommits(obs)
	const n = 40
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{userMessage("x")}})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	co.ObserveCommits(nil)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.groups == 0 || obs.groups > n || obs.writes < n {
		t.Errorf("%d concurrent appends reported as %d writes in %d groups; want at least %d writes in 1..%d groups", n, obs.writes, obs.groups, n, n)
	}
}
