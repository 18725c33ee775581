// Package sqlite implements store.Store on SQLite (modernc.org/sqlite, pure Go): Corral's default, single-process
// backend.
//
// The database runs in WAL mode with synchronous=FULL, so an acknowledged write survives a crash of the process or
// the machine. All writes go through one connection owned by a writer goroutine, which group-commits: it runs every
// pending write request in one transaction, each in its own SAVEPOINT so that one failed condition does not fail
// the others, commits once (one fsync for the whole group), then acknowledges each request. A checkpointer
// goroutine, on a connection of its own, copies the WAL back into the database file off the writer's path. Reads
// use a separate pool of read-only connections. Wake-ups are in-process only (store.Hub):
// Capabilities().CrossProcessNotify is false.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/corralhq/corral/internal/store"
)

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*config)

type config struct {
	readers     int
	maxBatch    int
	busyTimeout time.Duration
}

// WithReaders sets the size of the read connection pool (default: max(4, GOMAXPROCS)).
func WithReaders(n int) Option { return func(c *config) { c.readers = n } }

// WithMaxBatch caps how many write requests share one transaction (default 512).
func WithMaxBatch(n int) Option { return func(c *config) { c.maxBatch = n } }

// WithBusyTimeout sets how long a connection waits for a lock held by another process (default 5s).
func WithBusyTimeout(d time.Duration) Option { return func(c *config) { c.busyTimeout = d } }

func (c *config) validate() error {
	if c.readers < 1 {
		return fmt.Errorf("readers must be >= 1, got %d", c.readers)
	}
	if c.maxBatch < 1 {
		return fmt.Errorf("max batch must be >= 1, got %d", c.maxBatch)
	}
	if c.busyTimeout < 0 {
		return fmt.Errorf("busy timeout must be >= 0, got %s", c.busyTimeout)
	}
	return nil
}

// Store is a store.Store on one SQLite database file.
type Store struct {
	rdb *sql.DB // read-only pool
	wdb *sql.DB // the single writer connection, used only by the writer goroutine (and Open)
	cdb *sql.DB // the checkpointer's connection

	hub    *store.Hub
	recent *recent // the newest events of followed sessions
	offers offers  // the claim offers of in-process brains (OfferClaims)
	cfg    config

	checkpointNeeded chan struct{} // the writer committed; coalesced
	stopCheckpoints  chan struct{}
	checkpointerDone chan struct{}

	reqs chan *writeReq

	// mu guards closed; senders hold it shared while they queue a request, so Close (exclusive) knows no
	// sender is left before it closes reqs.
	mu     sync.RWMutex
	closed bool

	writerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error

	// commits reports group commits (ObserveCommits).
	commits store.CommitHook

	// wstmts caches statements prepared on the writer connection; only the writer goroutine touches it.
	wstmts    map[string]*sql.Stmt
	toPrepare []string
	eventIDs  eventIDs // writer goroutine only
	// rstmts caches statements prepared on the read pool (query string -> *sql.Stmt).
	rstmts sync.Map
	rstmtN atomic.Int32
}

