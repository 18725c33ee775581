package harness

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// storeWithSession opens a SQLite store (closed with the test) holding a session whose log is one user message
// of the text given.
func storeWithSession(t *testing.T, text string) (store.Store, *apitype.Session, apitype.NewEvent) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	msg, err := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock(text)}})
	if err != nil {
		t.Fatal(err)
	}
	now := apitype.Now()
	s := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), Status: apitype.StatusIdle, CreatedAt: now, UpdatedAt: now}
	if _, _, err := st.SessionCreate(ctx, &store.SessionCreateParams{Session: s, InitialEvents: []apitype.NewEvent{msg}}); err != nil {
		t.Fatal(err)
	}
	return st, s, msg
}

// A renewal must not count a wake-up the brain has not looked at as handled: a client event that arrives after
// the brain's look at the log keeps the session runnable after the release.
func TestRenewalKeepsUnseenWakeUps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, s, msg := storeWithSession(t, "hi")
	ls, err := st.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "a", TTL: time.Minute, SessionID: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	h := &leaseHolder{lease: *ls[0]}
	// A second message arrives after the brain's look at the log.
	if _, err := st.EventAppend(ctx, &store.EventAppendParams{SessionID: s.ID, Events: []apitype.NewEvent{msg}, Wake: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.renew(ctx, st, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.LeaseRelease(ctx, h.get()); err != nil {
		t.Fatal(err)
	}
	ls, err = st.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "b", TTL: time.Minute, SessionID: s.ID})
	if err != nil {
		t.Fatalf("after a renewal the unseen message was counted as handled: claim = %v", err)
	}
	// Released with what it saw, the second brain leaves nothing runnable.
	if err := st.LeaseRelease(ctx, ls[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "c", TTL: time.Minute, SessionID: s.ID}); !errors.Is(err, store.ErrNoWork) {
		t.Fatalf("every wake-up seen and released as handled, yet claim = %v", err)
	}
}
