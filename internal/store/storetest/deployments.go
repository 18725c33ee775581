package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// newDeployment is an active deployment of the agent, created at created, due at upcoming (none: not scheduled
// at any time).
func newDeployment(created time.Time, agentID string, upcoming ...time.Time) *store.DeploymentRecord {
	return &store.DeploymentRecord{
		Deployment: apitype.Deployment{
			Type: apitype.ObjectDeployment, ID: apitype.NewID(apitype.PrefixDeployment), Name: "nightly",
			Agent:         apitype.AgentRef{Type: apitype.ObjectAgent, ID: agentID, Version: 3},
			EnvironmentID: "env_x", InitialEvents: []json.RawMessage{json.RawMessage(`{"type":"user.message"}`)},
			Resources: []json.RawMessage{}, VaultIDs: []string{"vlt_a"}, Metadata: map[string]string{"team": "a"},
			Schedule: &apitype.Schedule{Type: "cron", Expression: "0 * * * *", Timezone: "UTC",
				UpcomingRunsAt: upcoming},
			Status: apitype.DeploymentActive, CreatedAt: created, UpdatedAt: created,
		},
	}
}

func deploymentID(d *store.DeploymentRecord) string { return d.Deployment.ID }
func runID(r *apitype.DeploymentRun) string         { return r.ID }

// newRun is a pending run of the deployment: scheduled at scheduled, or manual if nil.
func newRun(deploymentID string, created time.Time, scheduled *time.Time) *apitype.DeploymentRun {
	r := &apitype.DeploymentRun{
		Type: apitype.ObjectDeploymentRun, ID: apitype.NewID(apitype.PrefixDeploymentRun), DeploymentID: deploymentID,
		Agent:   apitype.AgentRef{Type: apitype.ObjectAgent, ID: "agent_x", Version: 3},
		Trigger: apitype.TriggerContext{Type: apitype.TriggerManual}, CreatedAt: created,
	}
	if scheduled != nil {
		at := *scheduled
		r.Trigger = apitype.TriggerContext{Type: apitype.TriggerSchedule, ScheduledAt: &at}
	}
	return r
}

// withSession and withError resolve a run.
func withSession(r *apitype.DeploymentRun) *apitype.DeploymentRun {
	id := apitype.NewID(apitype.PrefixSession)
	r.SessionID = &id
	return r
}

func withError(r *apitype.DeploymentRun, typ apitype.RunErrorType) *apitype.DeploymentRun {
	r.Error = &apitype.RunError{Type: typ, Message: string(typ)}
	return r
}

// fireParams fires d's time at with one pending run, the schedule moving on to next.
func fireParams(d string, at time.Time, next ...time.Time) *store.DeploymentFireParams {
	return &store.DeploymentFireParams{DeploymentID: d, ScheduledAt: at, LastRunAt: at, Upcoming: next,
		Runs: []apitype.DeploymentRun{*newRun(d, at, &at)}}
}

