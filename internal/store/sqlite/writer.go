package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/corralhq/corral/internal/store"
)

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
	// failed, if set, runs instead of after when the request did not commit (fn failed, was not run, or the group
	// failed).
	failed func()
	// checksFirst: fn fails with a condition error (see isCondition) only before its first write, so it needs no
	// savepoint; any other error it returns fails the whole group.
	checksFirst bool

	err  error
	done chan struct{}
}

// isCondition reports whether err is a failed condition of a write rather than a failure of the database.
func isCondition(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost) ||
		errors.Is(err, store.ErrSessionClosed)
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

// ObserveCommits reports the size of each group the writer commits to o (nil: none).
func (s *Store) ObserveCommits(o store.CommitObserver) { s.commits.Set(o) }

var _ store.CommitsObserved = (*Store)(nil)

// runBatch runs a group of requests in one transaction and acknowledges each.
func (s *Store) runBatch(batch []*writeReq) {
	// The statements run with a context of their own: cancelling a request's context mid-statement would
	// interrupt the connection and could roll back the whole group.
	ctx := context.Background()
	err := s.runTx(ctx, batch)
	if err == nil {
		s.commits.Commit(len(batch))
	}
	s.prepareQueued(ctx)
	for _, r := range batch {
		if err != nil && r.err == nil {
			r.err = err
		}
		switch {
		case r.err == nil && r.after != nil:
			r.after()
		case r.err != nil && r.failed != nil:
			r.failed()
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

// writeResult runs fn as write does and returns its result; format and args name the write in errors, as for
// writeErr.
func writeResult[T any](ctx context.Context, s *Store, fn func(w *wtx) (T, error), format string, args ...any) (T, error) {
	var out T
	err := s.write(ctx, func(w *wtx) (err error) {
		out, err = fn(w)
		return err
	}, nil)
	if err := writeErr(err, format, args...); err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}
