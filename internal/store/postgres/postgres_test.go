package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/storetest"
)

// harness runs the conformance suite with each test in its own schema of the CORRAL_TEST_POSTGRES database.
var harness = storetest.Harness{
	NewDSN: pgtest.NewDSN,
	Open: func(ctx context.Context, dsn string) (store.Store, error) {
		return Open(ctx, dsn)
	},
}

func TestMain(m *testing.M) {
	if storetest.RunCrashChild(harness) {
		return
	}
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) { storetest.Run(t, harness) }

func BenchmarkStore(b *testing.B) { storetest.Bench(b, harness) }

// openStore opens a store on dsn, closed when the test ends.
func openStore(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func newTestSession(t testing.TB, s *Store) *apitype.Session {
	t.Helper()
	now := apitype.Now()
	sess, _, err := s.SessionCreate(context.Background(), &store.SessionCreateParams{Session: &apitype.Session{
		Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), Status: apitype.StatusIdle,
		Agent: apitype.SessionAgent{Type: apitype.ObjectAgent, ID: "agent_x", Version: 1}, CreatedAt: now, UpdatedAt: now,
	}})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return sess
}

// message is a user.message event with the text.
func message(text string) apitype.NewEvent {
	e, err := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{
		Content: []apitype.ContentBlock{apitype.TextBlock(text)},
	})
	if err != nil {
		panic(err) // a UserMessage always encodes
	}
	return e
}

// appendText appends one user message to the session, waking it if wake.
func appendText(s *Store, sessionID, text string, wake bool) error {
	_, err := s.EventAppend(context.Background(), &store.EventAppendParams{
		SessionID: sessionID, Events: []apitype.NewEvent{message(text)}, Wake: wake,
	})
	return err
}

func expectSignal(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no wake-up within 5s", what)
	}
}