// testDeployment: create, get, and the Update rule (KeepDeployment: id, creation, archive, last run).
func testDeployment(t *testing.T, h Harness) {
	s := h.open(t)
	d := newDeployment(base, "agent_a", base.Add(time.Hour))
	d.AgentLatest = true
	d.Tokens = []store.SealedSecret{sealed("", "0", "mk_a", 1)}
	must(t, s.DeploymentCreate(ctxBg, d), "create deployment")
	mustIs(t, s.DeploymentCreate(ctxBg, d), store.ErrConflict, "create deployment twice")
	got, err := s.DeploymentGet(ctxBg, d.Deployment.ID)
	must(t, err, "get deployment")
	equal(t, got.Deployment.Name, "nightly", "name")
	equal(t, got.Deployment.Agent.ID, "agent_a", "agent")
	equal(t, got.AgentLatest, true, "agent_latest")
	equal(t, len(got.Tokens), 1, "tokens")
	equal(t, got.Tokens[0].KeyID, "mk_a", "token key id")
	equal(t, string(got.Deployment.InitialEvents[0]), `{"type":"user.message"}`, "initial events")
	sameTime(t, got.Deployment.CreatedAt, base, "created_at")
	sameTime(t, got.Deployment.Schedule.UpcomingRunsAt[0], base.Add(time.Hour), "upcoming_runs_at")
	_, err = s.DeploymentGet(ctxBg, "depl_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown deployment")

	// What fn changes is stored, but not the id, the creation or the type.
	later := base.Add(time.Minute)
	upd, err := s.DeploymentUpdate(ctxBg, d.Deployment.ID, func(r *store.DeploymentRecord) error {
		r.Deployment.Name, r.Deployment.UpdatedAt = "hourly", later
		r.Deployment.ID, r.Deployment.CreatedAt, r.Deployment.Type = "depl_other", later, "agent"
		r.Deployment.Status = apitype.DeploymentPaused
		r.Deployment.PausedReason = &apitype.PausedReason{Type: "manual"}
		return nil
	})
	must(t, err, "update deployment")
	equal(t, upd.Deployment.Name, "hourly", "updated name")
	equal(t, upd.Deployment.ID, d.Deployment.ID, "id kept")
	equal(t, upd.Deployment.Type, apitype.ObjectDeployment, "type kept")
	sameTime(t, upd.Deployment.CreatedAt, base, "created_at kept")
	got, err = s.DeploymentGet(ctxBg, d.Deployment.ID)
	must(t, err, "get updated deployment")
	equal(t, got.Deployment.Status, apitype.DeploymentPaused, "stored status")
	equal(t, got.Deployment.PausedReason.Type, "manual", "paused_reason")
	_, err = s.DeploymentGet(ctxBg, "depl_other")
	mustIs(t, err, store.ErrNotFound, "no deployment under the id fn set")

	boom := errors.New("boom")
	_, err = s.DeploymentUpdate(ctxBg, d.Deployment.ID, func(r *store.DeploymentRecord) error {
		r.Deployment.Name = "lost"
		return boom
	})
	mustIs(t, err, boom, "update whose fn fails")
	_, err = s.DeploymentUpdate(ctxBg, "depl_missing", func(*store.DeploymentRecord) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update unknown deployment")

	// A fired deployment's last run stays when fn replaces the schedule without one.
	_, err = s.DeploymentUpdate(ctxBg, d.Deployment.ID, func(r *store.DeploymentRecord) error {
		r.Deployment.Status, r.Deployment.PausedReason = apitype.DeploymentActive, nil
		return nil
	})
	must(t, err, "resume deployment")
	at := base.Add(time.Hour)
	_, err = s.DeploymentFire(ctxBg, fireParams(d.Deployment.ID, at, at.Add(time.Hour)))
	must(t, err, "fire deployment")
	upd, err = s.DeploymentUpdate(ctxBg, d.Deployment.ID, func(r *store.DeploymentRecord) error {
		r.Deployment.Schedule = &apitype.Schedule{Type: "cron", Expression: "30 * * * *", Timezone: "UTC",
			UpcomingRunsAt: []time.Time{at.Add(90 * time.Minute)}}
		return nil
	})
	must(t, err, "reschedule deployment")
	equal(t, upd.Deployment.Schedule.Expression, "30 * * * *", "new expression")
	equal(t, upd.Deployment.Schedule.LastRunAt != nil, true, "last_run_at kept")
	sameTime(t, *upd.Deployment.Schedule.LastRunAt, at, "last_run_at kept")

	// An archived deployment stays archived.
	archived := base.Add(2 * time.Hour)
	_, err = s.DeploymentUpdate(ctxBg, d.Deployment.ID, func(r *store.DeploymentRecord) error {
		r.Deployment.ArchivedAt = &archived
		return nil
	})
	must(t, err, "archive deployment")
	upd, err = s.DeploymentUpdate(ctxBg, d.Deployment.ID, func(r *store.DeploymentRecord) error {
		r.Deployment.ArchivedAt, r.Deployment.Name = nil, "renamed"
		return nil
	})
	must(t, err, "update archived deployment")
	equal(t, upd.Deployment.Name, "renamed", "archived deployment renamed")
	got, err = s.DeploymentGet(ctxBg, d.Deployment.ID)
	must(t, err, "get archived deployment")
	equal(t, got.Deployment.ArchivedAt != nil, true, "archive kept")
	sameTime(t, *got.Deployment.ArchivedAt, archived, "archived_at kept")
}

// testDeploymentList: by (created_at, id) both ways with paging, agent and status filters, archived ones (which
// report active), created_at ranges.
func testDeploymentList(t *testing.T, h Harness) {
	s := h.open(t)
	var all []*store.DeploymentRecord
	for i, agent := range []string{"agent_a", "agent_b", "agent_a", "agent_a", "agent_b"} {
		d := newDeployment(base.Add(time.Duration(i)*time.Second), agent)
		must(t, s.DeploymentCreate(ctxBg, d), "create deployment")
		all = append(all, d)
	}
	_, err := s.DeploymentUpdate(ctxBg, all[2].Deployment.ID, func(r *store.DeploymentRecord) error {
		r.Deployment.Status = apitype.DeploymentPaused
		return nil
	})
	must(t, err, "pause deployment")
	_, err = s.DeploymentUpdate(ctxBg, all[3].Deployment.ID, func(r *store.DeploymentRecord) error {
		at := base.Add(time.Hour)
		r.Deployment.ArchivedAt = &at
		return nil
	})
	must(t, err, "archive deployment")

	list := func(p store.DeploymentListParams) string {
		t.Helper()
		got, err := s.DeploymentList(ctxBg, &p)
		must(t, err, "list deployments")
		return ids(got, deploymentID)
	}
	join := func(is ...int) string {
		out := make([]store.DeploymentRecord, len(is))
		for i, x := range is {
			out[i] = *all[x]
		}
		return ids(out, deploymentID)
	}
	cursor := func(i int) *store.Cursor {
		return &store.Cursor{CreatedAt: all[i].Deployment.CreatedAt, ID: all[i].Deployment.ID}
	}
	lp := func(p store.ListParams) store.DeploymentListParams { return store.DeploymentListParams{ListParams: p} }
	t1, t3 := all[1].Deployment.CreatedAt, all[3].Deployment.CreatedAt
	for _, c := range []struct {
		name string
		p    store.DeploymentListParams
		want string
	}{
		{"oldest first, archived left out", lp(store.ListParams{}), join(0, 1, 2, 4)},
		{"newest first", lp(store.ListParams{Desc: true}), join(4, 2, 1, 0)},
		{"with archived", lp(store.ListParams{IncludeArchived: true}), join(0, 1, 2, 3, 4)},
		{"a page", lp(store.ListParams{Limit: 2}), join(0, 1)},
		{"the next page", lp(store.ListParams{Limit: 2, After: cursor(1)}), join(2, 4)},
		{"a page newest first", lp(store.ListParams{Desc: true, Limit: 2, After: cursor(4)}), join(2, 1)},
		{"the last page newest first", lp(store.ListParams{Desc: true, Limit: 2, After: cursor(1)}), join(0)},
		{"agent", store.DeploymentListParams{AgentID: "agent_a"}, join(0, 2)},
		{"agent with archived", store.DeploymentListParams{AgentID: "agent_a",
			ListParams: store.ListParams{IncludeArchived: true}}, join(0, 2, 3)},
		{"unknown agent", store.DeploymentListParams{AgentID: "agent_none"}, ""},
		{"paused", store.DeploymentListParams{Status: apitype.DeploymentPaused}, join(2)},
		{"active", store.DeploymentListParams{Status: apitype.DeploymentActive}, join(0, 1, 4)},
		{"active with archived", store.DeploymentListParams{Status: apitype.DeploymentActive,
			ListParams: store.ListParams{IncludeArchived: true}}, join(0, 1, 3, 4)},
		{"created_at gt and lt", lp(store.ListParams{IncludeArchived: true, CreatedAfter: &t1, CreatedBefore: &t3}),
			join(2)},
		{"created_at gte and lte", lp(store.ListParams{IncludeArchived: true, CreatedFrom: &t1, CreatedTo: &t3}),
			join(1, 2, 3)},
	} {
		equal(t, list(c.p), c.want, c.name)
	}
}

// testDeploymentListDue: only active, unarchived, scheduled deployments due at now, soonest first, limited; the
// due time follows every write.
func testDeploymentListDue(t *testing.T, h Harness) {
	s := h.open(t)
	now := base.Add(24 * time.Hour)
	create := func(d *store.DeploymentRecord, change func(*apitype.Deployment)) *store.DeploymentRecord {
		t.Helper()
		if change != nil {
			change(&d.Deployment)
		}
		must(t, s.DeploymentCreate(ctxBg, d), "create deployment")
		return d
	}
	later := create(newDeployment(base, "agent_a", now.Add(-time.Minute), now.Add(time.Hour)), nil)
	soonest := create(newDeployment(base.Add(time.Second), "agent_a", now.Add(-2*time.Minute)), nil)
	atNow := create(newDeployment(base.Add(2*time.Second), "agent_a", now), nil)
	create(newDeployment(base, "agent_a", now.Add(time.Second)), nil) // not yet due
	create(newDeployment(base, "agent_a"), nil)                       // nothing upcoming
	create(newDeployment(base, "agent_a", now.Add(-3*time.Minute)), func(d *apitype.Deployment) {
		d.Status = apitype.DeploymentPaused
	})
	create(newDeployment(base, "agent_a", now.Add(-3*time.Minute)), func(d *apitype.Deployment) {
		at := base
		d.ArchivedAt = &at
	})
	create(newDeployment(base, "agent_a", now.Add(-3*time.Minute)), func(d *apitype.Deployment) { d.Schedule = nil })

	due := func(limit int) string {
		t.Helper()
		got, err := s.DeploymentListDue(ctxBg, now, limit)
		must(t, err, "list due deployments")
		return ids(got, deploymentID)
	}
	join := func(ds ...*store.DeploymentRecord) string {
		out := make([]store.DeploymentRecord, len(ds))
		for i, d := range ds {
			out[i] = *d
		}
		return ids(out, deploymentID)
	}
	equal(t, due(0), join(soonest, later, atNow), "due, soonest first")
	equal(t, due(2), join(soonest, later), "due, limited")

	update := func(d *store.DeploymentRecord, change func(*apitype.Deployment)) {
		t.Helper()
		_, err := s.DeploymentUpdate(ctxBg, d.Deployment.ID, func(r *store.DeploymentRecord) error {
			change(&r.Deployment)
			return nil
		})
		must(t, err, "update deployment")
	}
	update(soonest, func(d *apitype.Deployment) { d.Status = apitype.DeploymentPaused })
	equal(t, due(0), join(later, atNow), "a paused deployment is not due")
	update(soonest, func(d *apitype.Deployment) { d.Status = apitype.DeploymentActive })
	equal(t, due(0), join(soonest, later, atNow), "resumed")
	update(later, func(d *apitype.Deployment) { d.Schedule.UpcomingRunsAt = []time.Time{now.Add(-3 * time.Minute)} })
	equal(t, due(0), join(later, soonest, atNow), "rescheduled earlier")
	update(later, func(d *apitype.Deployment) {
		at := now
		d.ArchivedAt = &at
	})
	equal(t, due(0), join(soonest, atNow), "an archived deployment is not due")
	_, err := s.DeploymentFire(ctxBg, fireParams(soonest.Deployment.ID, now.Add(-2*time.Minute), now.Add(time.Hour)))
	must(t, err, "fire deployment")
	equal(t, due(0), join(atNow), "a fired deployment is due at its next time")
}

// testDeploymentFire: a fire claims the time it names once, advances the schedule and creates its runs in one
// transaction; paused, archived and unscheduled deployments are not fired.
func testDeploymentFire(t *testing.T, h Harness) {
	s := h.open(t)
	t0, t1, t2, t3 := base.Add(time.Hour), base.Add(2*time.Hour), base.Add(3*time.Hour), base.Add(4*time.Hour)
	d := newDeployment(base, "agent_a", t1, t2)
	must(t, s.DeploymentCreate(ctxBg, d), "create deployment")
	id := d.Deployment.ID

	// The pending run of t1 and a resolved one recording the missed t0.
	p := fireParams(id, t1, t2, t3)
	p.LastRunAt = t1.Add(time.Second)
	missed := withError(newRun(id, t1, &t0), apitype.RunScheduleMissed)
	p.Runs = append(p.Runs, *missed)
	fired, err := s.DeploymentFire(ctxBg, p)
	must(t, err, "fire deployment")
	sameTime(t, *fired.Deployment.Schedule.LastRunAt, t1.Add(time.Second), "last_run_at")
	equal(t, len(fired.Deployment.Schedule.UpcomingRunsAt), 2, "upcoming runs")
	sameTime(t, fired.Deployment.Schedule.UpcomingRunsAt[0], t2, "next run")
	equal(t, fired.Deployment.Name, "nightly", "the rest of the deployment")
	got, err := s.DeploymentGet(ctxBg, id)
	must(t, err, "get fired deployment")
	sameTime(t, *got.Deployment.Schedule.LastRunAt, t1.Add(time.Second), "stored last_run_at")
	sameTime(t, got.Deployment.Schedule.UpcomingRunsAt[1], t3, "stored upcoming runs")
	run, err := s.DeploymentRunGet(ctxBg, p.Runs[0].ID)
	must(t, err, "get fired run")
	equal(t, store.RunPending(run), true, "the fired run is pending")
	sameTime(t, *run.Trigger.ScheduledAt, t1, "scheduled_at")
	run, err = s.DeploymentRunGet(ctxBg, missed.ID)
	must(t, err, "get missed run")
	equal(t, run.Error.Type, apitype.RunScheduleMissed, "missed run's error")
	runs := func() int {
		t.Helper()
		list, err := s.DeploymentRunList(ctxBg, &store.DeploymentRunListParams{DeploymentID: id, IncludePending: true})
		must(t, err, "list runs")
		return len(list)
	}
	equal(t, runs(), 2, "runs created")

	// t1 was claimed; a fire of t2 whose run repeats a scheduled time changes nothing.
	_, err = s.DeploymentFire(ctxBg, fireParams(id, t1, t2, t3))
	mustIs(t, err, store.ErrConflict, "fire the same time twice")
	dup := fireParams(id, t2, t3)
	dup.Runs = append(dup.Runs, *withError(newRun(id, t2, &t0), apitype.RunScheduleMissed))
	_, err = s.DeploymentFire(ctxBg, dup)
	mustIs(t, err, store.ErrConflict, "fire with a run of a time fired before")
	got, err = s.DeploymentGet(ctxBg, id)
	must(t, err, "get deployment")
	sameTime(t, got.Deployment.Schedule.UpcomingRunsAt[0], t2, "a failed fire leaves the schedule")
	sameTime(t, *got.Deployment.Schedule.LastRunAt, t1.Add(time.Second), "and the last run")
	equal(t, runs(), 2, "a failed fire creates no run")
	_, err = s.DeploymentFire(ctxBg, fireParams(id, t3, t3))
	mustIs(t, err, store.ErrConflict, "fire a later time than the next")

	// What CheckFire refuses is an error before any write.
	for _, bad := range []*store.DeploymentFireParams{
		{DeploymentID: id, ScheduledAt: t2, LastRunAt: t2},
		{DeploymentID: id, ScheduledAt: t2, LastRunAt: t2, Runs: []apitype.DeploymentRun{*newRun(id, t2, nil)}},
		{DeploymentID: id, ScheduledAt: t2, LastRunAt: t2, Runs: []apitype.DeploymentRun{*newRun("depl_other", t2, &t2)}},
	} {
		if _, err := s.DeploymentFire(ctxBg, bad); err == nil || errors.Is(err, store.ErrConflict) {
			t.Fatalf("fire with %d bad runs: got %v, want a validation error", len(bad.Runs), err)
		}
	}
	equal(t, runs(), 2, "refused fires create no run")
	_, err = s.DeploymentFire(ctxBg, fireParams("depl_missing", t2))
	mustIs(t, err, store.ErrNotFound, "fire an unknown deployment")

	_, err = s.DeploymentUpdate(ctxBg, id, func(r *store.DeploymentRecord) error {
		r.Deployment.Status = apitype.DeploymentPaused
		return nil
	})
	must(t, err, "pause deployment")
	_, err = s.DeploymentFire(ctxBg, fireParams(id, t2, t3))
	mustIs(t, err, store.ErrConflict, "fire a paused deployment")
	_, err = s.DeploymentUpdate(ctxBg, id, func(r *store.DeploymentRecord) error {
		at := t2
		r.Deployment.Status, r.Deployment.ArchivedAt = apitype.DeploymentActive, &at
		return nil
	})
	must(t, err, "archive deployment")
	_, err = s.DeploymentFire(ctxBg, fireParams(id, t2, t3))
	mustIs(t, err, store.ErrConflict, "fire an archived deployment")
	equal(t, runs(), 2, "no run of a paused or archived deployment")
}

// testDeploymentFireRace: however many fire one time at once, exactly one succeeds and creates its run.
func testDeploymentFireRace(t *testing.T, h Harness) {
	s := h.open(t)
	const n, rounds = 8, 4
	times := make([]time.Time, rounds+1)
	for i := range times {
		times[i] = base.Add(time.Duration(i+1) * time.Hour)
	}
	d := newDeployment(base, "agent_a", times...)
	must(t, s.DeploymentCreate(ctxBg, d), "create deployment")
	id := d.Deployment.ID
	openConnections(s, "memstore_none", n) // any read opens a connection: the store need not exist
	var wg sync.WaitGroup
	for round := range rounds {
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := fireParams(id, times[round], times[round+1:]...)
				<-start
				_, errs[i] = s.DeploymentFire(ctxBg, p)
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("round %d: fires %d and %d both won", round, won, i)
			default:
				mustIs(t, err, store.ErrConflict, fmt.Sprintf("round %d: losing fire %d", round, i))
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no fire won", round)
		}
		list, err := s.DeploymentRunList(ctxBg, &store.DeploymentRunListParams{DeploymentID: id, IncludePending: true})
		must(t, err, "list runs")
		equal(t, len(list), round+1, fmt.Sprintf("round %d: one run per time", round))
	}
	got, err := s.DeploymentGet(ctxBg, id)
	must(t, err, "get deployment")
	sameTime(t, got.Deployment.Schedule.UpcomingRunsAt[0], times[rounds], "the schedule moved on once a round")
}

