package sandbox

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

type nopSandbox struct{}

func (nopSandbox) Execute(context.Context, string, string, json.RawMessage) (Result, error) {
	return Result{}, nil
}
func (nopSandbox) Close() error { return nil }

type nopProvider struct{}

func (nopProvider) Name() string               { return "nop" }
func (nopProvider) Tools() []Tool              { return nil }
func (nopProvider) Capabilities() Capabilities { return Local }
func (nopProvider) Provision(context.Context, *Recipe, HostDirs) (Sandbox, error) {
	return nopSandbox{}, nil
}

// A call that took a session's slot just before the reaper found it idle must not be handed the sandbox the
// reaper is about to close: it starts over with a new slot.
func TestReapedSlotIsNotHandedOut(t *testing.T) {
	t.Parallel()
	p, err := NewPool(PoolConfig{Provider: nopProvider{}, WorkspaceRoot: t.TempDir(), IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	call := &Call{Recipe: Recipe{SessionID: "sess_reap"}, Name: "bash", Input: json.RawMessage(`{}`)}
	if _, err := p.Execute(context.Background(), call); err != nil {
		t.Fatal(err)
	}
	r, err := p.recipe(call)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.session("sess_reap") // a call takes the slot ...
	if err != nil {
		t.Fatal(err)
	}
	reaped := p.idle(time.Now().Add(2 * time.Hour)) // ... the reaper finds it idle ...
	if len(reaped) != 1 || reaped[0] != s {
		t.Fatalf("reaped %d sessions, want the one slot", len(reaped))
	}
	if _, ok, err := p.acquire(context.Background(), s, call, &r); err != nil || ok {
		t.Errorf("acquire on a reaped slot = ok %v, err %v; want it refused (ok false)", ok, err)
	}
}

// stuckProvider's Provision of the session "sess_stuck" waits for its context; others start at once.
type stuckProvider struct{ nopProvider }

func (stuckProvider) Provision(ctx context.Context, r *Recipe, _ HostDirs) (Sandbox, error) {
	if r.SessionID == "sess_stuck" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nopSandbox{}, nil
}

// TestStuckStartGivesUpItsTurn: with one start at a time, a start that does not end gives its turn up after
// startTurn, and the next session's sandbox starts; the stuck one still ends with its call's context.
func TestStuckStartGivesUpItsTurn(t *testing.T) {
	t.Parallel()
	p, err := NewPool(PoolConfig{Provider: stuckProvider{}, WorkspaceRoot: t.TempDir(), MaxStarting: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	p.startTurn = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	stuck := make(chan error, 1)
	go func() {
		_, err := p.Execute(ctx, &Call{Recipe: Recipe{SessionID: "sess_stuck"}, Name: "bash", Input: json.RawMessage(`{}`)})
		stuck <- err
	}()
	// The other session's call waits for the stuck start's turn, at most startTurn, not for its end.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if _, err := p.Execute(wctx, &Call{Recipe: Recipe{SessionID: "sess_next"}, Name: "bash", Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatalf("the next session's call behind a stuck start: %v", err)
	}
	select {
	case err := <-stuck:
		t.Fatalf("the stuck start ended on its own: %v", err)
	default:
	}
	cancel()
	if err := <-stuck; err == nil {
		t.Fatal("the stuck start succeeded")
	}
	// Both turns are back: two more sessions start, one after the other, without waiting.
	for _, id := range []string{"sess_a", "sess_b"} {
		if _, err := p.Execute(wctx, &Call{Recipe: Recipe{SessionID: id}, Name: "bash", Input: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(p.starting); n != 0 {
		t.Fatalf("%d turns still taken after every start ended", n)
	}
}