func expectQuiet(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: unexpected wake-up", what)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestCrossProcessNotify checks that a second Store on the same schema, standing for another process, is woken
// by appends, wake-ups and deletions made through the first.
func TestCrossProcessNotify(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDSN(t)
	a, b := openStore(t, dsn), openStore(t, dsn)
	if !b.Capabilities().CrossProcessNotify || b.Capabilities().Name != "postgres" {
		t.Fatalf("capabilities = %+v", b.Capabilities())
	}
	ctx := context.Background()
	sess := newTestSession(t, a)

	events, stopEvents := b.Subscribe(sess.ID)
	defer stopEvents()
	runnable, stopRunnable := b.WaitRunnable()
	defer stopRunnable()
	expectQuiet(t, events, "before any append")

	if err := appendText(a, sess.ID, "hi", false); err != nil {
		t.Fatalf("append: %v", err)
	}
	expectSignal(t, events, "subscriber in the other store after an append")
	expectQuiet(t, runnable, "runnable waiter after an append without Wake")

	if err := appendText(a, sess.ID, "again", true); err != nil {
		t.Fatalf("append with wake: %v", err)
	}
	expectSignal(t, events, "subscriber after an append with Wake")
	expectSignal(t, runnable, "runnable waiter in the other store after Wake")

	other := newTestSession(t, a)
	if err := appendText(a, other.ID, "x", false); err != nil {
		t.Fatalf("append to another session: %v", err)
	}
	expectQuiet(t, events, "subscriber after an append to another session")

	if err := a.SessionDelete(ctx, sess.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	expectSignal(t, events, "subscriber after the session was deleted")
	_, err := b.EventList(ctx, &store.EventListParams{SessionID: sess.ID, Limit: 10})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("list after delete: got %v, want ErrNotFound", err)
	}
}

// TestListenerReconnects kills the LISTEN connection's backend and checks that the store reconnects, wakes its
// subscribers (they may have missed notifications) and hears later appends.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDSN(t)
	a, b := openStore(t, dsn), openStore(t, dsn)
	sess := newTestSession(t, a)
	events, stop := b.Subscribe(sess.ID)
	defer stop()

	pid := b.listener.pid.Load()
	if pid == 0 {
		t.Fatal("listener not connected after Open")
	}
	pgtest.Exec(t, pgtest.BaseDSN(t), "SELECT pg_terminate_backend($1)", int32(pid))
	expectSignal(t, events, "subscriber after the listener reconnected")
	deadline := time.Now().Add(10 * time.Second)
	for p := b.listener.pid.Load(); p == 0 || p == pid; p = b.listener.pid.Load() {
		if time.Now().After(deadline) {
			t.Fatal("listener did not reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	drainSignal(events)

	if err := appendText(a, sess.ID, "hi", false); err != nil {
		t.Fatalf("append: %v", err)
	}
	expectSignal(t, events, "subscriber after an append following the reconnect")
}

func drainSignal(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// TestLeaseClaimAcrossStores has brains in two stores claim concurrently, one or several sessions at a time,
// among sessions that hold no lease and sessions whose lease lapsed: every runnable session is claimed exactly
// once.
func TestLeaseClaimAcrossStores(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDSN(t)
	stores := []*Store{openStore(t, dsn), openStore(t, dsn)}
	ctx := context.Background()
	const sessions, lapsed = 40, 12
	for range sessions {
		sess := newTestSession(t, stores[0])
		if err := appendText(stores[0], sess.ID, "go", true); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	// A brain that stopped holds leases that lapse.
	stopped, err := stores[1].LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "stopped", TTL: 50 * time.Millisecond, Limit: lapsed})
	if err != nil || len(stopped) != lapsed {
		t.Fatalf("claim %d to let lapse: %d leases, %v", lapsed, len(stopped), err)
	}
	time.Sleep(time.Until(stopped[lapsed-1].ExpiresAt) + 20*time.Millisecond)
	var (
		mu      sync.Mutex
		claimed = map[string]string{}
		wg      sync.WaitGroup
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[i%2]
			owner := "brain-" + string(rune('a'+i))
			for {
				ls, err := s.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: owner, TTL: time.Minute, Limit: 1 + i%4})
				if errors.Is(err, store.ErrNoWork) {
					return
				}
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				for _, l := range ls {
					if prev, ok := claimed[l.SessionID]; ok {
						t.Errorf("session %s claimed by %s and %s", l.SessionID, prev, owner)
					}
					claimed[l.SessionID] = owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(claimed) != sessions {
		t.Fatalf("claimed %d sessions, want %d", len(claimed), sessions)
	}
}

// TestLeaseClaimPlan: each part of a claim is a search of its own partial index, so that a claim does not walk
// the sessions whose brains hold their leases, which at scale are most of the runnable ones (with sequential
// scans off: the test's tables are too small for the planner to prefer an index otherwise; the old claim read
// sessions_runnable, which holds those too).
func TestLeaseClaimPlan(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgtest.NewDSN(t))
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) // it only reads
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+claimSQL, "", 64)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, strings.TrimSpace(line))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	// The lapsed leases (few: brains that stopped) may be read through a bitmap and sorted; those holding no
	// lease are taken in the index's order, up to the limit.
	for _, want := range []string{"sessions_leased", "Index Cond: (lease_expires_at <= now())",
		"Index Scan using sessions_unleased on sessions"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan lacks %q:\n%s", want, text)
		}
	}
}

// TestBatchIsolatesFailures runs one group-commit batch in which one append breaks a condition and one is
// refused by the server: the others still commit, in order.
func TestBatchIsolatesFailures(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgtest.NewDSN(t))
	ctx := context.Background()
	x, y := newTestSession(t, s), newTestSession(t, s)
	broken := apitype.NewEvent{Type: apitype.EventUserMessage, Data: []byte(`{"broken"`)}
	var reqs []*appendReq
	for _, p := range []store.EventAppendParams{
		{SessionID: x.ID, Events: []apitype.NewEvent{message("1"), message("2")}},
		{SessionID: y.ID, Events: []apitype.NewEvent{message("1")}, ExpectedSeq: 5}, // wrong seq
		{SessionID: x.ID, Events: []apitype.NewEvent{message("3")}, ExpectedSeq: 3},
		{SessionID: y.ID, Events: []apitype.NewEvent{broken}}, // refused by the server
		{SessionID: y.ID, Events: []apitype.NewEvent{message("1")}, ExpectedSeq: 1},
	} {
		reqs = append(reqs, s.newAppend(ctx, &p, nil))
	}
	s.appender.run(reqs)
	got := make([]appendResult, len(reqs))
	for i, r := range reqs {
		got[i] = <-r.resp
	}
	want := []struct {
		ok      bool
		lastSeq int64
		err     bool
	}{{true, 2, false}, {false, 0, false}, {true, 3, false}, {false, 0, true}, {true, 1, false}}
	for i, w := range want {
		if got[i].ok != w.ok || (w.ok && got[i].lastSeq != w.lastSeq) || (got[i].err != nil) != w.err {
			t.Errorf("request %d: got %+v, want %+v", i, got[i], w)
		}
	}
	for _, c := range []struct {
		id   string
		want int
	}{{x.ID, 3}, {y.ID, 1}} {
		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: c.id, Limit: 10})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(evs) != c.want {
			t.Fatalf("session %s has %d events, want %d", c.id, len(evs), c.want)
		}
	}
}