// testDeploymentRun: create (unique id, unique scheduled time per deployment), get, and resolve once.
func testDeploymentRun(t *testing.T, h Harness) {
	s := h.open(t)
	a, b := newDeployment(base, "agent_a"), newDeployment(base, "agent_a")
	must(t, s.DeploymentCreate(ctxBg, a), "create deployment")
	must(t, s.DeploymentCreate(ctxBg, b), "create deployment")
	at := base.Add(time.Hour)
	r := newRun(a.Deployment.ID, base, &at)
	must(t, s.DeploymentRunCreate(ctxBg, r), "create run")
	mustIs(t, s.DeploymentRunCreate(ctxBg, r), store.ErrConflict, "create run twice")
	mustIs(t, s.DeploymentRunCreate(ctxBg, newRun(a.Deployment.ID, base, &at)), store.ErrConflict,
		"a second run of a scheduled time")
	must(t, s.DeploymentRunCreate(ctxBg, newRun(b.Deployment.ID, base, &at)), "the same time of another deployment")
	manual := newRun(a.Deployment.ID, base, nil)
	must(t, s.DeploymentRunCreate(ctxBg, manual), "create manual run")
	must(t, s.DeploymentRunCreate(ctxBg, newRun(a.Deployment.ID, base, nil)), "another manual run")

	got, err := s.DeploymentRunGet(ctxBg, r.ID)
	must(t, err, "get run")
	equal(t, store.RunPending(got), true, "pending")
	equal(t, got.DeploymentID, a.Deployment.ID, "deployment_id")
	equal(t, got.Agent.Version, 3, "agent")
	sameTime(t, *got.Trigger.ScheduledAt, at, "scheduled_at")
	sameTime(t, got.CreatedAt, base, "created_at")
	_, err = s.DeploymentRunGet(ctxBg, "drun_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown run")

	// Exactly one of session and error.
	both := withError(withSession(newRun(a.Deployment.ID, base, nil)), apitype.RunUnknown)
	both.ID = r.ID
	neither := newRun(a.Deployment.ID, base, nil)
	neither.ID = r.ID
	for _, bad := range []*apitype.DeploymentRun{both, neither} {
		if _, err := s.DeploymentRunResolve(ctxBg, bad); err == nil || errors.Is(err, store.ErrConflict) {
			t.Fatalf("resolve with session %v and error %v: got %v, want a validation error", bad.SessionID,
				bad.Error, err)
		}
	}
	got, err = s.DeploymentRunGet(ctxBg, r.ID)
	must(t, err, "get run")
	equal(t, store.RunPending(got), true, "still pending")

	res := withSession(&apitype.DeploymentRun{ID: r.ID})
	resolved, err := s.DeploymentRunResolve(ctxBg, res)
	must(t, err, "resolve run with a session")
	equal(t, *resolved.SessionID, *res.SessionID, "session_id")
	equal(t, resolved.DeploymentID, a.Deployment.ID, "the stored run")
	got, err = s.DeploymentRunGet(ctxBg, r.ID)
	must(t, err, "get resolved run")
	equal(t, *got.SessionID, *res.SessionID, "stored session_id")
	equal(t, got.Error == nil, true, "no error")
	sameTime(t, *got.Trigger.ScheduledAt, at, "the trigger stays")

	again, err := s.DeploymentRunResolve(ctxBg, withError(&apitype.DeploymentRun{ID: r.ID}, apitype.RunUnknown))
	mustIs(t, err, store.ErrConflict, "resolve twice")
	if again == nil || again.SessionID == nil || *again.SessionID != *res.SessionID {
		t.Fatalf("resolve twice: got run %+v, want the stored run", again)
	}
	equal(t, got.Agent.Version, 3, "a resolution that names no agent keeps the run's")
	// The agent a resolution names is the version the run resolved (its deployment follows the latest).
	latest := withError(&apitype.DeploymentRun{ID: manual.ID}, apitype.RunAgentArchived)
	latest.Agent = apitype.AgentRef{Type: apitype.ObjectAgent, ID: "agent_x", Version: 4}
	failed, err := s.DeploymentRunResolve(ctxBg, latest)
	must(t, err, "resolve run with an error")
	equal(t, failed.Error.Type, apitype.RunAgentArchived, "error")
	got, err = s.DeploymentRunGet(ctxBg, manual.ID)
	must(t, err, "get failed run")
	equal(t, got.Error.Type, apitype.RunAgentArchived, "stored error")
	equal(t, got.Agent.Version, 4, "stored agent version")
	equal(t, got.Trigger.Type, apitype.TriggerManual, "the trigger stays")
	_, err = s.DeploymentRunResolve(ctxBg, withSession(&apitype.DeploymentRun{ID: manual.ID}))
	mustIs(t, err, store.ErrConflict, "resolve a failed run")
	_, err = s.DeploymentRunResolve(ctxBg, withSession(&apitype.DeploymentRun{ID: "drun_missing"}))
	mustIs(t, err, store.ErrNotFound, "resolve unknown run")
}

