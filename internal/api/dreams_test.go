package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestDreamCreateValidation: every malformed «DreamCreate» is a 400 naming what is wrong, before any lookup.
func TestDreamCreateValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	msIn := `{"type":"memory_store","memory_store_id":"memstore_a"}`
	sessions := func(ids ...string) string {
		q := make([]string, len(ids))
		for i, id := range ids {
			q[i] = fmt.Sprintf("%q", id)
		}
		return `{"type":"sessions","session_ids":[` + strings.Join(q, ",") + `]}`
	}
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("sesn_%03d", i)
	}
	in := `"inputs":[` + msIn + `,` + sessions("sesn_a") + `]`
	for _, tc := range []struct{ name, body, want string }{
		{"no inputs", `{"model":"claude-x"}`, "inputs: required"},
		{"one input", `{"inputs":[` + msIn + `],"model":"claude-x"}`, "exactly one memory_store entry and one sessions entry"},
		{"three inputs", `{"inputs":[` + msIn + `,` + msIn + `,` + sessions("sesn_a") + `],"model":"claude-x"}`, "got 3 entries"},
		{"two stores", `{"inputs":[` + msIn + `,` + msIn + `],"model":"claude-x"}`, "a second memory_store entry"},
		{"unknown input", `{"inputs":[` + msIn + `,{"type":"files"}],"model":"claude-x"}`, `inputs[1].type: must be "memory_store" or "sessions"`},
		{"no store id", `{"inputs":[{"type":"memory_store"},` + sessions("sesn_a") + `],"model":"claude-x"}`, "inputs[0].memory_store_id: required"},
		{"no sessions", `{"inputs":[` + msIn + `,` + sessions() + `],"model":"claude-x"}`, "must list 1 to 100 sessions, got 0"},
		{"101 sessions", `{"inputs":[` + msIn + `,` + sessions(many...) + `],"model":"claude-x"}`, "must list 1 to 100 sessions, got 101"},
		{"duplicate session", `{"inputs":[` + msIn + `,` + sessions("sesn_a", "sesn_b", "sesn_a") + `],"model":"claude-x"}`, "inputs[1].session_ids[2]: session sesn_a is listed twice"},
		{"no model", `{` + in + `}`, "model: required"},
		{"model number", `{` + in + `,"model":7}`, "model: expected a model id or an object"},
		{"fast", `{` + in + `,"model":{"id":"claude-x","speed":"fast"}}`, `model.speed: can only be "standard"`},
		{"model without id", `{` + in + `,"model":{"speed":"standard"}}`, "model.id: required"},
		{"empty instructions", `{` + in + `,"model":"claude-x","instructions":""}`, "instructions"},
		{"long instructions", `{` + in + `,"model":"claude-x","instructions":"` + strings.Repeat("x", 4097) + `"}`, "instructions"},
		{"unknown behavior", `{` + in + `,"model":"claude-x","output_behavior":{"type":"overwrite"}}`, `output_behavior.type: must be "create_new" or "update_existing"`},
		{"update another store", `{` + in + `,"model":"claude-x","output_behavior":{"type":"update_existing","memory_store_id":"memstore_b"}}`,
			"output_behavior.memory_store_id: must be the memory store the dream reads (memstore_a)"},
		{"update without store", `{` + in + `,"model":"claude-x","output_behavior":{"type":"update_existing"}}`, "output_behavior.memory_store_id: required"},
		{"unknown field", `{` + in + `,"model":"claude-x","dream":true}`, "dream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := h.do(http.MethodPost, "/v1/dreams", tc.body)
			var env envelope
			decodeRaw(t, string(body), &env)
			if status != http.StatusBadRequest || !strings.Contains(env.Error.Message, tc.want) {
				t.Fatalf("got %d %s, want 400 with %q", status, body, tc.want)
			}
		})
	}

	// The same through the official SDK: it sends what a client sends.
	_, err := h.client.Beta.Dreams.New(ctxT(t), anthropic.BetaDreamNewParams{
		Inputs: []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfMemoryStore("memstore_a"),
			anthropic.BetaDreamInputParamOfSessions([]string{"sesn_a", "sesn_a"})},
		Model: anthropic.BetaDreamNewParamsModelUnion{OfString: anthropic.String("claude-x")},
	})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
}

