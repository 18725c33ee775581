// Package postgres implements store.Store on PostgreSQL with pgx: resources as JSON documents beside indexed
// columns, each session's log keyed by (session_id, seq), leases claimed with FOR UPDATE SKIP LOCKED, and
// wake-ups carried across processes by LISTEN/NOTIFY.
//
// Appends from concurrent callers are gathered into shared transactions (group commit); each is still
// acknowledged only after its transaction has committed with synchronous_commit on.
//
// The tables live in the first schema of the connection's search_path (set it in the URL:
// ?search_path=corral); migrations are applied at Open under an advisory lock. Each Store holds one dedicated
// connection for LISTEN, so a pooler in front of the database must give it a session (PgBouncer's session mode,
// not transaction mode).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/corralhq/corral/internal/store"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store backed by PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	hub  *store.Hub

	// NOTIFY channels, named for the schema so that installations sharing a database do not wake each other.
	eventsChannel   string
	runnableChannel string
	previewChannel  string
	// origin tags this Store's preview notifications, which its listener skips: they were delivered locally.
	origin string

	appender *appender
	listener *listener
	// commits reports group commits of appends (ObserveCommits).
	commits store.CommitHook

	closed    atomic.Bool
	closeOnce sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// Open connects to the database at dsn (a postgres:// or postgresql:// URL; pgx pool parameters such as
// pool_max_conns are accepted), applies pending migrations and starts listening for wake-ups.
func Open(ctx context.Context, dsn string) (*Store, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included: keep only its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("postgres: dsn scheme %q: want postgres:// or postgresql://", u.Scheme)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	if u.Query().Get("pool_max_conns") == "" {
		// Appends are batched, so a few connections carry many sessions; the rest serve reads.
		cfg.MaxConns = max(cfg.MaxConns, 8)
	}
	// An append is acknowledged only once it is durable: turn synchronous_commit on where the server or the
	// role has it off, and leave stronger settings (remote_write, remote_apply) alone.
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT set_config('synchronous_commit', 'on', false)
			WHERE current_setting('synchronous_commit') = 'off'`)
		return err
	}

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{pool: pool, hub: store.NewHub()}
	if err := s.init(ctx, cfg.ConnConfig); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// prepare reads the schema, applies the migrations and writes the default workspace: what Open does before it
// starts listening. It is idempotent.
func (s *Store) prepare(ctx context.Context) (string, error) {
	var schema *string
	if err := s.pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return "", fmt.Errorf("postgres: current schema: %w", err)
	}
	if schema == nil {
		return "", errors.New("postgres: no schema: the search_path names no existing schema")
	}
	if err := migrate(ctx, s.pool, *schema); err != nil {
		return "", err
	}
	return *schema, s.ensureDefaultWorkspace(ctx)
}

// openWait is how long Open waits for a database it cannot reach (starting, restarting, failing over) before it
// gives up: a process started during an outage comes up when the database does, instead of exiting.
const openWait = time.Minute

func (s *Store) init(ctx context.Context, connCfg *pgx.ConnConfig) error {
	deadline := time.Now().Add(openWait)
	schema, err := s.prepare(ctx)
	for err != nil && s.Unreachable(err) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
		schema, err = s.prepare(ctx)
	}
	if err != nil {
		return err
	}
	s.eventsChannel = channelName("corral_events", schema)
	s.runnableChannel = channelName("corral_runnable", schema)
	s.previewChannel = channelName("corral_preview", schema)
	s.origin = newToken()[:12]

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	l, err := startListener(ctx, runCtx, connCfg, s, &s.wg)
	if err != nil {
		cancel()
		return err
	}
	s.listener = l
	s.appender = startAppender(runCtx, s, appendWorkers, &s.wg)
	return nil
}

// channelName names a NOTIFY channel for a schema. Channel names are identifiers, at most 63 bytes: a schema
// name too long to fit is replaced by its hash.
func channelName(kind, schema string) string {
	if name := kind + "." + schema; len(name) <= 63 {
		return name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema)) // hash writes never fail.
	return fmt.Sprintf("%s.%016x", kind, h.Sum64())
}

// Capabilities reports that subscriptions see appends made by other processes.
func (s *Store) Capabilities() store.Capabilities {
	return store.Capabilities{Name: "postgres", CrossProcessNotify: true}
}

// Close stops the store's goroutines, waits for them and closes its connections. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.cancel()
		s.wg.Wait()
		s.pool.Close()
	})
	return nil
}

// check returns ErrClosed once the store is closed.
func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// inTx runs fn in a transaction, committing if it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	if err := s.check(); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// dbErr maps driver errors to the port's sentinels and adds context. A driver error after Close (an operation
// that began as the store closed) is also ErrClosed.
func (s *Store) dbErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict),
		errors.Is(err, store.ErrLeaseLost), errors.Is(err, store.ErrNoWork), errors.Is(err, store.ErrClosed):
		return fmt.Errorf("%s: %w", op, err)
	case s.closed.Load():
		return fmt.Errorf("%s: %w: %w", op, store.ErrClosed, err)
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		return fmt.Errorf("%s: %w: %s", op, store.ErrConflict, pgErr.ConstraintName)
	case s.Unreachable(err):
		return fmt.Errorf("%s: %w: %w", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Unreachable implements store.Reachability: err says PostgreSQL could not be reached or dropped the connection
// (it is restarting or shutting down, refuses connections, or the network failed), rather than refusing the
// operation.
func (s *Store) Unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// connection_exception, admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
		return strings.HasPrefix(pgErr.Code, "08") || slices.Contains([]string{"57P01", "57P02", "57P03", "53300"}, pgErr.Code)
	}
	var connectErr *pgconn.ConnectError
	var netErr *net.OpError
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || pgconn.SafeToRetry(err)
}

// utc returns t in UTC, or nil.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// txResult runs fn in a transaction, as inTx does, and returns its result; op names it in errors.
func txResult[T any](ctx context.Context, s *Store, op string, fn func(pgx.Tx) (T, error)) (T, error) {
	var out T
	err := s.inTx(ctx, func(tx pgx.Tx) (err error) {
		out, err = fn(tx)
		return err
	})
	if err != nil {
		var zero T
		return zero, s.dbErr(op, err)
	}
	return out, nil
}
