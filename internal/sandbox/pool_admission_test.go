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

// refVolumes is roomVolumes that counts each directory's attachments, as volume.Volumes does (a directory
// attached twice is mounted, and admitted, once).
type refVolumes struct {
	mu   sync.Mutex
	room int
	refs map[string]int
}

func (v *refVolumes) Attach(ctx context.Context, dir string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.refs[dir] == 0 && len(v.refs) >= v.room {
		return fmt.Errorf("%w: %d volumes attached", sandbox.ErrNoRoom, len(v.refs))
	}
	v.refs[dir]++
	return nil
}

func (v *refVolumes) Detach(dir string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.refs[dir]--; v.refs[dir] <= 0 {
		delete(v.refs, dir)
	}
	return nil
}

func (v *refVolumes) Remove(dir string) error { return v.Detach(dir) }

// held is how many volumes are attached, and the most attachments any one of them has.
func (v *refVolumes) held() (dirs, maxRefs int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, n := range v.refs {
		maxRefs = max(maxRefs, n)
	}
	return len(v.refs), maxRefs
}

// TestPoolAdmissionSevenIdle is issue 21's case (item 4): seven sessions each ran one command and went idle,
// their volumes filling the admission, and an eighth still gets its tools, at the cost of the longest idle.
func TestPoolAdmissionSevenIdle(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	vols := &refVolumes{room: 14, refs: map[string]int{}} // seven sessions: a workspace and a session directory each
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir(), IdleTimeout: time.Hour, Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ctx := context.Background()
	for i := range 7 {
		if _, err := p.Execute(ctx, call(fmt.Sprintf("sesn_%d", i))); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n, _ := vols.held(); n != 14 {
		t.Fatalf("%d volumes attached after seven sessions, want 14", n)
	}
	res, err := p.Execute(ctx, call("sesn_eighth"))
	if err != nil || res.IsError {
		t.Fatalf("the eighth session's tools: %v %+v", err, res)
	}
	for i, sb := range prov.live[:7] {
		want := int32(0)
		if i == 0 {
			want = 1
		}
		if sb.closed.Load() != want {
			t.Errorf("session %d closed %d times; want only the longest idle (0) reaped", i, sb.closed.Load())
		}
	}
	if n, refs := vols.held(); n != 14 || refs != 1 {
		t.Errorf("%d volumes attached (at most %d times each), want 14 once each", n, refs)
	}
}

// TestPoolAdmissionOneShare: a session holds one sandbox's worth of admission (its workspace and its session
// directory, attached once) however it is used: its sandbox dying and being replaced, its provisioning failing
// again and again, many calls at once on its first use, its slot closed and taken again. Replacing a sandbox
// never adds to what the session holds.
func TestPoolAdmissionOneShare(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	vols := &refVolumes{room: 4, refs: map[string]int{}}
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir(), IdleTimeout: time.Hour, Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ctx := context.Background()
	check := func(when string, wantDirs int) {
		t.Helper()
		if n, refs := vols.held(); n != wantDirs || refs > 1 {
			t.Fatalf("%s: %d volumes attached, one of them %d times; want %d, once each", when, n, refs, wantDirs)
		}
	}
	// Many calls at once on the session's first use: one provisioning, one attachment.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _ = p.Execute(ctx, call("sesn_a")) })
	}
	wg.Wait()
	check("eight concurrent first calls", 2)
	// Its sandbox dies three times: each replacement reuses the attachment.
	for i := range 3 {
		prov.mu.Lock()
		prov.live[len(prov.live)-1].dead.Store(true)
		prov.mu.Unlock()
		if _, err := p.Execute(ctx, call("sesn_a")); err == nil {
			t.Fatalf("death %d: no error from a dead sandbox", i)
		}
		if _, err := p.Execute(ctx, call("sesn_a")); err != nil {
			t.Fatalf("replacement %d: %v", i, err)
		}
		check(fmt.Sprintf("replacement %d", i), 2)
	}
	// Provisioning that fails again and again.
	if err := p.Close("sesn_a"); err != nil {
		t.Fatal(err)
	}
	check("closed", 0)
	prov.fail.Store(true)
	for range 3 {
		if _, err := p.Execute(ctx, call("sesn_a")); err == nil {
			t.Fatal("provisioning did not fail")
		}
		check("a failed provisioning", 2)
	}
	prov.fail.Store(false)
	if _, err := p.Execute(ctx, call("sesn_a")); err != nil {
		t.Fatal(err)
	}
	check("provisioned after failures", 2)
	// Another session still fits beside it: the first never took more than its two volumes.
	if _, err := p.Execute(ctx, call("sesn_b")); err != nil {
		t.Fatalf("a second session beside one that died, failed and was replaced: %v", err)
	}
	check("two sessions", 4)
}

// reclaimVolumes is refVolumes that takes the pool's reclaimer (sandbox.Reclaimer), as volume.Volumes does for
// the Files API's writes.
type reclaimVolumes struct {
	refVolumes
	reclaim func() bool
}

func (v *reclaimVolumes) SetReclaim(reclaim func() bool) { v.reclaim = reclaim }

// TestPoolReclaimsIdleForFiles: idle sessions do not hold the disk reserve against an active session's files
// either (issue 21 item 4): the pool gives its Volumes a reclaimer that reaps the longest idle sandbox, one per
// call, detaching its volumes, and reports when none is left.
func TestPoolReclaimsIdleForFiles(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	vols := &reclaimVolumes{refVolumes: refVolumes{room: 4, refs: map[string]int{}}}
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir(), IdleTimeout: time.Hour, Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	if vols.reclaim == nil {
		t.Fatal("NewPool gave its Volumes no reclaimer")
	}
	ctx := context.Background()
	for _, s := range []string{"sesn_a", "sesn_b"} {
		if _, err := p.Execute(ctx, call(s)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !vols.reclaim() {
		t.Fatal("no idle sandbox reclaimed")
	}
	if prov.live[0].closed.Load() != 1 || prov.live[1].closed.Load() != 0 {
		t.Fatalf("closed: a %d, b %d; want the longest idle (a) reaped", prov.live[0].closed.Load(), prov.live[1].closed.Load())
	}
	if n, _ := vols.held(); n != 2 {
		t.Errorf("%d volumes attached after a reclaim, want b's 2", n)
	}
	if !vols.reclaim() || vols.reclaim() {
		t.Error("want b reclaimed, then nothing left")
	}
	if n, _ := vols.held(); n != 0 || p.Sessions() != 0 {
		t.Errorf("%d volumes, %d sessions left", n, p.Sessions())
	}
	// The session comes back with its next call.
	if _, err := p.Execute(ctx, call("sesn_a")); err != nil {
		t.Fatal(err)
	}
}
