package sandbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// roomVolumes admits at most room attached volumes at once, refusing more with sandbox.ErrNoRoom, as a disk
// down to its reserve does.
type roomVolumes struct {
	mu       sync.Mutex
	room     int
	attached map[string]bool
}

func (v *roomVolumes) Attach(ctx context.Context, dir string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.attached) >= v.room {
		return fmt.Errorf("%w: %d volumes attached", sandbox.ErrNoRoom, len(v.attached))
	}
	v.attached[dir] = true
	return nil
}

func (v *roomVolumes) Detach(dir string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.attached, dir)
	return nil
}

func (v *roomVolumes) Remove(dir string) error { return v.Detach(dir) }

// TestPoolAdmissionReapsIdle: sessions that ran a command and went idle do not keep the volumes' admission from
// a session that needs it: the pool reaps the longest idle sandbox first
// (issue 21, item 4: seven sessions running one command each blocked every other session's tools for the idle
// period).
func TestPoolAdmissionReapsIdle(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	vols := &roomVolumes{room: 4, attached: map[string]bool{}} // two sessions: a workspace and a session directory each
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir(), IdleTimeout: time.Hour, Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ctx := context.Background()
	for _, s := range []string{"sesn_a", "sesn_b"} {
		if _, err := p.Execute(ctx, call(s)); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Both idle (for an hour, they would keep their volumes): a third session gets sesn_a's, the longest idle.
	if _, err := p.Execute(ctx, call("sesn_c")); err != nil {
		t.Fatalf("a third session while two idle sandboxes hold the room: %v", err)
	}
	if prov.live[0].closed.Load() != 1 || prov.live[1].closed.Load() != 0 {
		t.Fatalf("closed: a %d, b %d; want the longest idle (a) reaped, b kept", prov.live[0].closed.Load(), prov.live[1].closed.Load())
	}
	// And again: d takes b's room, the longest idle now.
	if _, err := p.Execute(ctx, call("sesn_d")); err != nil {
		t.Fatalf("a fourth session: %v", err)
	}
	if prov.live[1].closed.Load() != 1 || prov.live[2].closed.Load() != 0 {
		t.Fatalf("closed: b %d, c %d; want b (longer idle) reaped", prov.live[1].closed.Load(), prov.live[2].closed.Load())
	}
	if n := p.Sessions(); n != 2 {
		t.Fatalf("%d sessions hold a slot, want 2", n)
	}
}
