package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func TestSessionCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)

	seedFile(t, h.store, "file_011CNha8iCJcU1wXNR6q4V8w")
	s, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfBetaManagedAgentsAgents: &anthropic.BetaManagedAgentsAgentParams{
			ID: agentID, Version: anthropic.Int(1),
		}},
		EnvironmentID: envID,
		Title:         anthropic.String("first"),
		Metadata:      map[string]string{"ticket": "42"},
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{
			{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{
				URL: "https://github.com/corralhq/corral", AuthorizationToken: "ghp_secret",
			}},
			{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: "file_011CNha8iCJcU1wXNR6q4V8w"}},
		},
		InitialEvents: []anthropic.BetaSessionNewParamsInitialEventUnion{{
			OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
				Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{
					{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "hello"}},
				},
			},
		}},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if s.Agent.ID != agentID || s.Agent.Version != 1 || s.Agent.Name != "seed agent" || s.EnvironmentID != envID ||
		s.Title != "first" || s.Metadata["ticket"] != "42" || s.Status != "running" {
		t.Fatalf("session = %s", s.RawJSON())
	}
	if len(s.Agent.Tools) != 1 || s.Agent.Tools[0].Name != "lookup" {
		t.Errorf("agent snapshot tools = %s", s.RawJSON())
	}
	var got apitype.Session
	decodeRaw(t, s.RawJSON(), &got)
	if len(got.Resources) != 2 || got.Resources[0].MountPath != "/workspace/corral" ||
		got.Resources[1].MountPath != "/mnt/session/uploads/file_011CNha8iCJcU1wXNR6q4V8w" {
		t.Errorf("resources = %+v", got.Resources)
	}
	if strings.Contains(s.RawJSON(), "ghp_secret") {
		t.Errorf("authorization token leaked: %s", s.RawJSON())
	}
	// The initial event is in the log, unprocessed, and the session is runnable for a brain.
	events, err := h.store.EventList(ctx, &store.EventListParams{SessionID: s.ID, Limit: 10})
	if err != nil || len(events) != 1 || events[0].Type != apitype.EventUserMessage || events[0].ProcessedAt != nil {
		t.Fatalf("log = %+v, %v", events, err)
	}
	leases, err := h.store.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "test", TTL: 60e9, SessionID: s.ID})
	if err != nil || leases[0].SessionID != s.ID {
		t.Fatalf("session not runnable: %v", err)
	}

	// The agent may be named by a bare id, which pins the latest version.
	s2, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
	})
	if err != nil || s2.Agent.Version != 1 || s2.Title != "" || s2.Status != "idle" {
		t.Fatalf("create by id: %v %s", err, s2.RawJSON())
	}

	for _, tc := range []struct {
		name   string
		params anthropic.BetaSessionNewParams
		status int
		typ    apitype.ErrorType
	}{
		{"unknown agent", anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String("agent_nope")}, EnvironmentID: envID,
		}, http.StatusNotFound, apitype.ErrNotFound},
		{"unknown environment", anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: "env_nope",
		}, http.StatusNotFound, apitype.ErrNotFound},
		{"unknown version", anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfBetaManagedAgentsAgents: &anthropic.BetaManagedAgentsAgentParams{
				ID: agentID, Version: anthropic.Int(5),
			}}, EnvironmentID: envID,
		}, http.StatusBadRequest, apitype.ErrInvalidRequest},
	} {
		_, err := h.client.Beta.Sessions.New(ctx, tc.params)
		t.Run(tc.name, func(t *testing.T) { wantAPIError(t, err, tc.status, tc.typ) })
	}

	if _, err := h.client.Beta.Environments.Archive(ctx, envID, anthropic.BetaEnvironmentArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
	})
	if code := errorCode(t, wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)); code != "environment_archived" {
		t.Errorf("error_code = %q", code)
	}
}

func TestSessionWithOverrides(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	status, _, body := h.do("POST", "/v1/sessions", `{"environment_id":"`+envID+`","agent":{"type":"agent_with_overrides","id":"`+agentID+`","system":"override","model":"claude-opus-4-6","tools":[]}}`)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var s apitype.Session
	decodeRaw(t, string(body), &s)
	if s.Agent.System != "override" || s.Agent.Model.ID != "claude-opus-4-6" || len(s.Agent.Tools) != 0 {
		t.Errorf("agent = %+v", s.Agent)
	}
}

func TestSessionUpdateArchiveDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)

	up, err := h.client.Beta.Sessions.Update(ctx, id, anthropic.BetaSessionUpdateParams{
		Title: anthropic.String("renamed"), Metadata: map[string]string{"a": "1", "b": "2"},
	})
	if err != nil || up.Title != "renamed" || up.Metadata["a"] != "1" {
		t.Fatalf("update: %v %s", err, up.RawJSON())
	}
	up, err = h.client.Beta.Sessions.Update(ctx, id, anthropic.BetaSessionUpdateParams{Metadata: map[string]string{"a": ""}})
	if err != nil || len(up.Metadata) != 1 || up.Metadata["b"] != "2" || up.Title != "renamed" {
		t.Fatalf("metadata patch: %v %s", err, up.RawJSON())
	}

	arch, err := h.client.Beta.Sessions.Archive(ctx, id, anthropic.BetaSessionArchiveParams{})
	if err != nil || arch.ArchivedAt.IsZero() {
		t.Fatalf("archive: %v %s", err, arch.RawJSON())
	}
	list, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{})
	if err != nil || len(list.Data) != 0 {
		t.Fatalf("list hides archived: %v %s", err, list.RawJSON())
	}

	del, err := h.client.Beta.Sessions.Delete(ctx, id, anthropic.BetaSessionDeleteParams{})
	if err != nil || del.ID != id || del.Type != "session_deleted" {
		t.Fatalf("delete: %v", err)
	}
	_, err = h.client.Beta.Sessions.Get(ctx, id, anthropic.BetaSessionGetParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Sessions.Delete(ctx, id, anthropic.BetaSessionDeleteParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
}

func TestSessionListFiltersAndPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	other, err := h.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "other", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "m"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 5 {
		ids = append(ids, h.newSession(ctx, agentID, envID))
	}
	h.newSession(ctx, other.ID, envID)

	// Newest first by default, three pages of two, the last one full and without a next page.
	var got []string
	pages := 0
	page, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{
		AgentID: anthropic.String(agentID), Limit: anthropic.Int(2),
	})
	var second string
	for page != nil && err == nil {
		pages++
		if len(page.Data) == 0 {
			t.Fatalf("empty page %d", pages)
		}
		if pages == 1 && page.PrevPage != "" {
			t.Errorf("first page has prev_page %q", page.PrevPage)
		}
		if pages == 2 {
			second = page.PrevPage
		}
		for _, s := range page.Data {
			got = append(got, s.ID)
		}
		page, err = page.GetNextPage()
	}
	if err != nil || pages != 3 || len(got) != 5 {
		t.Fatalf("pages=%d got=%d err=%v", pages, len(got), err)
	}
	for i := range ids {
		if got[i] != ids[len(ids)-1-i] {
			t.Fatalf("order = %v, want newest first of %v", got, ids)
		}
	}
	// prev_page of the second page leads back to the first page.
	if second == "" {
		t.Fatal("second page has no prev_page")
	}
	back, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{
		AgentID: anthropic.String(agentID), Limit: anthropic.Int(2), Page: anthropic.String(second),
	})
	if err != nil || len(back.Data) != 2 || back.Data[0].ID != got[0] || back.Data[1].ID != got[1] || back.PrevPage != "" {
		t.Fatalf("prev page: %v %s", err, back.RawJSON())
	}

	asc, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{
		AgentID: anthropic.String(agentID), Order: anthropic.BetaSessionListParamsOrderAsc, Limit: anthropic.Int(100),
	})
	if err != nil || len(asc.Data) != 5 || asc.Data[0].ID != ids[0] || asc.NextPage != "" {
		t.Fatalf("asc: %v %s", err, asc.RawJSON())
	}
	idle, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{Statuses: []string{"idle"}})
	if err != nil || len(idle.Data) != 6 {
		t.Fatalf("statuses=idle: %v %d", err, len(idle.Data))
	}
	running, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{Statuses: []string{"running"}})
	if err != nil || len(running.Data) != 0 {
		t.Fatalf("statuses=running: %v %d", err, len(running.Data))
	}
	v1, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{AgentID: anthropic.String(other.ID), AgentVersion: anthropic.Int(1)})
	if err != nil || len(v1.Data) != 1 {
		t.Fatalf("agent_version: %v %d", err, len(v1.Data))
	}
	_, err = h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{Statuses: []string{"sleeping"}})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	_, err = h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{Page: anthropic.String("garbage!")})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
}

