package postgres_test

import (
	"context"
	"log"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
)

// A brain in one process claims a session that the API, in another, woke with a user message. The two need
// nothing in common but the database: the append NOTIFYs, and every Store's WaitRunnable hears it.
func ExampleOpen() {
	ctx := context.Background()
	s, err := postgres.Open(ctx, "postgres://corral@db.internal:5432/corral?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	runnable, stop := s.WaitRunnable()
	defer stop()
	for {
		leases, err := s.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "brain-1", TTL: 30 * time.Second})
		if err == nil {
			lease := leases[0]
			// The newest event; a real brain reads the slices it needs to build the model's context.
			last, err := s.EventList(ctx, &store.EventListParams{SessionID: lease.SessionID, Desc: true, Limit: 1})
			if err != nil {
				log.Fatal(err)
			}
			next := int64(1)
			if len(last) > 0 {
				next = last[0].Seq + 1
			}
			reply, _ := apitype.MakeEvent(apitype.EventAgentMessage, apitype.AgentMessage{
				Content: []apitype.ContentBlock{apitype.TextBlock("on it")},
			})
			// Fenced: fails with store.ErrLeaseLost or store.ErrConflict if another brain took over.
			if _, err := s.EventAppend(ctx, &store.EventAppendParams{
				SessionID: lease.SessionID, Lease: lease, ExpectedSeq: next, Events: []apitype.NewEvent{reply},
			}); err != nil {
				log.Print(err)
			}
			if err := s.LeaseRelease(ctx, lease); err != nil {
				log.Print(err)
			}
			continue
		}
		select {
		case <-runnable:
		case <-time.After(5 * time.Second): // LISTEN/NOTIFY wakes us; polling is the fallback
		}
	}
}
