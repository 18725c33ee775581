package main

import (
	"context"
	"errors"
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
	fs.StringVar(&f.data, "data", envOr("CORRAL_DATA", defaultDataDir(os.Geteuid(), os.Getenv, os.UserHomeDir)),
		"`dir` for the SQLite database and the server's own files: /var/lib/corral as root, else $XDG_DATA_HOME/corral or ~/.local/share/corral (env CORRAL_DATA)")
	urlFlag(fs, &f.db, "db", os.Getenv("CORRAL_DB"), "store `URL`: sqlite://PATH or postgres://... (default sqlite://DIR/corral.db; env CORRAL_DB)")
}

// defaultDataDir is where the data lives when neither --data nor CORRAL_DATA says: /var/lib/corral for root, the
// state of a system daemon (the FHS's place for it); for another user $XDG_DATA_HOME/corral, else
// ~/.local/share/corral (the XDG base directory spec's place for a user's data). Never a directory relative to
// where serve was started: run in a checkout, ./corral-data held the base image's Go files, which go list ./...
// then took for the module's packages. "" when there is no home directory: --data is then required.
func defaultDataDir(euid int, getenv func(string) string, home func() (string, error)) string {
	return defaultDir(euid, getenv, home, "/var/lib/corral", "XDG_DATA_HOME", ".local/share", "corral")
}

// defaultDir is a default directory of Corral's: rootDir for root; for another user rel under $xdgVar (an
// absolute path: the XDG base directory spec ignores a relative one), else under ~/homeRel; "" when there is no
// home directory.
func defaultDir(euid int, getenv func(string) string, home func() (string, error), rootDir, xdgVar, homeRel, rel string) string {
	if euid == 0 {
		return rootDir
	}
	if x := getenv(xdgVar); filepath.IsAbs(x) {
		return filepath.Join(x, rel)
	}
	if h, err := home(); err == nil && filepath.IsAbs(h) {
		return filepath.Join(h, homeRel, rel)
	}
	return ""
}

// dir is the data directory the flags select, absolute, or an error when none is set.
func (f *storeFlags) dir() (string, error) {
	if f.data == "" {
		return "", errors.New("no data directory: pass --data or set CORRAL_DATA (there is no home directory for the default)")
	}
	return filepath.Abs(f.data)
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
	if _, err := f.dir(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.data, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	return openStore(ctx, f.url())
}

// openExisting opens the store the flags select only if it exists: the commands that manage a server's store
// (keys) must not create an empty one beside it, as they would when run from another directory. Only serve
// and harness create a store. A PostgreSQL database exists before Corral does: its URL is opened as given.
func (f *storeFlags) openExisting(ctx context.Context) (store.Store, error) {
	if f.db == "" {
		if _, err := f.dir(); err != nil {
			return nil, err
		}
	}
	dbURL := f.url()
	if path, ok := sqlitePath(dbURL); ok {
		if _, err := os.Stat(path); err != nil {
			if abs, aerr := filepath.Abs(path); aerr == nil {
				path = abs
			}
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("no store at %s: point --data (or --db) at the server's store; only serve and harness create one", path)
			}
			return nil, fmt.Errorf("store %s: %w", path, err)
		}
	}
	st, err := openStore(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", redactURL(dbURL), err)
	}
	return st, nil
}

// sqlitePath returns the file of a sqlite:// store URL.
func sqlitePath(dbURL string) (string, bool) {
	if p, ok := strings.CutPrefix(dbURL, "sqlite://"); ok {
		return p, true
	}
	return "", false
}

func openStore(ctx context.Context, dbURL string) (store.Store, error) {
	switch {
	case strings.HasPrefix(dbURL, "sqlite://"):
		return sqlite.Open(ctx, dbURL)
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		return postgres.Open(ctx, dbURL)
	}
	return nil, fmt.Errorf("unsupported store URL %q: want sqlite://PATH or postgres://HOST/DB", redactURL(dbURL))
}
