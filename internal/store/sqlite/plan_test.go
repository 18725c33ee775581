package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestEventListPlan: every slice of a log is one range search, in seq order: of the primary key, or of
// events_thread for a child thread's events (never a scan of every thread's events for one thread's).
func TestEventListPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openPlanStore(t)
	from := apitype.Now()
	for _, c := range []struct {
		p    store.EventListParams
		want string
	}{
		{store.EventListParams{AfterSeq: 10, Limit: 100}, "SEARCH events USING PRIMARY KEY (session_id=? AND seq>?)"},
		{store.EventListParams{BeforeSeq: 50, Desc: true, Limit: 100, Types: []apitype.EventType{apitype.EventAgentMessage}},
			"SEARCH events USING PRIMARY KEY (session_id=? AND seq>? AND seq<?)"},
		{store.EventListParams{Scope: store.ScopeThread, Limit: 100}, "SEARCH events USING PRIMARY KEY (session_id=? AND seq>?)"},
		{store.EventListParams{Scope: store.ScopeAll, CreatedFrom: &from, Limit: 100}, "SEARCH events USING PRIMARY KEY (session_id=? AND seq>?)"},
		{store.EventListParams{Scope: store.ScopeThread, Thread: "sthr_x", AfterSeq: 10, Limit: 100},
			"SEARCH events USING INDEX events_thread (session_id=? AND thread_id=? AND seq>?)"},
		{store.EventListParams{Scope: store.ScopeThread, Thread: "sthr_x", BeforeSeq: 50, Desc: true, Limit: 100,
			Types: []apitype.EventType{apitype.EventAgentMessage}},
			"SEARCH events USING INDEX events_thread (session_id=? AND thread_id=? AND seq>? AND seq<?)"},
	} {
		c.p.SessionID = "sesn_x"
		query, args := eventListQuery(&c.p)
		if plan := queryPlan(ctx, t, s, query, args...); len(plan) != 1 || plan[0] != c.want {
			t.Errorf("%+v: plan %s, want %s (and no sort)", c.p, strings.Join(plan, "; "), c.want)
		}
	}
}

// TestWebhookPlans: the outbox's work is range searches of its indexes, in the order wanted (no sort), and the
// lookups of their rows by key.
func TestWebhookPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openPlanStore(t)
	for _, c := range []struct {
		query string
		args  []any
		want  []string
	}{
		{unfannedSQL, []any{10}, []string{"SCAN e USING INDEX webhook_events_unfanned", "CORRELATED SCALAR SUBQUERY 1",
			"SEARCH o USING PRIMARY KEY (id=?)"}},
		{dueSQL(0), []any{5, 10}, []string{
			"SEARCH d USING INDEX webhook_deliveries_due (next_attempt_at<?)",
			"SEARCH w USING INDEX sqlite_autoindex_webhook_endpoints_1 (id=?)",
			"SEARCH e USING INDEX sqlite_autoindex_webhook_events_1 (id=?)",
		}},
		{pruneDeliveriesSQL, []any{5}, []string{
			"SEARCH webhook_deliveries USING INDEX webhook_deliveries_final (last_attempt_at<?)"}},
		{pruneEventsSQL, []any{5}, []string{
			"SEARCH webhook_events USING INDEX webhook_events_fanned (fanned_out_at<?)",
			"CORRELATED SCALAR SUBQUERY 1",
			"SEARCH d USING COVERING INDEX sqlite_autoindex_webhook_deliveries_1 (event_id=?)",
			// the foreign key's cascade, which finds no delivery
			"SEARCH webhook_deliveries USING COVERING INDEX sqlite_autoindex_webhook_deliveries_1 (event_id=?)",
		}},
	} {
		if plan := queryPlan(ctx, t, s, c.query, c.args...); !slices.Equal(plan, c.want) {
			t.Errorf("%s:\nplan %s,\nwant %s", c.query, strings.Join(plan, "; "), strings.Join(c.want, "; "))
		}
	}
}

// TestLeaseClaimPlans: a claim's look and the claim search the sessions that hold no lease in the order they
// were woken and range over the lapsed leases in the order they lapsed (no sort); neither walks the sessions
// whose brains hold them, which at scale are most of the runnable ones.
func TestLeaseClaimPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openPlanStore(t)
	none := "SEARCH sessions USING INDEX sessions_claimable (lease_expires_at=?)"
	lapsed := "SEARCH sessions USING INDEX sessions_claimable (lease_expires_at<?)"
	for _, c := range []struct {
		query string
		args  []any
		want  []string
	}{
		{claimableLookSQL, []any{5, ""}, []string{"SCAN CONSTANT ROW", "SCALAR SUBQUERY 1", none, "SCALAR SUBQUERY 2", lapsed}},
		// Each part is taken in its index's order (no sort inside its co-routine); only the rows taken are sorted,
		// to merge the parts and to return them by wake-up.
		{claimableSQL, []any{5, "", 10}, []string{"CO-ROUTINE (subquery-4)", "MERGE (UNION ALL)", "LEFT",
			"CO-ROUTINE (subquery-1)", lapsed, "SCAN (subquery-1)", "USE TEMP B-TREE FOR ORDER BY", "RIGHT",
			"CO-ROUTINE (subquery-3)", none, "SCAN (subquery-3)", "USE TEMP B-TREE FOR ORDER BY",
			"SCAN (subquery-4)", "USE TEMP B-TREE FOR ORDER BY"}},
	} {
		if plan := queryPlan(ctx, t, s, c.query, c.args...); !slices.Equal(plan, c.want) {
			t.Errorf("%s:\nplan %s,\nwant %s", c.query, strings.Join(plan, "; "), strings.Join(c.want, "; "))
		}
	}
}

func openPlanStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// queryPlan returns the details of EXPLAIN QUERY PLAN of query.
func queryPlan(ctx context.Context, t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
