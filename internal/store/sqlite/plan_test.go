package sqlite

import (
	"context"
	"path/filepath"
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
	s, err := Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
		rows, err := s.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
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
		rows.Close()
		if len(plan) != 1 || plan[0] != c.want {
			t.Errorf("%+v: plan %s, want %s (and no sort)", c.p, strings.Join(plan, "; "), c.want)
		}
	}
}
