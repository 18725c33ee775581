package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// gateProvider's Provision waits for a token on release, counting the provisions running at once.
type gateProvider struct {
	fakeProvider
	release chan struct{}
	entered chan string // each provision's session, as it starts
	mu      sync.Mutex
	running int
	most    int
}

func (p *gateProvider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (sandbox.Sandbox, error) {
	p.mu.Lock()
	p.running++
	p.most = max(p.most, p.running)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.running--
		p.mu.Unlock()
	}()
	p.entered <- r.SessionID
	select {
	case <-p.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.fakeProvider.Provision(ctx, r, dirs)
}

// TestPoolMaxStarting: with MaxStarting 2, six sessions' first calls start two sandboxes at a time, the others
// waiting their turn, and every call is served; a call whose context ends while it waits fails, saying so,
// without starting a sandbox.
func TestPoolMaxStarting(t *testing.T) {
	t.Parallel()
	prov := &gateProvider{release: make(chan struct{}), entered: make(chan string, 16)}
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir(), MaxStarting: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ctx := context.Background()
	const n = 6
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := p.Execute(ctx, call(fmt.Sprintf("sess_%d", i)))
			errs <- err
		}()
	}
	for range 2 {
		<-prov.entered
	}
	// Two are starting; the other four wait. A call whose context ends meanwhile gives up its place.
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = p.Execute(wctx, call("sess_impatient"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for its turn to start (2 sandboxes start at once)") {
		t.Fatalf("a call that ran out of time waiting: err = %v, want its deadline and the wait", err)
	}
	select {
	case id := <-prov.entered:
		t.Fatalf("%s started while two others were starting", id)
	default:
	}
	for range n {
		prov.release <- struct{}{}
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := prov.provisions.Load(); got != n {
		t.Fatalf("%d sandboxes provisioned, want %d", got, n)
	}
	if prov.most != 2 {
		t.Fatalf("at most %d sandboxes started at once, want 2", prov.most)
	}
}

// TestPoolMaxStartingNegative: a negative bound is refused.
func TestPoolMaxStartingNegative(t *testing.T) {
	t.Parallel()
	if _, err := sandbox.NewPool(sandbox.PoolConfig{Provider: &fakeProvider{}, WorkspaceRoot: t.TempDir(), MaxStarting: -1}); err == nil {
		t.Fatal("MaxStarting -1 accepted")
	}
}