// TestMigrations opens stores on one schema concurrently and then again: every migration is applied once.
func TestMigrations(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDSN(t)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
	s := openStore(t, dsn) // and once more, with nothing left to apply
	var n, maxVersion int
	err = s.pool.QueryRow(ctx, "SELECT count(*), max(version) FROM schema_migrations").Scan(&n, &maxVersion)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || maxVersion != ms[len(ms)-1].version {
		t.Fatalf("schema_migrations has %d rows up to %d, want %d up to %d", n, maxVersion, len(ms), ms[len(ms)-1].version)
	}
}

func TestOpenDSN(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDSN(t)
	u, _ := url.Parse(dsn)
	u.Scheme = "postgresql"
	s := openStore(t, u.String())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := s.SessionGet(context.Background(), "sesn_x"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("get after close: got %v, want ErrClosed", err)
	}
	if err := appendText(s, "sesn_x", "x", false); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("append after close: got %v, want ErrClosed", err)
	}
	u.Scheme = "postgres"
	q := u.Query()
	q.Set("search_path", "corral_no_such_schema")
	u.RawQuery = q.Encode()
	if s, err := Open(context.Background(), u.String()); err == nil {
		s.Close()
		t.Error("Open with a search_path naming no schema succeeded, want an error")
	}
	for _, bad := range []string{"sqlite://x.db", "host=localhost dbname=test", "mysql://localhost/test"} {
		if s, err := Open(context.Background(), bad); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", bad)
		}
	}
}

// TestRounds checks how a batch is split into statements: one request per session per round, each session's
// requests in order, and each round's session ids within one notification payload.
func TestRounds(t *testing.T) {
	t.Parallel()
	req := func(id string) *appendReq { return &appendReq{p: &store.EventAppendParams{SessionID: id}} }
	long := func(c byte) string { return strings.Repeat(string(c), 3000) }
	tests := []struct {
		name string
		ids  []string
		want [][]string
	}{
		{"distinct", []string{"a", "b", "c"}, [][]string{{"a", "b", "c"}}},
		{"repeats", []string{"a", "b", "a", "a", "c", "b"}, [][]string{{"a", "b", "c"}, {"a", "b"}, {"a"}}},
		{
			"payload", []string{long('a'), long('b'), long('c'), "d", long('e')},
			[][]string{{long('a'), long('b'), "d"}, {long('c'), long('e')}},
		},
		{
			"payload keeps order", []string{long('a'), long('b'), long('c'), long('c'), long('a')},
			[][]string{{long('a'), long('b')}, {long('c'), long('a')}, {long('c')}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reqs []*appendReq
			for _, id := range tt.ids {
				reqs = append(reqs, req(id))
			}
			var got [][]string
			for _, round := range rounds(reqs) {
				var ids []string
				for _, r := range round {
					ids = append(ids, r.p.SessionID)
				}
				got = append(got, ids)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("rounds = %d rounds %v, want %d rounds %v", len(got), abbrev(got), len(tt.want), abbrev(tt.want))
			}
		})
	}
}

