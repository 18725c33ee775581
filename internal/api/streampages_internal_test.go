package api

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// gatedStore counts EventList calls, and holds the first one it is told to until released.
type gatedStore struct {
	store.Store
	lists   atomic.Int64
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedStore) EventList(ctx context.Context, p *store.EventListParams) ([]apitype.Event, error) {
	g.lists.Add(1)
	if g.hold.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Store.EventList(ctx, p)
}

func openGated(t *testing.T) (*gatedStore, string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sess, _, err := st.SessionCreate(context.Background(), &store.SessionCreateParams{Session: &apitype.Session{
		Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), Status: apitype.StatusIdle,
		CreatedAt: apitype.Now(), UpdatedAt: apitype.Now(),
		Agent: apitype.SessionAgent{Type: apitype.ObjectAgent, ID: "agent_x", Version: 1, Name: "a"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &gatedStore{Store: st, entered: make(chan struct{}), release: make(chan struct{})}, sess.ID
}

func say(t *testing.T, st store.Store, sessionID, text string) {
	t.Helper()
	_, err := st.EventAppend(context.Background(), &store.EventAppendParams{SessionID: sessionID, Events: []apitype.NewEvent{{
		Type: apitype.EventUserMessage, Data: []byte(`{"content":[{"type":"text","text":"` + text + `"}]}`)}}})
	if err != nil {
		t.Fatal(err)
	}
}

func hasText(page *streamPage, text string) bool {
	for _, ev := range page.events {
		if bytes.Contains(ev.frame, []byte(text)) {
			return true
		}
	}
	return false
}

// Streams at the same place share one read and one encoding of the page; a stream woken after a read began
// does not take that read's page, which may lack the event it was woken for, but reads again.
func TestStreamPagesShareOnlyReadsAfterTheWake(t *testing.T) {
	t.Parallel()
	st, id := openGated(t)
	wake, stop := st.Subscribe(id)
	defer stop()
	var pages streamPages
	pages.open(id)
	k := pageKey{after: 0, limit: 10}

	// A first stream's read is held in the store after it began; an event is appended meanwhile.
	st.hold.Store(true)
	var leader *streamPage
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		if leader, err = pages.read(context.Background(), st, id, k); err != nil {
			t.Error(err)
		}
	})
	<-st.entered
	// Streams woken before nothing new: they join the held read (no read of their own).
	joined := make([]*streamPage, 3)
	for i := range joined {
		wg.Go(func() {
			var err error
			if joined[i], err = pages.read(context.Background(), st, id, k); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, func() bool {
		pages.mu.Lock()
		defer pages.mu.Unlock()
		r := pages.sessions[id].reads[k]
		return r != nil && r.joined == len(joined)
	})
	if n := st.lists.Load(); n != 1 {
		t.Fatalf("%d reads while one was in flight, want the joiners to share it", n)
	}

	say(t, st, id, "after-the-read-began")
	<-wake
	// A stream woken by that append reads on its own, and sees the event.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	late, err := pages.read(ctx, st, id, k)
	if err != nil {
		close(st.release)
		t.Fatalf("the stream woken by the append: %v (it waited for the held read)", err)
	}
	if !hasText(late, "after-the-read-began") {
		t.Fatalf("the stream woken by the append read %d events without it", len(late.events))
	}
	if n := st.lists.Load(); n != 2 {
		t.Fatalf("%d reads, want 2: the woken stream must not join the read that began before its wake-up", n)
	}
	close(st.release)
	wg.Wait()
	for i, p := range joined {
		if p != leader {
			t.Errorf("joiner %d got its own page, not the shared one", i)
		}
	}

	// A stream the scheduler runs after the read ended, with no wake-up since, takes the kept page; one
	// woken by a new append reads again.
	lists := st.lists.Load()
	again, err := pages.read(context.Background(), st, id, k)
	if err != nil || again != late {
		t.Fatalf("a stream after the read: page %p, err %v; want the kept page %p", again, err, late)
	}
	say(t, st, id, "later")
	<-wake
	fresh, err := pages.read(context.Background(), st, id, k)
	if err != nil || !hasText(fresh, "later") || st.lists.Load() != lists+1 {
		t.Fatalf("a stream woken by a later append: err %v, %d reads (want %d), has the event: %v", err,
			st.lists.Load(), lists+1, err == nil && hasText(fresh, "later"))
	}
	pages.mu.Lock()
	kept := len(pages.sessions[id].reads)
	pages.mu.Unlock()
	if kept != 1 {
		t.Errorf("%d pages kept for the session, want its latest only", kept)
	}
	pages.close(id)
	pages.mu.Lock()
	left := len(pages.sessions)
	pages.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sessions' pages kept after their last stream closed", left)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
	}
}
