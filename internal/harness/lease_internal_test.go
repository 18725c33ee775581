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

// A background renewal must not count a wake-up the brain has not looked at as handled: a client event that
// arrives after the brain's last look keeps the session runnable after the release. Only a renewal followed
// by a fresh look (refreshWake) advances WakeSeq.
func TestBackgroundRenewalKeepsUnseenWakeUps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	msg, err := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	newSession := func() string {
		now := apitype.Now()
		s := &apitype.Session{Type: "session", ID: apitype.NewID(apitype.PrefixSession), Status: apitype.StatusIdle, CreatedAt: now, UpdatedAt: now}
		if _, _, err := st.SessionCreate(ctx, &store.SessionCreateParams{Session: s, InitialEvents: []apitype.NewEvent{msg}}); err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	for _, refreshWake := range []bool{false, true} {
		id := newSession()
		l, err := st.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "a", TTL: time.Minute, SessionID: id})
		if err != nil {
			t.Fatal(err)
		}
		h := &leaseHolder{lease: *l}
		// A second message arrives after the brain's last look at the log.
		if _, err := st.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Events: []apitype.NewEvent{msg}, Wake: true}); err != nil {
			t.Fatal(err)
		}
		if err := h.renew(ctx, st, time.Minute, refreshWake); err != nil {
			t.Fatal(err)
		}
		if err := st.LeaseRelease(ctx, h.get()); err != nil {
			t.Fatal(err)
		}
		_, err = st.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "b", TTL: time.Minute, SessionID: id})
		switch {
		case !refreshWake && err != nil:
			t.Errorf("after a background renewal the unseen message was counted as handled: claim = %v", err)
		case refreshWake && !errors.Is(err, store.ErrNoWork):
			t.Errorf("after a renewal with a fresh look, the session is still runnable: claim = %v", err)
		}
	}
}