// seedDream stores a dream with the status, created at, as the runner would have left it.
func (h *harness) seedDream(status apitype.DreamStatus, at time.Time, sessionID string) *apitype.Dream {
	h.t.Helper()
	d := &apitype.Dream{Type: apitype.ObjectDream, ID: apitype.NewID(apitype.PrefixDream), Status: status,
		Inputs: []apitype.DreamInput{{Type: apitype.DreamInputMemoryStore, MemoryStoreID: "memstore_in"},
			{Type: apitype.DreamInputSessions, SessionIDs: []string{"sesn_a", "sesn_b"}}},
		Model: apitype.DreamModel{ID: "claude-x"}, OutputBehavior: apitype.DreamOutputBehavior{Type: apitype.DreamCreateNew},
		Outputs: []apitype.DreamOutput{}, CreatedAt: at}
	if sessionID != "" {
		d.SessionID = &sessionID
		d.Outputs = []apitype.DreamOutput{{Type: "memory_store", MemoryStoreID: "memstore_out"}}
	}
	if status.Terminal() {
		end := at.Add(time.Minute)
		d.EndedAt = &end
	}
	if status == apitype.DreamFailed {
		d.Error = &apitype.DreamError{Type: apitype.DreamErrTimeout, Message: "too long"}
	}
	if err := h.store.DreamCreate(ctxT(h.t), d); err != nil {
		h.t.Fatalf("seed dream: %v", err)
	}
	return d
}

