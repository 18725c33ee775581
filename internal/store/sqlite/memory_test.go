package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestMemoryPlans: a memory list is one range search of memories_path in path order, and a version list one
// search of a memory_versions index in (created_at, id) descending order: neither sorts.
func TestMemoryPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	plan := func(query string, args []any) string {
		t.Helper()
		rows, err := s.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id, parent, notUsed int
			var detail string
			if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
				t.Fatal(err)
			}
			out = append(out, detail)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "; ")
	}
	for _, content := range []bool{false, true} {
		_, query, args := memoryScanQuery("memstore_x", "/a/", "/a/b.md\x01", 10, content)
		if got, want := plan(query, args), "SEARCH m USING INDEX memories_path (store_id=? AND path>? AND path<?)"; got != want {
			t.Errorf("memory scan (content %v): plan %s, want %s", content, got, want)
		}
	}
	from := time.Now()
	for _, c := range []struct {
		p    store.MemoryVersionListParams
		want string
	}{
		{store.MemoryVersionListParams{Limit: 10}, "SEARCH v USING INDEX memory_versions_created (store_id=?)"},
		{store.MemoryVersionListParams{Limit: 10, Operation: apitype.MemoryDeleted, CreatedFrom: &from,
			After: &store.Cursor{CreatedAt: from, ID: "memver_x"}}, "SEARCH v USING INDEX memory_versions_created (store_id=?"},
		{store.MemoryVersionListParams{Limit: 10, MemoryID: "mem_x"}, "SEARCH v USING INDEX memory_versions_memory (store_id=? AND memory_id=?)"},
		{store.MemoryVersionListParams{Limit: 10, SessionID: "sesn_x"}, "SEARCH v USING INDEX memory_versions_session (store_id=? AND session_id=?)"},
	} {
		c.p.StoreID = "memstore_x"
		_, query, args := memoryVersionListQuery(&c.p)
		if got := plan(query, args); !strings.HasPrefix(got, c.want) || strings.Contains(got, "TEMP B-TREE") {
			t.Errorf("%+v: plan %s, want %s (and no sort)", c.p, got, c.want)
		}
	}
}
