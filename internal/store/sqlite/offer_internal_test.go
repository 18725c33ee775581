package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestOfferedClaimRolledBack: a take whose write does not commit ends with nil on the offer (its room comes back
// to the brain), and the claim it made in the transaction is rolled back with it: the session stays runnable
// for the next claim.
func TestOfferedClaimRolledBack(t *testing.T) {
	ctx := context.Background()
	s := openPlanStore(t)
	msg, err := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock("go")}})
	if err != nil {
		t.Fatal(err)
	}
	now := apitype.Now()
	sess := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), Status: apitype.StatusIdle, CreatedAt: now, UpdatedAt: now}
	if _, _, err := s.SessionCreate(ctx, &store.SessionCreateParams{Session: sess}); err != nil {
		t.Fatal(err)
	}
	o := store.NewClaimOffer("brain", time.Minute, 1)
	defer s.OfferClaims(o)()
	o.Open(1)

	var offered offeredClaim
	failure := errors.New("a later statement failed")
	err = s.submit(ctx, &writeReq{fn: func(w *wtx) error {
		if _, _, err := appendEvents(w, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{msg}, Wake: true}, nil); err != nil {
			return err
		}
		if err := offered.claim(w, sess.ID); err != nil {
			return err
		}
		if offered.lease == nil {
			t.Error("the take claimed nothing in the transaction")
		}
		return failure
	}, after: func() { offered.committed() }, failed: offered.failed})
	if !errors.Is(err, failure) {
		t.Fatalf("write: %v, want the failure", err)
	}
	select {
	case l := <-o.C():
		if l != nil {
			t.Fatalf("a take that did not commit delivered %+v", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a take that did not commit was never ended")
	}
	if _, err := s.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "next", TTL: time.Minute, SessionID: sess.ID}); !errors.Is(err, store.ErrNoWork) {
		t.Fatalf("claim after the rolled-back append: %v, want ErrNoWork (nothing was appended, so nothing woke it)", err)
	}
	// The room given back, opened again: the append made again commits and claims, its wake-up the first.
	o.Open(1)
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{msg}, Wake: true}); err != nil {
		t.Fatal(err)
	}
	if l := <-o.C(); l == nil || l.WakeSeq != 1 {
		t.Fatalf("the append made again delivered %+v, want a lease at wake 1", l)
	}
}
