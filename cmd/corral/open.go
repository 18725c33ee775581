package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// storeFlags adds --data and --db to a flag set.
type storeFlags struct {
	data string
	db   string
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.data, "data", envOr("CORRAL_DATA", "./corral-data"), "`dir` for the SQLite database and the server's own files (env CORRAL_DATA)")
	fs.StringVar(&f.db, "db", os.Getenv("CORRAL_DB"), "store `URL`: sqlite://PATH or postgres://... (default sqlite://DIR/corral.db; env CORRAL_DB)")
}

// url is the store URL the flags select.
func (f *storeFlags) url() string {
	if f.db != "" {
		return f.db
	}
	return "sqlite://" + filepath.Join(f.data, "corral.db")
}

// open creates the data directory and opens the store the URL's scheme picks.
func (f *storeFlags) open(ctx context.Context) (store.Store, error) {
	if err := os.MkdirAll(f.data, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	return openStore(ctx, f.url())
}

func openStore(ctx context.Context, dbURL string) (store.Store, error) {
	switch {
	case strings.HasPrefix(dbURL, "sqlite://"):
		return sqlite.Open(ctx, dbURL)
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		return postgres.Open(ctx, dbURL)
	}
	return nil, fmt.Errorf("unsupported store URL %q: want sqlite://PATH or postgres://HOST/DB", dbURL)
}
