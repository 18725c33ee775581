package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// Serve the API over a SQLite store and use it with the official SDK, changing only the base URL.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "corral-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	srv, err := api.New(api.Config{
		Store:  st,
		Logger: slog.New(slog.DiscardHandler),
		// The static key would come from CORRAL_API_KEY; keys minted into the store work as well.
		Keys: &api.KeyAuth{Static: "sk-example", Store: st},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(ts.URL),
		option.WithAPIKey("sk-example"), option.WithHTTPClient(ts.Client()))
	agent, err := client.Beta.Agents.New(context.Background(), anthropic.BetaAgentNewParams{
		Name:  "helper",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-6"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(agent.Name, agent.Version, agent.Model.Effort.Type)
	// Output: helper 1 high
}
