package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// forwarder is a TCP proxy to the test database that a test can cut (every connection dropped, new ones
// refused) and restore on the same address: PostgreSQL restarting, as the store sees it.
type forwarder struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

// forwardedDSN returns a DSN of a fresh schema that reaches the database through a forwarder.
func forwardedDSN(t *testing.T) (string, *forwarder) {
	t.Helper()
	u, err := url.Parse(pgtest.NewDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	f := newForwarder(t, u.Host)
	u.Host = f.addr
	return u.String(), f
}

func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	f := &forwarder{addr: "127.0.0.1:0", target: target}
	if err := f.listen(); err != nil {
		t.Fatal(err)
	}
	f.addr = f.ln.Addr().String()
	t.Cleanup(f.cut)
	return f
}

func (f *forwarder) listen() error {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return nil
}

// cut drops every connection and stops listening: connecting is refused.
func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// TestUnavailable: while the database is out of reach (connections dropped, new ones refused), the store's reads
// and appends fail with errors that store.IsUnavailable recognizes, those mapped by the adapter wrapping
// store.ErrUnavailable; once the database is back, the same store works again without being reopened. What
// PostgreSQL answers while it restarts is recognized, and a refusal of the operation is not.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	dsn, f := forwardedDSN(t)
	s := openStore(t, dsn)
	sess := newTestSession(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	f.cut()
	if _, err := s.SessionGet(ctx, sess.ID); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("SessionGet with the database out of reach: %v, want ErrUnavailable", err)
	}
	if err := appendText(s, sess.ID, "lost?", false); !store.IsUnavailable(s, err) {
		t.Errorf("an append with the database out of reach: %v, want an unavailable error", err)
	}
	if store.IsUnavailable(s, store.ErrNotFound) || store.IsUnavailable(s, errors.New("syntax error")) {
		t.Error("IsUnavailable recognizes errors that are not about reaching the database")
	}

	if err := f.listen(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionGet(ctx, sess.ID); err != nil {
		t.Fatalf("SessionGet once the database is back: %v", err)
	}
	if err := appendText(s, sess.ID, "after", false); err != nil {
		t.Fatalf("an append once the database is back: %v", err)
	}

	// What PostgreSQL answers while it shuts down or starts (a restart) is recognized too.
	for _, code := range []string{"57P01", "57P03", "08006"} {
		if !s.Unreachable(fmt.Errorf("query: %w", &pgconn.PgError{Code: code})) {
			t.Errorf("SQLSTATE %s is not recognized as unavailable", code)
		}
	}
	if s.Unreachable(&pgconn.PgError{Code: "23505"}) {
		t.Error("a unique violation is recognized as unavailable")
	}
}

// TestOpenWaitsForTheDatabase: Open, started while the database cannot be reached, waits for it and succeeds once
// it is back, instead of failing (a process started during an outage comes up with the database).
func TestOpenWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	dsn, f := forwardedDSN(t)
	f.cut()
	back := time.AfterFunc(1500*time.Millisecond, func() {
		if err := f.listen(); err != nil {
			t.Error(err)
		}
	})
	defer back.Stop()
	start := time.Now()
	s := openStore(t, dsn)
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("Open returned after %v, before the database was back", waited)
	}
	if _, err := s.SessionGet(context.Background(), "sesn_x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SessionGet after Open waited: %v, want ErrNotFound", err)
	}
}
