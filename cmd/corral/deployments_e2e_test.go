package main

import (
	"context"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// TestDeploymentScheduleAcrossHarnesses: a `* * * * *` deployment on PostgreSQL shared by `corral serve
// --brains 0` and two `corral harness` processes fires on the real clock within a minute, exactly once per
// scheduled time, and its session runs on one of the brains; the schedule moves on.
func TestDeploymentScheduleAcrossHarnesses(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDSN(t)
	model := modeltest.NewServer(t)
	key := sharedVaultKey(t)
	s := startServer(t, t.TempDir(), model, "--db", db, "--brains", "0", "--vault-key-file", key)
	for range 2 {
		startCorral(t, serverEnv(model, testKey), "corral: harness running", "harness", "--db", db, "--data", t.TempDir(),
			"--sandbox", "none", "--brains", "2", "--lease-ttl", "2s", "--poll", "200ms", "--vault-key-file", key)
	}
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "cron",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "cron"})
	if err != nil {
		t.Fatal(err)
	}
	model.Script(modeltest.Turn{Text: "Checked."}, modeltest.Turn{Text: "Checked again."})
	d, err := c.Beta.Deployments.New(ctx, anthropic.BetaDeploymentNewParams{Name: "every minute",
		Agent: anthropic.BetaDeploymentNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID,
		InitialEvents: []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "check"}}}}}},
		Schedule: anthropic.BetaManagedAgentsScheduleParams{Expression: "* * * * *", Timezone: "UTC"}})
	if err != nil {
		t.Fatal(err)
	}
	first := d.Schedule.UpcomingRunsAt[0]
	if wait := time.Until(first); wait > time.Minute || wait < 0 {
		t.Fatalf("first upcoming run %s is not within the next minute", first)
	}

	// Wait for the first time's run, then a few seconds more: three processes could have fired it.
	var runs []anthropic.BetaManagedAgentsDeploymentRun
	for {
		page, err := c.Beta.DeploymentRuns.List(ctx, anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String(d.ID)})
		if err != nil {
			t.Fatal(err)
		}
		runs = page.Data
		if len(runs) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no run %s after the scheduled time %s", time.Since(first), first)
		case <-time.After(250 * time.Millisecond):
		}
	}
	t.Logf("the scheduled time %s fired %s late", first.Format(time.TimeOnly), time.Since(first).Round(time.Millisecond))
	time.Sleep(5 * time.Second)
	page, err := c.Beta.DeploymentRuns.List(ctx, anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String(d.ID),
		TriggerType: anthropic.BetaManagedAgentsTriggerTypeSchedule})
	if err != nil {
		t.Fatal(err)
	}
	at := map[int64]int{}
	for _, r := range page.Data {
		at[r.TriggerContext.ScheduledAt.Unix()]++
		if r.SessionID == "" {
			t.Errorf("run %s has no session: %s", r.ID, r.RawJSON())
		}
	}
	if at[first.Unix()] != 1 {
		t.Fatalf("scheduled time %s fired %d times across three processes: %v", first, at[first.Unix()], at)
	}
	waitIdle(t, s.client(), page.Data[len(page.Data)-1].SessionID)
	got, err := c.Beta.Deployments.Get(ctx, d.ID, anthropic.BetaDeploymentGetParams{})
	if err != nil || got.Schedule.LastRunAt.IsZero() || !got.Schedule.UpcomingRunsAt[0].After(first) {
		t.Errorf("schedule after the run: %v %s", err, got.Schedule.RawJSON())
	}
}