// TestDreamStateMachine: get, list (newest first, statuses, archived, pages), archive (terminal only, idempotent)
// and cancel (pending or running only, idempotent on canceled, interrupting the dream's session), through the
// official SDK.
func TestDreamStateMachine(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	sessID := h.newSession(ctx, agentID, envID)
	// The dream's session is mid-turn: a user.message with no brain to take it.
	if _, err := h.client.Beta.Sessions.Events.Send(ctx, sessID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userText("dream")}}); err != nil {
		t.Fatalf("send: %v", err)
	}
	t0 := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	pending := h.seedDream(apitype.DreamPending, t0, "")
	running := h.seedDream(apitype.DreamRunning, t0.Add(time.Second), sessID)
	completed := h.seedDream(apitype.DreamCompleted, t0.Add(2*time.Second), sessID)
	failed := h.seedDream(apitype.DreamFailed, t0.Add(3*time.Second), "")

	d, err := h.client.Beta.Dreams.Get(ctx, pending.ID, anthropic.BetaDreamGetParams{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if d.Status != anthropic.BetaDreamStatusPending || d.Model.ID != "claude-x" || len(d.Outputs) != 0 ||
		d.JSON.SessionID.Raw() != "null" || d.JSON.EndedAt.Raw() != "null" || d.JSON.Error.Raw() != "null" ||
		d.Inputs[1].SessionIDs[1] != "sesn_b" || d.OutputBehavior.Type != "create_new" || string(d.Type) != "dream" {
		t.Fatalf("got %s", d.RawJSON())
	}
	_, err = h.client.Beta.Dreams.Get(ctx, "drm_missing", anthropic.BetaDreamGetParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)

	list := func(p anthropic.BetaDreamListParams) []string {
		t.Helper()
		page, err := h.client.Beta.Dreams.List(ctx, p)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		var ids []string
		for _, d := range page.Data {
			ids = append(ids, d.ID)
		}
		return ids
	}
	want := func(got []string, want ...*apitype.Dream) {
		t.Helper()
		var w []string
		for _, d := range want {
			w = append(w, d.ID)
		}
		if !slices.Equal(got, w) {
			t.Fatalf("listed %v, want %v", got, w)
		}
	}
	want(list(anthropic.BetaDreamListParams{}), failed, completed, running, pending)
	want(list(anthropic.BetaDreamListParams{Statuses: []anthropic.BetaDreamStatus{"failed", "pending"}}), failed, pending)
	want(list(anthropic.BetaDreamListParams{CreatedAtGt: anthropic.Time(t0), CreatedAtLt: anthropic.Time(t0.Add(3 * time.Second))}),
		completed, running)
	var all []string
	for d := range h.client.Beta.Dreams.ListAutoPaging(ctx, anthropic.BetaDreamListParams{Limit: anthropic.Int(3)}).All() {
		all = append(all, d.ID)
	}
	if len(all) != 4 {
		t.Fatalf("paged %v, want 4 dreams", all)
	}
	status, _, body := h.do(http.MethodGet, "/v1/dreams?statuses[]=dreaming", "")
	if status != http.StatusBadRequest {
		t.Fatalf("unknown status: %d %s", status, body)
	}

	// Archive: only a dream that has ended, and once.
	_, err = h.client.Beta.Dreams.Archive(ctx, pending.ID, anthropic.BetaDreamArchiveParams{})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	_, err = h.client.Beta.Dreams.Archive(ctx, running.ID, anthropic.BetaDreamArchiveParams{})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	a1, err := h.client.Beta.Dreams.Archive(ctx, failed.ID, anthropic.BetaDreamArchiveParams{})
	if err != nil || a1.ArchivedAt.IsZero() || a1.Status != anthropic.BetaDreamStatusFailed || a1.Error.Type != "timeout" {
		t.Fatalf("archive failed dream: %v %s", err, a1.RawJSON())
	}
	a2, err := h.client.Beta.Dreams.Archive(ctx, failed.ID, anthropic.BetaDreamArchiveParams{})
	if err != nil || !a2.ArchivedAt.Equal(a1.ArchivedAt) {
		t.Fatalf("archive again: %v, archived_at %v then %v", err, a1.ArchivedAt, a2.ArchivedAt)
	}
	want(list(anthropic.BetaDreamListParams{}), completed, running, pending)
	want(list(anthropic.BetaDreamListParams{IncludeArchived: anthropic.Bool(true)}), failed, completed, running, pending)
	if g, err := h.client.Beta.Dreams.Get(ctx, failed.ID, anthropic.BetaDreamGetParams{}); err != nil || g.ArchivedAt.IsZero() {
		t.Fatalf("get archived dream: %v", err)
	}

	// Cancel: pending and running dreams; a dream that ended first is a 400; a canceled one answers again.
	c, err := h.client.Beta.Dreams.Cancel(ctx, pending.ID, anthropic.BetaDreamCancelParams{})
	if err != nil || c.Status != anthropic.BetaDreamStatusCanceled || c.EndedAt.IsZero() {
		t.Fatalf("cancel pending: %v %s", err, c.RawJSON())
	}
	c2, err := h.client.Beta.Dreams.Cancel(ctx, pending.ID, anthropic.BetaDreamCancelParams{})
	if err != nil || c2.Status != anthropic.BetaDreamStatusCanceled || !c2.EndedAt.Equal(c.EndedAt) {
		t.Fatalf("cancel again: %v %s", err, c2.RawJSON())
	}
	_, err = h.client.Beta.Dreams.Cancel(ctx, completed.ID, anthropic.BetaDreamCancelParams{})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	_, err = h.client.Beta.Dreams.Cancel(ctx, failed.ID, anthropic.BetaDreamCancelParams{})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	_, err = h.client.Beta.Dreams.Cancel(ctx, "drm_missing", anthropic.BetaDreamCancelParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)

	c, err = h.client.Beta.Dreams.Cancel(ctx, running.ID, anthropic.BetaDreamCancelParams{})
	if err != nil || c.Status != anthropic.BetaDreamStatusCanceled || c.SessionID != sessID {
		t.Fatalf("cancel running: %v %s", err, c.RawJSON())
	}
	// The running dream's session got an interrupt.
	evs, err := h.client.Beta.Sessions.Events.List(ctx, sessID, anthropic.BetaSessionEventListParams{})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	var interrupted bool
	for _, ev := range evs.Data {
		interrupted = interrupted || ev.Type == "user.interrupt"
	}
	if !interrupted {
		t.Fatalf("the canceled dream's session got no user.interrupt")
	}
	// An archived canceled dream.
	if a, err := h.client.Beta.Dreams.Archive(ctx, running.ID, anthropic.BetaDreamArchiveParams{}); err != nil ||
		a.Status != anthropic.BetaDreamStatusCanceled {
		t.Fatalf("archive canceled: %v", err)
	}
}

// TestDreamCreate: a valid dream is pending with its inputs as given (sessions sorted), its model as an object;
// unknown or archived inputs are refused; two update_existing dreams on one store conflict.
func TestDreamCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	s1, s2 := h.newSession(ctx, agentID, envID), h.newSession(ctx, agentID, envID)
	ms := h.newMemoryStore(ctx, "notes")
	params := func(store string, sessions ...string) anthropic.BetaDreamNewParams {
		return anthropic.BetaDreamNewParams{
			Inputs: []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfSessions(sessions),
				anthropic.BetaDreamInputParamOfMemoryStore(store)},
			Model: anthropic.BetaDreamNewParamsModelUnion{OfString: anthropic.String("claude-x")},
		}
	}
	p := params(ms.ID, s2, s1)
	p.Instructions = anthropic.String("focus on the build")
	d, err := h.client.Beta.Dreams.New(ctx, p)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	sorted := []string{s1, s2}
	slices.Sort(sorted)
	if d.Status != anthropic.BetaDreamStatusPending || !strings.HasPrefix(d.ID, "drm_") || d.Model.ID != "claude-x" ||
		d.Instructions != "focus on the build" || d.OutputBehavior.Type != "create_new" || len(d.Outputs) != 0 ||
		d.JSON.Outputs.Raw() != "[]" || d.JSON.SessionID.Raw() != "null" || d.Usage.InputTokens != 0 ||
		d.Inputs[0].Type != "memory_store" || d.Inputs[0].MemoryStoreID != ms.ID || !slices.Equal(d.Inputs[1].SessionIDs, sorted) {
		t.Fatalf("created %s", d.RawJSON())
	}
	if !strings.Contains(d.RawJSON(), `"model":{"id":"claude-x"}`) {
		t.Fatalf("model not an object: %s", d.RawJSON())
	}

	_, err = h.client.Beta.Dreams.New(ctx, params("memstore_missing", s1))
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Dreams.New(ctx, params(ms.ID, s1, "sesn_missing"))
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	archived := h.newMemoryStore(ctx, "old")
	if _, err := h.client.Beta.MemoryStores.Archive(ctx, archived.ID, anthropic.BetaMemoryStoreArchiveParams{}); err != nil {
		t.Fatalf("archive: %v", err)
	}
	_, err = h.client.Beta.Dreams.New(ctx, params(archived.ID, s1))
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)

	// update_existing: one dream at a time per store; a dream that creates a store is not in the way.
	up := params(ms.ID, s1)
	up.OutputBehavior = anthropic.BetaOutputBehaviorParamOfUpdateExisting(ms.ID)
	first, err := h.client.Beta.Dreams.New(ctx, up)
	if err != nil || first.OutputBehavior.Type != "update_existing" || first.OutputBehavior.MemoryStoreID != ms.ID {
		t.Fatalf("update_existing: %v", err)
	}
	_, err = h.client.Beta.Dreams.New(ctx, up)
	wantAPIError(t, err, http.StatusConflict, apitype.ErrConflict)
	if _, err := h.client.Beta.Dreams.Cancel(ctx, first.ID, anthropic.BetaDreamCancelParams{}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if _, err := h.client.Beta.Dreams.New(ctx, up); err != nil {
		t.Fatalf("update_existing once the first ended: %v", err)
	}
}

