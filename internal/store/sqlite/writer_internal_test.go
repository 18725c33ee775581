package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// groupSizes records the size of each group commit, in order.
type groupSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (g *groupSizes) GroupCommit(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sizes = append(g.sizes, n)
}

// TestWriteQueue: the writes that queue while a group runs make the next group, in the order they queued; Close
// waits for the queued writes to commit and refuses later ones.
func TestWriteQueue(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "corral.db"), WithMaxBatch(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	groups := &groupSizes{}
	s.ObserveCommits(groups)

	// The first write holds its group open until release; three more (the queue's room) queue behind it, one at a
	// time.
	release, started := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the store's Close, if the test stops early
	var order []int // appended by each write's fn: the groups run one at a time
	var acked atomic.Int32
	write := func(i int, hold bool) error {
		return s.write(ctx, func(w *wtx) error {
			if hold {
				close(started)
				<-release
			}
			order = append(order, i)
			_, err := w.exec("SELECT 1")
			return err
		}, func() { acked.Add(1) })
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Go(func() { errs[0] = write(0, true) })
	<-started
	for i := 1; i < 4; i++ {
		wg.Go(func() { errs[i] = write(i, false) })
		waitUntil(t, func() bool { return len(s.reqs) == i })
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	waitUntil(t, func() bool {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.closed
	})
	if err := s.write(ctx, func(*wtx) error { return nil }, nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("a write after Close: %v, want ErrClosed", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the queued writes ran", err)
	default:
	}
	free()
	wg.Wait()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if n := acked.Load(); n != 4 {
		t.Errorf("%d writes acknowledged, want 4", n)
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(order, want) {
		t.Errorf("writes ran in the order %v, want %v", order, want)
	}
	groups.mu.Lock()
	defer groups.mu.Unlock()
	if want := []int{1, 3}; !slices.Equal(groups.sizes, want) {
		t.Errorf("group commits of %v writes, want %v (the held one, then the queue)", groups.sizes, want)
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
	}
}
