package harness_test

import (
	"context"
	"log"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// A brain works every runnable session of a store until it is stopped. Sessions are woken by client events
// appended with Wake (the API does that); the brain needs no other signal.
func ExampleBrain() {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "sqlite://"+filepath.Join("corral-data", "corral.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	brain, err := harness.New(harness.Config{
		Store:    st,
		Model:    anthropic.New(anthropic.Config{}), // ANTHROPIC_API_KEY from the environment
		Hands:    nil,                               // no sandbox: no built-in tools
		Logger:   slog.Default(),
		LeaseTTL: 10 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := brain.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer brain.Stop() // reschedules sessions mid-turn, releases leases, waits for the workers
}