func abbrev(rounds [][]string) [][]string {
	out := make([][]string, len(rounds))
	for i, r := range rounds {
		for _, id := range r {
			out[i] = append(out[i], fmt.Sprintf("%.3s(%d)", id, len(id)))
		}
	}
	return out
}

// TestCloseDuringAppends closes a store while writers append: every append either commits (and is in the log)
// or fails with ErrClosed, and Close returns with no goroutine left (goleak, in TestMain).
func TestCloseDuringAppends(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDSN(t)
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	sessions := make([]string, 8)
	for i := range sessions {
		sessions[i] = newTestSession(t, s).ID
	}
	var (
		wg    sync.WaitGroup
		acked = make([]atomic.Int64, len(sessions))
	)
	for i, id := range sessions {
		wg.Go(func() {
			for {
				evs, err := s.EventAppend(context.Background(), &store.EventAppendParams{
					SessionID: id, Events: []apitype.NewEvent{message("x")},
				})
				if errors.Is(err, store.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				acked[i].Store(evs[0].Seq)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	wg.Wait()

	r := openStore(t, dsn)
	for i, id := range sessions {
		evs, err := r.EventList(context.Background(), &store.EventListParams{SessionID: id, Desc: true, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		last := int64(0)
		if len(evs) > 0 {
			last = evs[0].Seq
		}
		if last < acked[i].Load() {
			t.Fatalf("session %d: last seq %d in the log, but seq %d was acknowledged", i, last, acked[i].Load())
		}
	}
}

// TestSynchronousCommit checks that a role with synchronous_commit off still gets durable appends, and that a
// stronger setting is kept.
func TestSynchronousCommit(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDSN(t)
	ctx := context.Background()
	for _, c := range []struct{ dsnValue, want string }{{"off", "on"}, {"remote_apply", "remote_apply"}, {"", ""}} {
		u, _ := url.Parse(dsn)
		q := u.Query()
		if c.dsnValue != "" {
			q.Set("synchronous_commit", c.dsnValue)
		}
		u.RawQuery = q.Encode()
		s := openStore(t, u.String())
		var got, server string
		err := s.pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), reset_val
			FROM pg_settings WHERE name = 'synchronous_commit'`).Scan(&got, &server)
		if err != nil {
			t.Fatal(err)
		}
		want := c.want
		if want == "" { // the server's default, unless that is off
			want = server
			if want == "off" {
				want = "on"
			}
		}
		if got != want {
			t.Errorf("dsn synchronous_commit=%q: session has %q, want %q", c.dsnValue, got, want)
		}
	}
}

// TestLongSchemaName opens two stores on a schema whose name is too long to appear whole in a channel name:
// they still wake each other.
func TestLongSchemaName(t *testing.T) {
	t.Parallel()
	base := pgtest.BaseDSN(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "corral_test_" + hex.EncodeToString(b[:]) + strings.Repeat("x", 63-12-16)
	pgtest.Exec(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { pgtest.Exec(t, base, "DROP SCHEMA "+schema+" CASCADE") })
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	a, c := openStore(t, u.String()), openStore(t, u.String())
	if len(a.eventsChannel) > 63 || len(a.runnableChannel) > 63 {
		t.Fatalf("channel names %q, %q longer than 63 bytes", a.eventsChannel, a.runnableChannel)
	}
	sess := newTestSession(t, a)
	ch, stop := c.Subscribe(sess.ID)
	defer stop()
	if err := appendText(a, sess.ID, "hi", false); err != nil {
		t.Fatalf("append: %v", err)
	}
	expectSignal(t, ch, "subscriber in the other store")
}

// TestSessionDeleteDuringAppends deletes a session while writers append to it: once they all see ErrNotFound,
// none of the session's events is left behind (the log has no foreign key to do it for us).
func TestSessionDeleteDuringAppends(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgtest.NewDSN(t))
	ctx := context.Background()
	sess := newTestSession(t, s)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				err := appendText(s, sess.ID, "x", false)
				if errors.Is(err, store.ErrNotFound) {
					return
				}
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		})
	}
	time.Sleep(150 * time.Millisecond)
	if err := s.SessionDelete(ctx, sess.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wg.Wait()
	var left int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE session_id = $1", sess.ID).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d events of the deleted session left in the log", left)
	}
	if err := s.SessionDelete(ctx, sess.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: got %v, want ErrNotFound", err)
	}
}

// TestEventListPlan checks that a slice of a long log is read by a range scan of the (session_id, seq) key (of
// events_thread for a child thread's events), both ways, and that the cost does not grow with the log (rule 6:
// the brain reads the log in slices).
func TestEventListPlan(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgtest.NewDSN(t))
	ctx := context.Background()
	var ids []string
	for range 3 {
		sess := newTestSession(t, s)
		ids = append(ids, sess.ID)
		batch := make([]apitype.NewEvent, 2000)
		for i := range batch {
			batch[i] = message("x")
		}
		for range 5 {
			if _, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: sess.ID, Events: batch}); err != nil {
				t.Fatalf("append: %v", err)
			}
		}
	}
	// A multi-agent session: its primary's events, and two children's, one in ten of them cross-posted.
	multi := newTestSession(t, s)
	for range 5 {
		batch := make([]apitype.NewEvent, 2000)
		for i := range batch {
			batch[i] = message("x")
			if i%2 == 1 {
				batch[i].Thread, batch[i].CrossPost = []string{"sthr_a", "sthr_b"}[i/2%2], i%10 == 1
			}
		}
		if _, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: multi.ID, Events: batch}); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE events"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p     store.EventListParams
		index string
	}{
		{store.EventListParams{SessionID: ids[1], AfterSeq: 5000, Limit: 100}, "events_pkey"},
		{store.EventListParams{SessionID: ids[1], BeforeSeq: 5001, Desc: true, Limit: 100}, "events_pkey"},
		{store.EventListParams{SessionID: ids[1], AfterSeq: 100, BeforeSeq: 200, Limit: 1000}, "events_pkey"},
		{store.EventListParams{SessionID: ids[1], Scope: store.ScopeThread, AfterSeq: 5000, Limit: 100}, "events_pkey"},
		{store.EventListParams{SessionID: ids[1], Scope: store.ScopeAll, AfterSeq: 5000, Limit: 100}, "events_pkey"},
		{store.EventListParams{SessionID: multi.ID, Scope: store.ScopeThread, Thread: "sthr_a", AfterSeq: 5000, Limit: 100}, "events_thread"},
		{store.EventListParams{SessionID: multi.ID, Scope: store.ScopeThread, Thread: "sthr_b", BeforeSeq: 5001, Desc: true, Limit: 100}, "events_thread"},
	} {
		p := c.p
		q := eventListQuery(&p)
		var plan []map[string]any
		if err := s.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q.sql.String(), q.args...).Scan(&plan); err != nil {
			t.Fatalf("explain: %v", err)
		}
		var (
			scans []string
			rows  float64
			walk  func(n map[string]any)
		)
		walk = func(n map[string]any) {
			typ, _ := n["Node Type"].(string)
			switch {
			case typ == "Bitmap Heap Scan": // fed by a Bitmap Index Scan, checked below
			case strings.Contains(typ, "Scan"):
				scans = append(scans, fmt.Sprintf("%s on %v", typ, n["Index Name"]))
				r, _ := n["Actual Rows"].(float64)
				rows = max(rows, r)
			}
			children, _ := n["Plans"].([]any)
			for _, c := range children {
				walk(c.(map[string]any))
			}
		}
		walk(plan[0]["Plan"].(map[string]any))
		if len(scans) != 1 || !strings.HasSuffix(scans[0], "Index Scan on "+c.index) {
			t.Errorf("%+v: scans %v, want one (bitmap) index scan on %s", p, scans, c.index)
		}
		if rows > 100 {
			t.Errorf("%+v: the scan read %v rows for a 100-event slice", p, rows)
		}
	}
}

// TestOpenErrorHidesPassword: a DSN that does not parse is refused without its password in the error.
func TestOpenErrorHidesPassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"postgres://corral:s3cret-pw@host:badport/db", "postgres://corral:s3cret-pw@host/db?sslmode=bogus"} {
		_, err := Open(context.Background(), dsn)
		if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
			t.Errorf("Open(%s): %v; want an error without the password", "postgres://corral:…", err)
		}
	}
}
