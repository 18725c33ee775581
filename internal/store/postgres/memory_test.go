package postgres

import (
	"context"
	"testing"

	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// TestMemoryPathCollation: memory paths compare and order by their bytes whatever the database's default
// collation (the conformance suite's byte-order listing cannot tell on a database whose default is C.UTF-8).
func TestMemoryPathCollation(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgtest.NewDSN(t))
	for _, table := range []string{"memories", "memory_versions"} {
		var collation string
		if err := s.pool.QueryRow(context.Background(), `SELECT coalesce(collation_name, '') FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1 AND column_name = 'path'`, table).Scan(&collation); err != nil {
			t.Fatalf("read the collation of %s.path: %v", table, err)
		}
		if collation != "C" {
			t.Fatalf("%s.path has collation %q, want C", table, collation)
		}
	}
}