// Open opens (creating if needed) the database named by dsn, "sqlite://PATH" or a plain path, applies the
// embedded migrations and starts the writer and checkpointer goroutines. Close releases it.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	cfg := config{
		readers:     max(4, runtime.GOMAXPROCS(0)),
		maxBatch:    512,
		busyTimeout: 5 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	path, err := parseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("sqlite: create directory: %w", err)
		}
	}

	busy := strconv.FormatInt(cfg.busyTimeout.Milliseconds(), 10)
	// The writer never checkpoints (wal_autocheckpoint(0)): the checkpointer goroutine does, off its path. Its page
	// cache (32 MiB) keeps the pages that appends touch in memory.
	wdb, err := sql.Open("sqlite", path+"?_busy_timeout="+busy+"&_journal_mode=WAL&_synchronous=FULL"+
		"&_foreign_keys=1&_txlock=immediate&_pragma=wal_autocheckpoint(0)&_pragma=cache_size(-32768)")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open writer: %w", err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	if err := migrate(ctx, wdb); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := ensureDefaultWorkspace(ctx, wdb); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: the default workspace: %w", err)
	}

	rdb, err := sql.Open("sqlite", path+"?_busy_timeout="+busy+"&_foreign_keys=1&_query_only=1")
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: open readers: %w", err)
	}
	rdb.SetMaxOpenConns(cfg.readers)
	rdb.SetMaxIdleConns(cfg.readers)
	if err := rdb.PingContext(ctx); err != nil {
		rdb.Close()
		wdb.Close()
		return nil, fmt.Errorf("sqlite: open readers: %w", err)
	}

	cdb, err := sql.Open("sqlite", path+"?_busy_timeout="+busy+"&_synchronous=FULL")
	if err != nil {
		rdb.Close()
		wdb.Close()
		return nil, fmt.Errorf("sqlite: open checkpointer: %w", err)
	}
	cdb.SetMaxOpenConns(1)

	s := &Store{
		rdb:              rdb,
		wdb:              wdb,
		cdb:              cdb,
		hub:              store.NewHub(),
		recent:           newRecent(),
		cfg:              cfg,
		checkpointNeeded: make(chan struct{}, 1),
		stopCheckpoints:  make(chan struct{}),
		checkpointerDone: make(chan struct{}),
		reqs:             make(chan *writeReq, cfg.maxBatch),
		writerDone:       make(chan struct{}),
		wstmts:           map[string]*sql.Stmt{},
	}
	go s.writer()
	go s.checkpointer()
	return s, nil
}

// parseDSN returns the file path of "sqlite://PATH", "sqlite:PATH" or a plain path.
func parseDSN(dsn string) (string, error) {
	path := dsn
	if p, ok := strings.CutPrefix(dsn, "sqlite://"); ok {
		path = p
	} else if p, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		path = p
	}
	switch {
	case path == "":
		return "", errors.New("empty database path")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return "", fmt.Errorf("unsupported database path %q: use a file path", path)
	case strings.ContainsAny(path, "?#"):
		return "", fmt.Errorf("database path %q must not contain '?' or '#'", path)
	}
	return path, nil
}

// Capabilities reports that wake-ups are in-process only.
func (s *Store) Capabilities() store.Capabilities {
	return store.Capabilities{Name: "sqlite", CrossProcessNotify: false}
}

// Close stops the writer goroutine (after it has finished the requests already queued) and closes the
// connections. It is idempotent; calls after the first return the first one's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.reqs)
		s.mu.Unlock()
		<-s.writerDone
		close(s.stopCheckpoints)
		<-s.checkpointerDone

		var errs []error
		s.rstmts.Range(func(_, v any) bool {
			errs = append(errs, v.(*sql.Stmt).Close())
			return true
		})
		errs = append(errs, s.rdb.Close(), s.cdb.Close(), s.wdb.Close())
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("sqlite: close: %w", err)
		}
	})
	return s.closeErr
}

// maxReadStmts bounds the read statement cache; queries beyond it are prepared per call.
const maxReadStmts = 256

// readQuery runs a query on the read pool through a cached prepared statement.
func (s *Store) readQuery(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return s.rdb.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := s.readStmt(ctx, query)
	if err != nil || st == nil {
		return s.rdb.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// writeErr wraps the error of a write for the operation the format names ("create vault %s"), a constraint
// violation as ErrConflict; nil stays nil.
func writeErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if isConstraint(err) {
		err = store.ErrConflict
	}
	return fmt.Errorf("sqlite: "+format+": %w", append(args, err)...)
}

func (s *Store) readStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if v, ok := s.rstmts.Load(query); ok {
		return v.(*sql.Stmt), nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	if s.rstmtN.Load() >= maxReadStmts {
		return nil, nil
	}
	st, err := s.rdb.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := s.rstmts.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	s.rstmtN.Add(1)
	return st, nil
}

// readErr wraps a read error, reporting ErrClosed once the store is closed.
func (s *Store) readErr(op string, err error) error {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return fmt.Errorf("sqlite: %s: %w", op, store.ErrClosed)
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// Helpers shared by the resource files.

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullMicros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// isConstraint reports whether err is a primary key or unique constraint violation.
func isConstraint(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return true
	}
	return false
}

// limitArg is the LIMIT argument for a caller's limit: <= 0 means none.
func limitArg(n int) int { return cmp.Or(max(n, 0), -1) }
