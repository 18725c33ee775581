package harness_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
)

// selfHostedSession creates a session of a self_hosted environment whose agent has the built-in toolset.
func (f *fixture) selfHostedSession() (sessionID, envID string) {
	f.t.Helper()
	ctx := context.Background()
	now := apitype.Now()
	env := &apitype.Environment{Type: apitype.ObjectEnvironment, ID: apitype.NewID(apitype.PrefixEnvironment), Name: "hosted-" + apitype.NewID(""),
		Config: apitype.EnvConfig{Type: apitype.EnvironmentSelfHosted}, CreatedAt: now, UpdatedAt: now}
	if err := f.store.EnvironmentCreate(ctx, env); err != nil {
		f.t.Fatal(err)
	}
	sess := &apitype.Session{
		Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), EnvironmentID: env.ID, Status: apitype.StatusIdle,
		Agent: apitype.SessionAgent{Type: apitype.ObjectAgent, ID: apitype.NewID(apitype.PrefixAgent), Version: 1, Name: "tester",
			Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}, Tools: []apitype.Tool{toolset}},
		CreatedAt: now, UpdatedAt: now,
	}
	if _, _, err := f.store.SessionCreate(ctx, &store.SessionCreateParams{Session: sess}); err != nil {
		f.t.Fatal(err)
	}
	return sess.ID, env.ID
}

// TestSelfHostedWorkQueue: in a self-hosted environment the brain never runs a built-in call: it queues the
// session's work item and waits. When the worker holding the item vanishes, the brain answers the open call
// as of unknown outcome (a user.tool_result, which no worker runs again) before the item is delivered again,
// and the turn goes on.
func TestSelfHostedWorkQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"rm -rf /tmp/x"}`}}},
		modeltest.Turn{Text: "It may or may not have run."},
	)
	f.start(f.config())
	sid, env := f.selfHostedSession()
	f.say(sid, "go")
	f.waitIdle(sid, 1)
	ctx := context.Background()
	w, err := f.store.WorkBySession(ctx, sid)
	if err != nil || w.State != apitype.WorkQueued || w.EnvironmentID != env {
		t.Fatalf("work item of the waiting session: %+v, %v", w, err)
	}

	// A worker takes it, runs (perhaps) the call, and vanishes.
	now := apitype.Now()
	if _, err := f.store.WorkPoll(ctx, &store.WorkPollParams{EnvironmentID: env, WorkerID: "w1", ReclaimAfter: time.Minute,
		TokenHash: "h1", At: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.WorkAck(ctx, &store.WorkAckParams{EnvironmentID: env, WorkID: w.ID, TTL: time.Second, At: now}); err != nil {
		t.Fatal(err)
	}
	// The next poll, after the lease ended, finds it lost: held for the brain, the session woken.
	_, err = f.store.WorkPoll(ctx, &store.WorkPollParams{EnvironmentID: env, WorkerID: "w2", ReclaimAfter: time.Minute,
		TokenHash: "h2", At: now.Add(2 * time.Second)})
	if !errors.Is(err, store.ErrNoWork) {
		t.Fatalf("poll of a lost, held item: %v", err)
	}
	evs := f.waitIdle(sid, 2)
	var settled bool
	for _, e := range evs {
		if e.Type == apitype.EventUserToolResult {
			var r apitype.UserToolResult
			if err := e.DecodeData(&r); err != nil {
				t.Fatal(err)
			}
			settled = r.IsError && strings.Contains(r.Content[0].Text, "outcome is unknown")
		}
		if e.Type == toolResult {
			t.Errorf("the brain answered a self-hosted call itself: %s", e.Data)
		}
	}
	if !settled {
		t.Fatalf("the vanished worker's call was not settled; log %v", types(evs))
	}
	f.hands.mu.Lock()
	calls := f.hands.calls
	f.hands.mu.Unlock()
	if len(calls) != 0 {
		t.Errorf("the brain ran %v in its own hands", calls)
	}
	var idleEv apitype.SessionIdle
	if err := evs[len(evs)-1].DecodeData(&idleEv); err != nil || idleEv.StopReason.Type != apitype.StopEndTurn {
		t.Fatalf("the turn did not end: %+v, %v", idleEv, err)
	}
	w, err = f.store.WorkGet(ctx, env, w.ID)
	if err != nil || w.Held {
		t.Fatalf("the item after the brain settled its call: %+v, %v", w, err)
	}
}