// testDeploymentRunList: the filters, pending runs left out unless asked, paging both ways, and the pending
// list.
func testDeploymentRunList(t *testing.T, h Harness) {
	s := h.open(t)
	a, b := newDeployment(base, "agent_a"), newDeployment(base, "agent_a")
	must(t, s.DeploymentCreate(ctxBg, a), "create deployment")
	must(t, s.DeploymentCreate(ctxBg, b), "create deployment")
	A, B := a.Deployment.ID, b.Deployment.ID
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	sched := func(i int) *time.Time { v := base.Add(time.Duration(i) * time.Hour); return &v }
	all := []*apitype.DeploymentRun{
		withSession(newRun(A, at(0), nil)),                                    // 0
		withError(newRun(A, at(1), sched(1)), apitype.RunEnvironmentArchived), // 1
		newRun(A, at(2), nil),                                                 // 2 pending
		withSession(newRun(A, at(3), sched(3))),                               // 3
		withError(newRun(A, at(4), nil), apitype.RunRateLimited),              // 4
		withSession(newRun(B, at(5), sched(5))),                               // 5
		newRun(B, at(6), sched(6)),                                            // 6 pending
	}
	for _, r := range all {
		must(t, s.DeploymentRunCreate(ctxBg, r), "create run")
	}
	join := func(is ...int) string {
		out := make([]apitype.DeploymentRun, len(is))
		for i, x := range is {
			out[i] = *all[x]
		}
		return ids(out, runID)
	}
	yes, no := true, false
	cursor := func(i int) *store.Cursor { return &store.Cursor{CreatedAt: all[i].CreatedAt, ID: all[i].ID} }
	t1, t4 := at(1), at(4)
	for _, c := range []struct {
		name string
		p    store.DeploymentRunListParams
		want string
	}{
		{"all resolved", store.DeploymentRunListParams{}, join(0, 1, 3, 4, 5)},
		{"with pending", store.DeploymentRunListParams{IncludePending: true}, join(0, 1, 2, 3, 4, 5, 6)},
		{"deployment", store.DeploymentRunListParams{DeploymentID: A}, join(0, 1, 3, 4)},
		{"deployment with pending", store.DeploymentRunListParams{DeploymentID: B, IncludePending: true}, join(5, 6)},
		{"unknown deployment", store.DeploymentRunListParams{DeploymentID: "depl_missing", IncludePending: true}, ""},
		{"has error", store.DeploymentRunListParams{HasError: &yes}, join(1, 4)},
		{"has no error", store.DeploymentRunListParams{HasError: &no}, join(0, 3, 5)},
		{"has no error with pending", store.DeploymentRunListParams{HasError: &no, IncludePending: true},
			join(0, 2, 3, 5, 6)},
		{"scheduled", store.DeploymentRunListParams{TriggerType: apitype.TriggerSchedule}, join(1, 3, 5)},
		{"manual of a deployment", store.DeploymentRunListParams{DeploymentID: A, TriggerType: apitype.TriggerManual,
			IncludePending: true}, join(0, 2, 4)},
		{"scheduled with an error", store.DeploymentRunListParams{TriggerType: apitype.TriggerSchedule, HasError: &yes},
			join(1)},
		{"created_at gt and lt", store.DeploymentRunListParams{ListParams: store.ListParams{CreatedAfter: &t1,
			CreatedBefore: &t4}, IncludePending: true}, join(2, 3)},
		{"created_at gte and lte", store.DeploymentRunListParams{ListParams: store.ListParams{CreatedFrom: &t1,
			CreatedTo: &t4}}, join(1, 3, 4)},
		{"newest first", store.DeploymentRunListParams{ListParams: store.ListParams{Desc: true}}, join(5, 4, 3, 1, 0)},
		{"a page", store.DeploymentRunListParams{ListParams: store.ListParams{Limit: 2}}, join(0, 1)},
		{"the next page", store.DeploymentRunListParams{ListParams: store.ListParams{Limit: 2, After: cursor(1)}},
			join(3, 4)},
		{"a page newest first", store.DeploymentRunListParams{ListParams: store.ListParams{Desc: true, Limit: 2,
			After: cursor(4)}}, join(3, 1)},
		{"the last page newest first", store.DeploymentRunListParams{ListParams: store.ListParams{Desc: true,
			Limit: 2, After: cursor(1)}}, join(0)},
	} {
		got, err := s.DeploymentRunList(ctxBg, &c.p)
		must(t, err, c.name)
		equal(t, ids(got, runID), c.want, c.name)
	}

	pending := func(before time.Time, limit int) string {
		t.Helper()
		got, err := s.DeploymentRunListPending(ctxBg, before, limit)
		must(t, err, "list pending runs")
		return ids(got, runID)
	}
	equal(t, pending(at(10), 0), join(2, 6), "pending, oldest first")
	equal(t, pending(at(10), 1), join(2), "pending, limited")
	equal(t, pending(at(2), 0), join(2), "pending created at or before")
	equal(t, pending(at(1), 0), "", "none created before")
	_, err := s.DeploymentRunResolve(ctxBg, withSession(&apitype.DeploymentRun{ID: all[2].ID}))
	must(t, err, "resolve run")
	equal(t, pending(at(10), 0), join(6), "a resolved run is not pending")
	got, err := s.DeploymentRunList(ctxBg, &store.DeploymentRunListParams{DeploymentID: A, HasError: &no})
	must(t, err, "list runs")
	equal(t, ids(got, runID), join(0, 2, 3), "a resolved run is listed")
}
