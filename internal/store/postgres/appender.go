package postgres

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/corralhq/corral/internal/store"
)

const (
	// maxBatch caps the appends that share one transaction.
	maxBatch = 128
	// batchTimeout bounds one batch, which runs detached from any single caller's context.
	batchTimeout = 30 * time.Second
)

// appender gathers concurrent appends into shared transactions: group commit, one fsync for many appends. Each
// session always goes to the same worker, so a batch never waits on another batch's row locks and a session's
// appends keep their order.
type appender struct {
	s       *Store
	shards  []chan *appendReq
	stopped chan struct{} // closed once every worker has returned
}

func startAppender(ctx context.Context, s *Store, workers int, wg *sync.WaitGroup) *appender {
	a := &appender{s: s, shards: make([]chan *appendReq, workers), stopped: make(chan struct{})}
	var workersWG sync.WaitGroup
	for i := range a.shards {
		a.shards[i] = make(chan *appendReq, maxBatch)
		workersWG.Add(1)
		wg.Add(1)
		go func(ch chan *appendReq) {
			defer wg.Done()
			defer workersWG.Done()
			a.work(ctx, ch)
		}(a.shards[i])
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		workersWG.Wait()
		close(a.stopped)
	}()
	return a
}

// do runs r and waits for its outcome. If ctx ends first the append may still commit.
func (a *appender) do(ctx context.Context, r *appendReq) appendResult {
	h := fnv.New32a()
	_, _ = h.Write([]byte(r.p.SessionID)) // hash writes never fail.
	select {
	case a.shards[h.Sum32()%uint32(len(a.shards))] <- r:
	case <-a.stopped:
		return appendResult{err: store.ErrClosed}
	case <-ctx.Done():
		return appendResult{err: ctx.Err()}
	}
	select {
	case res := <-r.resp:
		return res
	case <-a.stopped:
		// A worker answers every request it took before it returns.
		select {
		case res := <-r.resp:
			return res
		default:
			return appendResult{err: store.ErrClosed}
		}
	case <-ctx.Done():
		return appendResult{err: ctx.Err()}
	}
}

// work takes a request, gathers whatever else is already waiting, and runs them together.
func (a *appender) work(ctx context.Context, ch chan *appendReq) {
	batch := make([]*appendReq, 0, maxBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-ch:
			batch = append(batch[:0], r)
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case r := <-ch:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		a.run(batch)
		clear(batch)
	}
}

// run executes a batch and answers each request.
func (a *appender) run(batch []*appendReq) {
	live := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.resp <- appendResult{err: err}
			continue
		}
		live = append(live, r)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		a.runOne(live[0])
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	results, err := a.runBatch(ctx, live)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		for i, r := range live {
			r.resp <- results[i]
		}
	case errors.As(err, &pgErr):
		// The server refused a statement, so the whole transaction rolled back and nothing of it was written:
		// run each request alone, so that only the one at fault fails.
		for _, r := range live {
			a.runOne(r)
		}
	default:
		// The connection failed: whether the transaction committed is unknown, so do not retry.
		for _, r := range live {
			r.resp <- appendResult{err: err}
		}
	}
}

// runOne executes a single append as its own implicit transaction.
func (a *appender) runOne(r *appendReq) {
	var res appendResult
	err := a.s.pool.QueryRow(r.ctx, appendSQL, r.args...).Scan(&res.lastSeq, nil, nil)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		res.err = err
	default:
		res.ok = true
	}
	r.resp <- res
}

// runBatch executes the appends in one transaction, sent as one pipeline: one round trip and one commit.
func (a *appender) runBatch(ctx context.Context, reqs []*appendReq) ([]appendResult, error) {
	conn, err := a.s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, r := range reqs {
		b.Queue(appendSQL, r.args...)
	}
	b.Queue("COMMIT")
	results := make([]appendResult, len(reqs))
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		for i := range reqs {
			err := br.QueryRow().Scan(&results[i].lastSeq, nil, nil)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return err
			default:
				results[i].ok = true
			}
		}
		_, err := br.Exec()
		return err
	}()
	if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
		// Leave the pooled connection outside any transaction.
		if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
			_ = conn.Hijack().Close(ctx)
		}
	}
	return results, err
}
