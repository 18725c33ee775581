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
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
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

//go:embed migrations/*.sql
var migrations embed.FS

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

// migrate applies the embedded migrations not yet recorded in schema_migrations, each in its own transaction.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		base := filepath.Base(name)
		prefix, _, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(prefix)
		if err != nil {
			return fmt.Errorf("migration %s: bad version prefix", base)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", base, err)
		}
		if err := applyMigration(ctx, db, version, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", base, err)
		}
	}
	return nil
}

func applyMigration(ctx context.Context, db *sql.DB, version int, body string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, version).
		Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
		version, time.Now().UnixMicro()); err != nil {
		return err
	}
	return tx.Commit()
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

const (
	// checkpointEvery spaces the checkpoints out under a steady write load.
	checkpointEvery = 100 * time.Millisecond
	// restartWALPages: a WAL longer than this (pages) gets a RESTART checkpoint, which waits for the writer
	// between two transactions, so that the WAL cannot grow without bound under a write load that never pauses.
	restartWALPages = 16384
)

// checkpointer copies the WAL back into the database file after commits, on its own connection, so that the
// writer goroutine spends no time on it. A PASSIVE checkpoint never blocks the writer. A failed checkpoint is
// retried after the next commit; the WAL keeps every committed transaction in the meantime.
func (s *Store) checkpointer() {
	defer close(s.checkpointerDone)
	ctx := context.Background()
	for {
		select {
		case <-s.stopCheckpoints:
			return
		case <-s.checkpointNeeded:
		}
		var busy, walPages, done int
		err := s.cdb.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &walPages, &done)
		if err == nil && walPages > restartWALPages {
			_, _ = s.cdb.ExecContext(ctx, "PRAGMA wal_checkpoint(RESTART)")
		}
		select {
		case <-s.stopCheckpoints:
			return
		case <-time.After(checkpointEvery):
		}
	}
}

// writeReq is one write: fn runs in the group transaction (in a savepoint of its own when the group has others);
// after runs once the group has committed, if fn succeeded.
type writeReq struct {
	ctx   context.Context
	fn    func(w *wtx) error
	after func()
	// checksFirst: fn fails with a condition error (see isCondition) only before its first write, so it needs no
	// savepoint; any other error it returns fails the whole group.
	checksFirst bool

	err  error
	done chan struct{}
}

// isCondition reports whether err is a failed condition of a write rather than a failure of the database.
func isCondition(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost)
}

// write queues fn for the writer goroutine and waits until its transaction has committed (or fn failed). Once
// queued, a request is waited for even if ctx ends, so that a nil error always means "durable" and a non-nil
// one "not applied".
func (s *Store) write(ctx context.Context, fn func(w *wtx) error, after func()) error {
	return s.submit(ctx, &writeReq{fn: fn, after: after})
}

// submit queues r for the writer goroutine and waits for its outcome, as write does.
func (s *Store) submit(ctx context.Context, r *writeReq) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.ctx, r.done = ctx, make(chan struct{})
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	<-r.done
	return r.err
}

