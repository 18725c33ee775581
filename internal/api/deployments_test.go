package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// userMessage is a deployment's initial user.message.
func deplUserMessage(text string) anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion {
	return anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
		Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}}}}}
}

func newDeployment(ctx context.Context, t *testing.T, c anthropic.Client, agentID, envID string, schedule *anthropic.BetaManagedAgentsScheduleParams) *anthropic.BetaManagedAgentsDeployment {
	t.Helper()
	p := anthropic.BetaDeploymentNewParams{Name: "nightly triage",
		Agent:         anthropic.BetaDeploymentNewParamsAgentUnion{OfString: anthropic.String(agentID)},
		EnvironmentID: envID, InitialEvents: []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{deplUserMessage("triage the queue")}}
	if schedule != nil {
		p.Schedule = *schedule
	}
	d, err := c.Beta.Deployments.New(ctx, p)
	if err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	return d
}

// TestDeploymentsThroughSDK: the deployment endpoints through the official SDK: create with a schedule whose
// upcoming runs follow its timezone, a manual run that creates a session with the initial events, the runs'
// list and its filters, update, pause and unpause, a run error that pauses the deployment, archive.
func TestDeploymentsThroughSDK(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	c := h.client

	d := newDeployment(ctx, t, c, agentID, envID, &anthropic.BetaManagedAgentsScheduleParams{Expression: "0 9 * * 1-5", Timezone: "Europe/Paris"})
	if d.Status != anthropic.BetaManagedAgentsDeploymentStatusActive || d.Agent.ID != agentID || d.Agent.Version != 1 ||
		!strings.HasPrefix(d.ID, "depl_") || len(d.Schedule.UpcomingRunsAt) != 5 || d.JSON.PausedReason.Raw() != "null" {
		t.Fatalf("created %s", d.RawJSON())
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	for _, at := range d.Schedule.UpcomingRunsAt {
		if l := at.In(paris); l.Hour() != 9 || l.Minute() != 0 || l.Weekday() == time.Saturday || l.Weekday() == time.Sunday {
			t.Errorf("upcoming run %s is not 09:00 on a weekday in Paris", l)
		}
	}

	// A manual run: a session of the agent's latest version with the initial events, made at once.
	run, err := c.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil {
		t.Fatal(err)
	}
	if run.SessionID == "" || run.JSON.Error.Raw() != "null" || run.TriggerContext.Type != "manual" || run.DeploymentID != d.ID {
		t.Fatalf("manual run %s", run.RawJSON())
	}
	sess, err := c.Beta.Sessions.Get(ctx, run.SessionID, anthropic.BetaSessionGetParams{})
	if err != nil || sess.Agent.ID != agentID || sess.EnvironmentID != envID {
		t.Fatalf("the run's session: %v %s", err, sess.RawJSON())
	}
	if !strings.Contains(sess.RawJSON(), `"deployment_id":"`+d.ID+`"`) {
		t.Errorf("the run's session does not name its deployment: %s", sess.RawJSON())
	}
	evs, err := h.store.EventList(ctx, &store.EventListParams{SessionID: run.SessionID, Limit: 10})
	if err != nil || len(evs) != 1 || evs[0].Type != apitype.EventUserMessage || !strings.Contains(string(evs[0].Data), "triage the queue") {
		t.Fatalf("the session's log: %v %v", err, evs)
	}
	sessions, err := c.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{DeploymentID: anthropic.String(d.ID)})
	if err != nil || len(sessions.Data) != 1 || sessions.Data[0].ID != run.SessionID {
		t.Fatalf("sessions of the deployment: %v %+v", err, sessions)
	}
	got, err := c.Beta.DeploymentRuns.Get(ctx, run.ID, anthropic.BetaDeploymentRunGetParams{})
	if err != nil || got.SessionID != run.SessionID {
		t.Fatalf("get run: %v %s", err, got.RawJSON())
	}

	// The runs' list and its filters.
	list := func(p anthropic.BetaDeploymentRunListParams) int {
		t.Helper()
		page, err := c.Beta.DeploymentRuns.List(ctx, p)
		if err != nil {
			t.Fatalf("list runs %+v: %v", p, err)
		}
		return len(page.Data)
	}
	if n := list(anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String(d.ID)}); n != 1 {
		t.Errorf("runs of the deployment: %d, want 1", n)
	}
	if n := list(anthropic.BetaDeploymentRunListParams{DeploymentID: anthropic.String("depl_unknown")}); n != 0 {
		t.Errorf("runs of an unknown deployment: %d, want an empty page", n)
	}
	if n := list(anthropic.BetaDeploymentRunListParams{HasError: anthropic.Bool(true)}); n != 0 {
		t.Errorf("runs with an error: %d, want 0", n)
	}
	if n := list(anthropic.BetaDeploymentRunListParams{TriggerType: anthropic.BetaManagedAgentsTriggerTypeSchedule}); n != 0 {
		t.Errorf("scheduled runs: %d, want 0", n)
	}
	if n := list(anthropic.BetaDeploymentRunListParams{TriggerType: anthropic.BetaManagedAgentsTriggerTypeManual,
		CreatedAtGte: anthropic.Time(run.CreatedAt)}); n != 1 {
		t.Errorf("manual runs since the run: %d, want 1", n)
	}
	if st, _, body := h.do("GET", "/v1/deployment_runs?page=garbage", ""); st != http.StatusBadRequest {
		t.Errorf("bad cursor: %d %s", st, body)
	}

	// Bad input: a clear 400 naming the field.
	for _, c := range []struct{ body, want string }{
		{`{"name":"x","agent":"` + agentID + `","environment_id":"` + envID + `","initial_events":[]}`, "initial_events"},
		{`{"name":"x","agent":"` + agentID + `","environment_id":"` + envID + `","initial_events":[{"type":"system.message","content":[{"type":"text","text":"hi"}]}]}`, "system.message must follow"},
		{`{"name":"x","agent":"` + agentID + `","environment_id":"` + envID + `","initial_events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]}],"schedule":{"type":"cron","expression":"0 25 * * *","timezone":"UTC"}}`, "hour"},
		{`{"name":"x","agent":"` + agentID + `","environment_id":"` + envID + `","initial_events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]}],"schedule":{"type":"cron","expression":"0 9 * * *","timezone":"Mars/Olympus"}}`, "Mars/Olympus"},
		{`{"name":"x","agent":{"type":"agent_with_overrides","id":"` + agentID + `"},"environment_id":"` + envID + `","initial_events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]}]}`, "agent.type"},
	} {
		st, _, body := h.do("POST", "/v1/deployments", c.body)
		if st != http.StatusBadRequest || !strings.Contains(string(body), c.want) || !strings.Contains(string(body), "invalid_request_error") {
			t.Errorf("create %s: %d %s, want a 400 naming %q", c.body, st, body, c.want)
		}
	}

	// Update: schedule null (manual only), name, metadata; initial_events cannot be cleared.
	if st, _, body := h.do("POST", "/v1/deployments/"+d.ID, `{"schedule":null,"name":"triage","metadata":{"team":"infra"}}`); st != http.StatusOK ||
		!strings.Contains(string(body), `"schedule":null`) || !strings.Contains(string(body), `"team":"infra"`) {
		t.Fatalf("update: %d %s", st, body)
	}
	if st, _, body := h.do("POST", "/v1/deployments/"+d.ID, `{"initial_events":null}`); st != http.StatusBadRequest {
		t.Errorf("clearing initial_events: %d %s", st, body)
	}

	// Pause (manual) and unpause.
	p, err := c.Beta.Deployments.Pause(ctx, d.ID, anthropic.BetaDeploymentPauseParams{})
	if err != nil || p.Status != anthropic.BetaManagedAgentsDeploymentStatusPaused || p.PausedReason.Type != "manual" {
		t.Fatalf("pause: %v %s", err, p.RawJSON())
	}
	u, err := c.Beta.Deployments.Unpause(ctx, d.ID, anthropic.BetaDeploymentUnpauseParams{})
	if err != nil || u.Status != anthropic.BetaManagedAgentsDeploymentStatusActive || u.JSON.PausedReason.Raw() != "null" {
		t.Fatalf("unpause: %v %s", err, u.RawJSON())
	}

	// A run error that would repeat pauses the deployment: its vault was archived.
	v, err := c.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Deployments.Update(ctx, d.ID, anthropic.BetaDeploymentUpdateParams{VaultIDs: []string{v.ID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Vaults.Archive(ctx, v.ID, anthropic.BetaVaultArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	failed, err := c.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil || failed.JSON.SessionID.Raw() != "null" || failed.Error.Type != "vault_archived_error" || !strings.Contains(failed.Error.Message, v.ID) {
		t.Fatalf("run with an archived vault: %v %s", err, failed.RawJSON())
	}
	paused, err := c.Beta.Deployments.Get(ctx, d.ID, anthropic.BetaDeploymentGetParams{})
	if err != nil || paused.Status != anthropic.BetaManagedAgentsDeploymentStatusPaused || paused.PausedReason.Type != "error" ||
		paused.PausedReason.Error.Type != "vault_archived_error" {
		t.Fatalf("paused on the run error: %v %s", err, paused.RawJSON())
	}
	if n := list(anthropic.BetaDeploymentRunListParams{HasError: anthropic.Bool(true)}); n != 1 {
		t.Errorf("runs with an error: %d, want 1", n)
	}

	// Archive: active with archived_at, no upcoming runs, no more runs; hidden from the list unless asked.
	a, err := c.Beta.Deployments.Archive(ctx, d.ID, anthropic.BetaDeploymentArchiveParams{})
	if err != nil || a.Status != anthropic.BetaManagedAgentsDeploymentStatusActive || a.ArchivedAt.IsZero() {
		t.Fatalf("archive: %v %s", err, a.RawJSON())
	}
	if _, err := c.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{}); err == nil {
		t.Error("an archived deployment ran")
	}
	page, err := c.Beta.Deployments.List(ctx, anthropic.BetaDeploymentListParams{})
	if err != nil || len(page.Data) != 0 {
		t.Errorf("list without archived: %v %d", err, len(page.Data))
	}
	page, err = c.Beta.Deployments.List(ctx, anthropic.BetaDeploymentListParams{IncludeArchived: anthropic.Bool(true)})
	if err != nil || len(page.Data) != 1 {
		t.Errorf("list with archived: %v %d", err, len(page.Data))
	}
}

// clock is a settable clock for the runner.
type clock struct{ t atomic.Pointer[time.Time] }

func (c *clock) set(t time.Time) { c.t.Store(&t) }
func (c *clock) now() time.Time  { return *c.t.Load() }
func at(s string) time.Time      { t, _ := time.Parse(time.RFC3339, s); return t }
func runnerAt(t *testing.T, h *harness, c *clock, catchUp time.Duration) *api.Server {
	r := newAPI(t, api.Config{Store: h.store, Sealer: h.vault, DeploymentCatchUp: catchUp})
	r.SetClock(c.now)
	return r
}

// TestDeploymentRunnerSchedule drives the runner over a clock moved by hand: a scheduled time fires exactly once
// however many runners pass at it (sequentially and concurrently); times missed while no runner ran fire once,
// the latest, within the catch-up window, and are recorded as missed beyond it.
func TestDeploymentRunnerSchedule(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	var c clock
	c.set(at("2026-12-02T10:00:30Z"))
	h.setClock(c.now)
	d := newDeployment(ctx, t, h.client, agentID, envID, &anthropic.BetaManagedAgentsScheduleParams{Expression: "* * * * *", Timezone: "UTC"})
	if got := d.Schedule.UpcomingRunsAt[0]; !got.Equal(at("2026-12-02T10:01:00Z")) {
		t.Fatalf("first upcoming run %s", got)
	}
	runners := make([]*api.Server, 4)
	for i := range runners {
		runners[i] = runnerAt(t, h, &c, time.Hour)
	}
	scheduled := func() []apitype.DeploymentRun {
		t.Helper()
		runs, err := h.store.DeploymentRunList(ctx, &store.DeploymentRunListParams{DeploymentID: d.ID,
			TriggerType: apitype.TriggerSchedule, IncludePending: true, ListParams: store.ListParams{Limit: 1000, Desc: true}})
		if err != nil {
			t.Fatal(err)
		}
		return runs
	}

	// Before the time: nothing. At it: one run, however many runners pass.
	for _, r := range runners {
		if err := r.RunDeployments(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(scheduled()); n != 0 {
		t.Fatalf("%d runs before the scheduled time", n)
	}
	c.set(at("2026-12-02T10:01:00.2Z"))
	for _, r := range runners {
		if err := r.RunDeployments(ctx); err != nil {
			t.Fatal(err)
		}
	}
	runs := scheduled()
	if len(runs) != 1 || runs[0].SessionID == nil || !runs[0].Trigger.ScheduledAt.Equal(at("2026-12-02T10:01:00Z")) {
		t.Fatalf("after 10:01 passed by 4 runners: %+v", runs)
	}
	// Concurrently, at the next time.
	c.set(at("2026-12-02T10:02:00.5Z"))
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Go(func() {
			if err := r.RunDeployments(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if runs = scheduled(); len(runs) != 2 {
		t.Fatalf("after 10:02 passed by 4 concurrent runners: %d runs, want 2", len(runs))
	}
	dep, err := h.store.DeploymentGet(ctx, d.ID)
	if err != nil || !dep.Deployment.Schedule.LastRunAt.Equal(at("2026-12-02T10:02:00Z")) ||
		!dep.Deployment.Schedule.UpcomingRunsAt[0].Equal(at("2026-12-02T10:03:00Z")) {
		t.Fatalf("schedule after 10:02: %v %+v", err, dep.Deployment.Schedule)
	}

	// No runner for two hours: the latest time (12:00) fires; the 117 before it are recorded as missed.
	c.set(at("2026-12-02T12:00:10Z"))
	if err := runners[0].RunDeployments(ctx); err != nil {
		t.Fatal(err)
	}
	runs = scheduled()
	if len(runs) != 4 {
		t.Fatalf("after two hours down: %d runs, want 4", len(runs))
	}
	missed, fired := runs[0], runs[1] // newest first: same created_at, so order by id is not fixed
	if missed.Error == nil {
		missed, fired = fired, missed
	}
	if missed.Error == nil || missed.Error.Type != apitype.RunScheduleMissed || !strings.Contains(missed.Error.Message, "117 scheduled") ||
		!missed.Trigger.ScheduledAt.Equal(at("2026-12-02T11:59:00Z")) {
		t.Errorf("missed record: %+v %+v", missed.Trigger, missed.Error)
	}
	if fired.SessionID == nil || !fired.Trigger.ScheduledAt.Equal(at("2026-12-02T12:00:00Z")) {
		t.Errorf("the catch-up run: %+v", fired)
	}
	if dep, _ := h.store.DeploymentGet(ctx, d.ID); dep.Deployment.Status != apitype.DeploymentActive {
		t.Errorf("a missed schedule paused the deployment: %+v", dep.Deployment.PausedReason)
	}

	// With a 10-second window, the latest time (12:11, 30 s old) does not fire: the 11 since 12:00 are recorded
	// as missed.
	strict := runnerAt(t, h, &c, 10*time.Second)
	c.set(at("2026-12-02T12:11:30Z"))
	if err := strict.RunDeployments(ctx); err != nil {
		t.Fatal(err)
	}
	runs = scheduled()
	if len(runs) != 5 || runs[0].Error == nil || runs[0].Error.Type != apitype.RunScheduleMissed ||
		!strings.Contains(runs[0].Error.Message, "11 scheduled") {
		t.Fatalf("after 11 minutes down with a 10-second window: %d runs, newest %+v", len(runs), runs[0].Error)
	}
}

// TestDeploymentScheduleTimezone: upcoming runs follow the timezone across a daylight-saving change.
func TestDeploymentScheduleTimezone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	var c clock
	c.set(at("2026-03-27T12:00:00Z"))
	h.setClock(c.now)
	d := newDeployment(ctx, t, h.client, agentID, envID, &anthropic.BetaManagedAgentsScheduleParams{Expression: "0 9 * * *", Timezone: "Europe/London"})
	want := []string{"2026-03-28T09:00:00Z", "2026-03-29T08:00:00Z", "2026-03-30T08:00:00Z", "2026-03-31T08:00:00Z", "2026-04-01T08:00:00Z"}
	for i, w := range want {
		if i >= len(d.Schedule.UpcomingRunsAt) || !d.Schedule.UpcomingRunsAt[i].Equal(at(w)) {
			t.Fatalf("upcoming runs %v, want %v (09:00 London: GMT, then BST from March 29)", d.Schedule.UpcomingRunsAt, want)
		}
	}
}
