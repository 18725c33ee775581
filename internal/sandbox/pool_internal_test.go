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
