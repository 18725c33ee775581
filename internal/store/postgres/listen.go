package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// listener holds the Store's one LISTEN connection and feeds the notifications into the Store's hub. If the
// connection drops it reconnects and, since notifications sent meanwhile are lost, wakes every local
// subscriber and runnable waiter: they re-read, so a spurious wake-up costs nothing.
type listener struct {
	s   *Store
	cfg *pgx.ConnConfig
	pid atomic.Uint32 // backend of the current connection, 0 while disconnected

	mu      sync.Mutex
	tracked map[string]int // subscribed session ids, with their subscription counts
}

// startListener connects and listens before it returns, so that a Store is never open without hearing other
// processes' appends; then it serves notifications on its own goroutine until runCtx ends.
func startListener(ctx, runCtx context.Context, connCfg *pgx.ConnConfig, s *Store,
	wg *sync.WaitGroup) (*listener, error) {
	cfg := connCfg.Copy()
	cfg.RuntimeParams["application_name"] = "corral-listener"
	l := &listener{s: s, cfg: cfg, tracked: map[string]int{}}
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: listen: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.run(runCtx, conn)
	}()
	return l, nil
}

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, err
	}
	for _, ch := range []string{l.s.eventsChannel, l.s.runnableChannel, l.s.previewChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			_ = conn.Close(ctx)
			return nil, err
		}
	}
	l.pid.Store(conn.PgConn().PID())
	return conn, nil
}

// run dispatches notifications from conn, reconnecting with backoff whenever the connection fails.
func (l *listener) run(ctx context.Context, conn *pgx.Conn) {
	backoff := listenBackoffMin
	for {
		if conn != nil {
			l.serve(ctx, conn)
			l.pid.Store(0)
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			conn = nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		c, err := l.connect(ctx)
		if err != nil {
			backoff = min(2*backoff, listenBackoffMax)
			continue
		}
		backoff = listenBackoffMin
		conn = c
		l.wakeAll()
	}
}

// serve dispatches notifications until the connection fails or ctx ends.
func (l *listener) serve(ctx context.Context, conn *pgx.Conn) {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		switch n.Channel {
		case l.s.eventsChannel:
			for id := range strings.SplitSeq(n.Payload, ",") {
				l.s.hub.NotifySession(id)
			}
		case l.s.runnableChannel:
			l.s.hub.NotifyRunnable()
		case l.s.previewChannel:
			l.s.receivePreview(n.Payload)
		}
	}
}

// wakeAll wakes every local subscriber and runnable waiter.
func (l *listener) wakeAll() {
	l.mu.Lock()
	ids := make([]string, 0, len(l.tracked))
	for id := range l.tracked {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	for _, id := range ids {
		l.s.hub.NotifySession(id)
	}
	l.s.hub.NotifyRunnable()
}

func (l *listener) track(sessionID string) {
	l.mu.Lock()
	l.tracked[sessionID]++
	l.mu.Unlock()
}

func (l *listener) untrack(sessionID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tracked[sessionID]--; l.tracked[sessionID] <= 0 {
		delete(l.tracked, sessionID)
	}
}
