package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

func appendIdle(ctx context.Context, st store.Store, sessionID string) {
	ev, _ := apitype.MakeEvent(apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}})
	if _, err := st.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID, Events: []apitype.NewEvent{ev}}); err != nil {
		log.Fatal(err)
	}
}

// A session from creation to the end of its turn: the events are followed from the start of the log
// (LastEventID "0"), so none is missed however fast the turn goes. Here the test plays the brain.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "corral-example-")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	a, err := api.New(api.Config{Store: st, Keys: &api.KeyAuth{Static: "key", Store: st}})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	c, err := client.New(client.Config{BaseURL: srv.URL, APIKey: "key"})
	if err != nil {
		log.Fatal(err)
	}
	agent, err := c.AgentCreate(ctx, &client.AgentCreateParams{Name: "helper", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}})
	if err != nil {
		log.Fatal(err)
	}
	env, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "default", Config: apitype.EnvConfig{Type: "cloud"}})
	if err != nil {
		log.Fatal(err)
	}
	sess, err := c.SessionCreate(ctx, &client.SessionCreateParams{
		Agent: client.AgentRef{ID: agent.ID}, EnvironmentID: env.ID,
		InitialEvents: []apitype.NewEvent{client.UserMessage("Hello.")},
	})
	if err != nil {
		log.Fatal(err)
	}
	appendIdle(ctx, st, sess.ID) // what a brain appends when its turn ends

	err = c.Follow(ctx, sess.ID, &client.StreamParams{LastEventID: "0"}, func(ev *client.Event) bool {
		fmt.Println(ev.Type)
		return !ev.TurnOver()
	})
	if _, err := c.SessionGet(ctx, "sesn_missing"); client.IsNotFound(err) {
		fmt.Println("not found:", err.(*client.Error).Type)
	}
	fmt.Println("follow:", err)
	// Output:
	// user.message
	// session.status_idle
	// not found: not_found_error
	// follow: <nil>
}
