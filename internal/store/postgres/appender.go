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
	// appendWorkers is how many batches are in flight at once. Two keep the database busy, one committing
	// while the next is sent; more only contend, since a transaction that NOTIFYs holds a database-wide lock
	// from pre-commit to the end of its commit, which serialises such commits anyway (measured on 2 cores with
	// 64 sessions: 4 workers gave under half the throughput of 2, and 8 workers a fifth).
	appendWorkers = 2
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
		a.s.commits.Commit(len(live))
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

// ObserveCommits reports the size of each group of appends the appender commits to o (nil: none).
func (s *Store) ObserveCommits(o store.CommitObserver) { s.commits.Set(o) }

var _ store.CommitsObserved = (*Store)(nil)

// runOne executes a single append as its own implicit transaction.
func (a *appender) runOne(r *appendReq) {
	res := make([]appendResult, 1)
	sql, args := a.s.appendArgs([]*appendReq{r})
	rows, err := a.s.pool.Query(r.ctx, sql, args...)
	if err == nil {
		err = scanAppend(rows, res)
	}
	if err != nil {
		res[0] = appendResult{err: err}
	} else if res[0].err == nil {
		a.s.commits.Commit(1)
	}
	r.resp <- res[0]
}

// maxPayload bounds the session ids one round notifies, joined by commas: PostgreSQL's NOTIFY payload limit
// is 8000 bytes.
const maxPayload = 7900

// rounds splits requests into the statements of a batch: no round holds two requests for one session (one
// statement updates a row once), a session's later request goes in a later round, which keeps each session's
// requests in order, and each round's session ids fit one notification.
func rounds(reqs []*appendReq) [][]*appendReq {
	var (
		out   [][]*appendReq
		bytes []int
		last  = make(map[string]int, len(reqs)) // session id -> 1 + the round of its latest request
	)
	for _, r := range reqs {
		id := r.p.SessionID
		k := last[id]
		for k < len(out) && bytes[k]+len(id)+1 > maxPayload {
			k++
		}
		if k == len(out) {
			out, bytes = append(out, nil), append(bytes, 0)
		}
		out[k] = append(out[k], r)
		bytes[k] += len(id) + 1
		last[id] = k + 1
	}
	return out
}

// runBatch executes the appends in one transaction, one statement per round, sent as one pipeline: one round
// trip and one commit. Results are indexed like reqs.
func (a *appender) runBatch(ctx context.Context, reqs []*appendReq) ([]appendResult, error) {
	conn, err := a.s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()

	rs := rounds(reqs)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, round := range rs {
		sql, args := a.s.appendArgs(round)
		b.Queue(sql, args...)
	}
	b.Queue("COMMIT")
	byReq := make(map[*appendReq]appendResult, len(reqs))
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close() // after COMMIT has answered there is nothing left to read, so nothing left to fail
		if _, err := br.Exec(); err != nil {
			return err
		}
		for _, round := range rs {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			res := make([]appendResult, len(round))
			if err := scanAppend(rows, res); err != nil {
				return err
			}
			for i, r := range round {
				byReq[r] = res[i]
			}
		}
		_, err := br.Exec()
		return err
	}()
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			// Leave the pooled connection outside any transaction.
			if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
				_ = conn.Hijack().Close(ctx)
			}
		}
		return nil, err
	}
	results := make([]appendResult, len(reqs))
	for i, r := range reqs {
		results[i] = byReq[r]
	}
	return results, nil
}
