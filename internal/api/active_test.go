package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestActiveSecondsLive: a working session's active_seconds (stats and usage) include the stretch it is in, from
// the first session.status_running after its last idle (a rescheduling within it counts), on GET and in lists;
// an idle session reports the time the brain stored.
func TestActiveSecondsLive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	status := func(typ apitype.EventType, st string, active float64) apitype.Event {
		t.Helper()
		out, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Status: st, ActiveSeconds: active,
			Events: []apitype.NewEvent{mustMake(t, typ, nil)}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	if got := activeOf(t, h, id); got != 0 {
		t.Fatalf("new session: active %v", got)
	}

	t0 := status(apitype.EventSessionStatusRunning, apitype.StatusRunning, 0).CreatedAt
	time.Sleep(60 * time.Millisecond)
	status(apitype.EventSessionStatusRescheduled, apitype.StatusRescheduling, 0)
	status(apitype.EventSessionStatusRunning, apitype.StatusRunning, 0)
	min0 := time.Since(t0).Seconds()
	got := activeOf(t, h, id)
	if max0 := time.Since(t0).Seconds(); got < min0 || got > max0 {
		t.Fatalf("running: active %v, want between %v and %v (since the first running)", got, min0, max0)
	}
	if got := listedActive(t, h, id); got < min0 {
		t.Fatalf("running, listed: active %v, want at least %v", got, min0)
	}

	// Idle: the stored figure, whatever the estimate was.
	status(apitype.EventSessionStatusIdle, apitype.StatusIdle, 7)
	if got := activeOf(t, h, id); got != 7 {
		t.Fatalf("idle: active %v, want the stored 7", got)
	}
	// The next stretch adds to it, counted from its own start.
	t1 := status(apitype.EventSessionStatusRunning, apitype.StatusRunning, 0).CreatedAt
	time.Sleep(30 * time.Millisecond)
	min1 := 7 + time.Since(t1).Seconds()
	got = activeOf(t, h, id)
	if max1 := 7 + time.Since(t1).Seconds(); got < min1 || got > max1 {
		t.Fatalf("second stretch: active %v, want between %v and %v", got, min1, max1)
	}
}

// activeOf is GET /v1/sessions/{id}'s active time, the same in stats and usage.
func activeOf(t *testing.T, h *harness, id string) float64 {
	t.Helper()
	status, _, body := h.do("GET", "/v1/sessions/"+id, "")
	if status != http.StatusOK {
		t.Fatalf("get: %d %s", status, body)
	}
	var s apitype.Session
	decodeRaw(t, string(body), &s)
	if s.Stats.ActiveSeconds != s.Usage.ActiveSeconds {
		t.Fatalf("stats.active_seconds %v, usage.active_seconds %v", s.Stats.ActiveSeconds, s.Usage.ActiveSeconds)
	}
	return s.Stats.ActiveSeconds
}

// listedActive is the session's active time in GET /v1/sessions.
func listedActive(t *testing.T, h *harness, id string) float64 {
	t.Helper()
	status, _, body := h.do("GET", "/v1/sessions?limit=100", "")
	if status != http.StatusOK {
		t.Fatalf("list: %d %s", status, body)
	}
	var page struct {
		Data []apitype.Session `json:"data"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Data {
		if s.ID == id {
			if s.Stats.ActiveSeconds != s.Usage.ActiveSeconds {
				t.Fatalf("listed: stats %v, usage %v", s.Stats.ActiveSeconds, s.Usage.ActiveSeconds)
			}
			return s.Stats.ActiveSeconds
		}
	}
	t.Fatalf("session %s not listed: %s", id, body)
	return 0
}