// writer is the goroutine that owns the write connection. It takes every queued request (up to maxBatch) and
// runs them in one transaction.
func (s *Store) writer() {
	defer close(s.writerDone)
	defer func() {
		for _, st := range s.wstmts {
			st.Close()
		}
	}()
	batch := make([]*writeReq, 0, s.cfg.maxBatch)
	for {
		r, ok := <-s.reqs
		if !ok {
			return
		}
		batch = append(batch[:0], r)
		if len(s.reqs) < s.cfg.maxBatch {
			// Let the requesters just acknowledged queue their next request, so the group grows.
			runtime.Gosched()
		}
	fill:
		for len(batch) < s.cfg.maxBatch {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.runBatch(batch)
		select {
		case s.checkpointNeeded <- struct{}{}:
		default:
		}
	}
}

// runBatch runs a group of requests in one transaction and acknowledges each.
func (s *Store) runBatch(batch []*writeReq) {
	// The statements run with a context of their own: cancelling a request's context mid-statement would
	// interrupt the connection and could roll back the whole group.
	ctx := context.Background()
	err := s.runTx(ctx, batch)
	s.prepareQueued(ctx)
	for _, r := range batch {
		if err != nil && r.err == nil {
			r.err = err
		}
		if r.err == nil && r.after != nil {
			r.after()
		}
		close(r.done)
	}
}

func (s *Store) runTx(ctx context.Context, batch []*writeReq) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	w := &wtx{ctx: ctx, s: s, tx: tx}
	defer w.closeStmts()
	// With more than one request, each runs in a savepoint so that a failed one leaves the others' writes; a
	// lone request that fails rolls the transaction back instead.
	savepoints := len(batch) > 1
	applied := 0
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		savepoint := savepoints && !r.checksFirst
		if savepoint {
			if _, err := w.exec("SAVEPOINT req"); err != nil {
				tx.Rollback()
				return fmt.Errorf("sqlite: savepoint: %w", err)
			}
		}
		r.err = runFn(r.fn, w)
		if r.err == nil {
			applied++
		} else if savepoints && !savepoint && !isCondition(r.err) {
			// The request may have written part of its changes, and there is no savepoint to undo them.
			tx.Rollback()
			return fmt.Errorf("sqlite: another write in the group failed: %w", r.err)
		}
		if !savepoint {
			continue
		}
		if r.err != nil {
			if _, err := w.exec("ROLLBACK TO req"); err != nil {
				tx.Rollback()
				return fmt.Errorf("sqlite: rollback to savepoint: %w", err)
			}
		}
		if _, err := w.exec("RELEASE req"); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: release savepoint: %w", err)
		}
	}
	if applied == 0 {
		if err := tx.Rollback(); err != nil {
			return fmt.Errorf("sqlite: rollback: %w", err)
		}
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

// runFn runs fn, turning a panic into an error so that one bad callback cannot kill the writer goroutine.
func runFn(fn func(*wtx) error, w *wtx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlite: panic in write: %v", p)
		}
	}()
	return fn(w)
}

// wtx is the group transaction as one request sees it, with statements prepared once per connection.
type wtx struct {
	ctx   context.Context
	s     *Store
	tx    *sql.Tx
	stmts map[string]*sql.Stmt // transaction-bound statements, closed with the transaction
}

// stmt returns query prepared for the transaction: from the connection's statement cache, or prepared on the
// transaction and queued for the cache (the writer connection is busy with the transaction until it ends).
func (w *wtx) stmt(query string) (*sql.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	var st *sql.Stmt
	if base, ok := w.s.wstmts[query]; ok {
		st = w.tx.StmtContext(w.ctx, base)
	} else {
		var err error
		if st, err = w.tx.PrepareContext(w.ctx, query); err != nil {
			return nil, err
		}
		w.s.toPrepare = append(w.s.toPrepare, query)
	}
	if w.stmts == nil {
		w.stmts = map[string]*sql.Stmt{}
	}
	w.stmts[query] = st
	return st, nil
}

// prepareQueued adds the statements first seen in the last transaction to the writer's cache.
func (s *Store) prepareQueued(ctx context.Context) {
	for _, q := range s.toPrepare {
		if _, ok := s.wstmts[q]; ok {
			continue
		}
		if st, err := s.wdb.PrepareContext(ctx, q); err == nil {
			s.wstmts[q] = st
		}
	}
	s.toPrepare = s.toPrepare[:0]
}

func (w *wtx) closeStmts() {
	for _, st := range w.stmts {
		st.Close()
	}
}

func (w *wtx) exec(query string, args ...any) (sql.Result, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(w.ctx, args...)
}

// execN runs query and returns the number of rows it changed.
func (w *wtx) execN(query string, args ...any) (int64, error) {
	res, err := w.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (w *wtx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(w.ctx, args...)
}

func (w *wtx) queryRow(query string, args ...any) *sql.Row {
	st, err := w.stmt(query)
	if err != nil {
		// A Row carrying the error: QueryRowContext on a one-off statement reports it at Scan.
		return w.tx.QueryRowContext(w.ctx, query, args...)
	}
	return st.QueryRowContext(w.ctx, args...)
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
