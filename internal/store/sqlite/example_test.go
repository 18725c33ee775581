package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// A client appends a user message (waking the session) and a brain claims the session, reads the log from where
// it stopped and appends its answer under its lease.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "corral-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	s, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		panic(err)
	}
	defer s.Close()

	// The API: create a session whose first event is the user's message.
	hello, _ := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{
		Content: []apitype.ContentBlock{apitype.TextBlock("Hello")},
	})
	sess, _, err := s.SessionCreate(ctx, &store.SessionCreateParams{
		Session:       &apitype.Session{ID: apitype.NewID(apitype.PrefixSession), CreatedAt: apitype.Now()},
		InitialEvents: []apitype.NewEvent{hello},
	})
	if err != nil {
		panic(err)
	}

	// A brain: claim the runnable session, read the log, answer, release.
	leases, err := s.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "brain-1", TTL: time.Minute})
	if err != nil {
		panic(err)
	}
	lease := leases[0]
	events, err := s.EventList(ctx, &store.EventListParams{SessionID: sess.ID, AfterSeq: 0, Limit: 100})
	if err != nil {
		panic(err)
	}
	answer, _ := apitype.MakeEvent(apitype.EventAgentMessage, apitype.AgentMessage{
		Content: []apitype.ContentBlock{apitype.TextBlock("Hi!")},
	})
	appended, err := s.EventAppend(ctx, &store.EventAppendParams{
		SessionID:   sess.ID,
		Lease:       lease,
		ExpectedSeq: events[len(events)-1].Seq + 1,
		Events:      []apitype.NewEvent{answer},
	})
	if err != nil {
		panic(err)
	}
	if err := s.LeaseRelease(ctx, lease); err != nil {
		panic(err)
	}
	fmt.Println(events[0].Seq, events[0].Type)
	fmt.Println(appended[0].Seq, appended[0].Type)
	// Output:
	// 1 user.message
	// 2 agent.message
}
