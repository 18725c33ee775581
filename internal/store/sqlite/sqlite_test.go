package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/store/storetest"
)

var harness = storetest.Harness{
	NewDSN: func(t testing.TB) string {
		return "sqlite://" + filepath.Join(t.TempDir(), "corral.db")
	},
	Open: func(ctx context.Context, dsn string) (store.Store, error) {
		return sqlite.Open(ctx, dsn)
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