// An update that changes something emits session.updated with only the changed fields; one that changes
// nothing emits nothing.
func TestSessionUpdateEmitsSessionUpdated(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	updated := func() []anthropic.BetaManagedAgentsSessionUpdatedEvent {
		t.Helper()
		page, err := h.client.Beta.Sessions.Events.List(ctx, id, anthropic.BetaSessionEventListParams{
			Types: []anthropic.BetaManagedAgentsSessionEventType{"session.updated"}})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		var out []anthropic.BetaManagedAgentsSessionUpdatedEvent
		for _, e := range page.Data {
			out = append(out, e.AsSessionUpdated())
		}
		return out
	}

	update := func(p anthropic.BetaSessionUpdateParams) {
		t.Helper()
		if _, err := h.client.Beta.Sessions.Update(ctx, id, p); err != nil {
			t.Fatalf("update: %v", err)
		}
	}
	update(anthropic.BetaSessionUpdateParams{Title: anthropic.String("renamed"), Metadata: map[string]string{"a": "1"}})
	evs := updated()
	if len(evs) != 1 {
		t.Fatalf("%d session.updated events, want 1", len(evs))
	}
	e := evs[0]
	if e.Title != "renamed" || e.Metadata["a"] != "1" || e.JSON.Agent.Raw() != "" || e.JSON.Budget.Raw() != "" ||
		e.ProcessedAt.IsZero() {
		t.Errorf("session.updated = %s, want title and metadata only", e.RawJSON())
	}

	update(anthropic.BetaSessionUpdateParams{Title: anthropic.String("renamed")})
	if n := len(updated()); n != 1 {
		t.Errorf("an update that changed nothing emitted session.updated (%d events)", n)
	}

	update(anthropic.BetaSessionUpdateParams{Agent: anthropic.BetaManagedAgentsSessionAgentUpdateParam{
		Tools: []anthropic.BetaManagedAgentsSessionAgentUpdateToolUnionParam{{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{
			Name: "other", Description: "another tool",
			InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{Properties: map[string]any{}},
		}}}}})
	evs = updated()
	if len(evs) != 2 {
		t.Fatalf("%d session.updated events, want 2", len(evs))
	}
	if e := evs[1]; e.Agent.ID != agentID || len(e.Agent.Tools) != 1 || e.Agent.Tools[0].Name != "other" ||
		e.JSON.Title.Raw() != "" || e.JSON.Metadata.Raw() != "" {
		t.Errorf("session.updated = %s, want the agent snapshot only", e.RawJSON())
	}
}

// TestCreateReportsInitialOutcomes: a session created with a user.define_outcome among its initial events
// reports its evaluation at once (derived from the events just appended), as a later get derives it from the log.
func TestCreateReportsInitialOutcomes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	agentID, envID := h.seed(ctxT(t))
	code, _, body := h.do("POST", "/v1/sessions", `{"agent":"`+agentID+`","environment_id":"`+envID+`","initial_events":[`+
		`{"type":"user.define_outcome","description":"a short poem","rubric":{"type":"text","content":"rhymes"}},`+
		`{"type":"user.message","content":[{"type":"text","text":"go"}]}]}`)
	if code != http.StatusOK {
		t.Fatalf("create: %d %s", code, body)
	}
	var created struct {
		ID    string            `json:"id"`
		Evals []json.RawMessage `json:"outcome_evaluations"`
	}
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatal(err)
	}
	if len(created.Evals) != 1 || !strings.Contains(string(created.Evals[0]), `"description":"a short poem"`) ||
		!strings.Contains(string(created.Evals[0]), `"result":"pending"`) {
		t.Fatalf("the create's outcome_evaluations: %s", body)
	}
	code, _, got := h.do("GET", "/v1/sessions/"+created.ID, "")
	var read struct {
		Evals []json.RawMessage `json:"outcome_evaluations"`
	}
	if code != http.StatusOK || json.Unmarshal(got, &read) != nil || len(read.Evals) != 1 || string(read.Evals[0]) != string(created.Evals[0]) {
		t.Fatalf("get: %d %s; want the create's %s", code, got, created.Evals)
	}
}