// TestDreamRunner: the runner's steps over the store, one RunDreams pass at a time: a dream whose sessions were
// deleted fails with a clear error and writes nothing; a running dream follows its session's usage, completes on
// an end_turn idle, fails when its session is deleted, and times out (its session interrupted).
func TestDreamRunner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	runner := newAPI(t, api.Config{Store: h.store, DreamTimeout: time.Hour})
	agentID, envID := h.seed(ctx)
	ms := h.newMemoryStore(ctx, "notes")
	gone := h.newSession(ctx, agentID, envID)
	kept := h.newSession(ctx, agentID, envID)
	d, err := h.client.Beta.Dreams.New(ctx, anthropic.BetaDreamNewParams{
		Inputs: []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfMemoryStore(ms.ID),
			anthropic.BetaDreamInputParamOfSessions([]string{kept, gone})},
		Model: anthropic.BetaDreamNewParamsModelUnion{OfString: anthropic.String("claude-x")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Beta.Sessions.Delete(ctx, gone, anthropic.BetaSessionDeleteParams{}); err != nil {
		t.Fatal(err)
	}
	if err := runner.RunDreams(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	failed, err := h.client.Beta.Dreams.Get(ctx, d.ID, anthropic.BetaDreamGetParams{})
	if err != nil || failed.Status != anthropic.BetaDreamStatusFailed || failed.Error.Type != string(apitype.DreamErrSessionsMissing) ||
		!strings.Contains(failed.Error.Message, gone) || len(failed.Outputs) != 0 || failed.JSON.SessionID.Raw() != "null" {
		t.Fatalf("dream over a deleted session: %v %s", err, failed.RawJSON())
	}
	stores, err := h.client.Beta.MemoryStores.List(ctx, anthropic.BetaMemoryStoreListParams{})
	if err != nil || len(stores.Data) != 1 {
		t.Fatalf("a failed dream made a store: %v %d stores", err, len(stores.Data))
	}

	// A runner that crashed after it made a dream's session: the next pass finds the session (its id derives
	// from the dream's) and records it, instead of making another.
	d, err = h.client.Beta.Dreams.New(ctx, anthropic.BetaDreamNewParams{
		Inputs: []anthropic.BetaDreamInputUnionParam{anthropic.BetaDreamInputParamOfMemoryStore(ms.ID),
			anthropic.BetaDreamInputParamOfSessions([]string{kept})},
		Model:          anthropic.BetaDreamNewParamsModelUnion{OfString: anthropic.String("claude-x")},
		OutputBehavior: anthropic.BetaOutputBehaviorParamOfUpdateExisting(ms.ID),
	})
	if err != nil {
		t.Fatal(err)
	}
	made := "sesn_" + strings.TrimPrefix(d.ID, "drm_")
	now := time.Now().UTC()
	if _, _, err := h.store.SessionCreate(ctx, &store.SessionCreateParams{Session: &apitype.Session{Type: apitype.ObjectSession,
		ID: made, Status: apitype.StatusIdle, Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if err := runner.RunDreams(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	resumed, err := h.client.Beta.Dreams.Get(ctx, d.ID, anthropic.BetaDreamGetParams{})
	if err != nil || resumed.Status != anthropic.BetaDreamStatusRunning || resumed.SessionID != made ||
		len(resumed.Outputs) != 1 || resumed.Outputs[0].MemoryStoreID != ms.ID {
		t.Fatalf("resumed dream: %v %s", err, resumed.RawJSON())
	}
	sessions, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{})
	if err != nil || len(sessions.Data) != 2 {
		t.Fatalf("sessions after the resumed start: %v %d, want the input and the dream's", err, len(sessions.Data))
	}
	if _, err := h.client.Beta.Dreams.Cancel(ctx, d.ID, anthropic.BetaDreamCancelParams{}); err != nil {
		t.Fatal(err)
	}

	// Running dreams over real sessions standing in for the dreams' own.
	run := func(sessID string) *apitype.Dream {
		t.Helper()
		d := h.seedDream(apitype.DreamRunning, time.Now().UTC(), sessID)
		return d
	}
	get := func(id string) *anthropic.BetaDream {
		t.Helper()
		d, err := h.client.Beta.Dreams.Get(ctx, id, anthropic.BetaDreamGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	usage := &apitype.SessionUsage{InputTokens: 120, OutputTokens: 30, CacheReadInputTokens: 5,
		CacheCreation: &apitype.CacheCreation{Ephemeral5mInputTokens: 2, Ephemeral1hInputTokens: 3}}
	working := h.newSession(ctx, agentID, envID)
	if _, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: working, Status: apitype.StatusRunning,
		Usage: usage}); err != nil {
		t.Fatal(err)
	}
	wd := run(working)
	deleted := h.newSession(ctx, agentID, envID)
	dd := run(deleted)
	if err := runner.RunDreams(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if g := get(wd.ID); g.Status != anthropic.BetaDreamStatusRunning || g.Usage.InputTokens != 120 || g.Usage.OutputTokens != 30 ||
		g.Usage.CacheReadInputTokens != 5 || g.Usage.CacheCreationInputTokens != 5 {
		t.Fatalf("running dream: %s", g.RawJSON())
	}
	idle, err := apitype.MakeEvent(apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: working, Events: []apitype.NewEvent{idle},
		Status: apitype.StatusIdle}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Beta.Sessions.Delete(ctx, deleted, anthropic.BetaSessionDeleteParams{}); err != nil {
		t.Fatal(err)
	}
	if err := runner.RunDreams(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if g := get(wd.ID); g.Status != anthropic.BetaDreamStatusCompleted || g.EndedAt.IsZero() || g.JSON.Error.Raw() != "null" {
		t.Fatalf("dream whose session ended its turn: %s", g.RawJSON())
	}
	if g := get(dd.ID); g.Status != anthropic.BetaDreamStatusFailed || g.Error.Type != string(apitype.DreamErrInternal) ||
		!strings.Contains(g.Error.Message, "deleted") {
		t.Fatalf("dream whose session was deleted: %s", g.RawJSON())
	}

	// A dream past its time limit fails with a timeout, and its session gets an interrupt.
	slow := h.newSession(ctx, agentID, envID)
	if _, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: slow, Status: apitype.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	sd := h.seedDream(apitype.DreamRunning, time.Now().UTC().Add(-time.Minute), slow)
	impatient := newAPI(t, api.Config{Store: h.store, DreamTimeout: time.Second})
	if err := impatient.RunDreams(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if g := get(sd.ID); g.Status != anthropic.BetaDreamStatusFailed || g.Error.Type != "timeout" {
		t.Fatalf("dream past its limit: %s", g.RawJSON())
	}
	evs, err := h.client.Beta.Sessions.Events.List(ctx, slow, anthropic.BetaSessionEventListParams{})
	if err != nil || !slices.ContainsFunc(evs.Data, func(e anthropic.BetaManagedAgentsSessionEventUnion) bool {
		return e.Type == "user.interrupt"
	}) {
		t.Fatalf("the timed-out dream's session was not interrupted: %v", err)
	}
}

// TestDreamTranscriptLongLog: a session whose log is longer than a transcript may be is cut to its end, within
// the limit, at a line's start (never inside a character: the file stays UTF-8 text), and says so.
func TestDreamTranscriptLongLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	sess := h.newSession(ctx, agentID, envID)
	srv := newAPI(t, api.Config{Store: h.store})
	for i := range 40 {
		h.appendAgent(ctx, sess, apitype.EventAgentMessage, apitype.UserMessage{Content: []apitype.ContentBlock{
			{Type: apitype.ContentText, Text: fmt.Sprintf("message %d: %s", i, strings.Repeat("€", 7000))}}})
	}
	for limit := 100_000; limit < 100_003; limit++ {
		out, err := srv.RenderTranscript(ctx, sess, limit)
		if err != nil {
			t.Fatal(err)
		}
		text := string(out)
		switch {
		case len(out) > limit:
			t.Errorf("limit %d: a transcript of %d bytes", limit, len(out))
		case !utf8.Valid(out):
			t.Errorf("limit %d: the transcript is not valid UTF-8 (cut inside a character)", limit)
		case !strings.HasPrefix(text, "# Session "+sess) || !strings.Contains(text, "transcript's beginning was cut"):
			t.Errorf("limit %d: the transcript lacks its head or the cut's note:\n%.300s", limit, text)
		case !strings.Contains(text, "message 39: ") || strings.Contains(text, "message 0: "):
			t.Errorf("limit %d: the transcript does not keep the log's end", limit)
		}
	}
}
