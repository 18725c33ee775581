package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

const testKey = "test-key"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newServer is a real API server on httptest over SQLite in a temporary directory, and a client of it.
func newServer(t *testing.T) (*client.Client, store.Store, *httptest.Server) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	a, err := api.New(api.Config{
		Store:             st,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Keys:              &api.KeyAuth{Static: testKey, Store: st},
		HeartbeatInterval: 20 * time.Millisecond,
		PollInterval:      50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	c, err := client.New(client.Config{BaseURL: srv.URL + "/", APIKey: testKey, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c, st, srv
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"", "127.0.0.1:8080", "ftp://host", "http://"} {
		if _, err := client.New(client.Config{BaseURL: base}); err == nil {
			t.Errorf("New(%q) accepted", base)
		}
	}
}

func TestAgents(t *testing.T) {
	t.Parallel()
	c, _, _ := newServer(t)
	ctx := ctxT(t)
	a, err := c.AgentCreate(ctx, &client.AgentCreateParams{
		Name: "helper", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}, System: "Be brief.",
		Tools:    []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}},
		Metadata: map[string]string{"team": "a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !apitype.HasPrefix(a.ID, apitype.PrefixAgent) || a.Version != 1 || a.Name != "helper" || a.System != "Be brief." ||
		a.Model.ID != "claude-sonnet-4-5" || len(a.Tools) != 1 || a.Tools[0].Type != apitype.ToolTypeAgentToolset ||
		a.Metadata["team"] != "a" {
		t.Fatalf("created agent = %+v", a)
	}
	name, one := "renamed", 1
	up, err := c.AgentUpdate(ctx, a.ID, &client.AgentUpdateParams{Version: &one, Name: &name})
	if err != nil {
		t.Fatal(err)
	}
	if up.Version != 2 || up.Name != "renamed" || up.System != "Be brief." {
		t.Errorf("updated agent = version %d name %q system %q, want 2 renamed and the system kept", up.Version, up.Name, up.System)
	}
	if _, err := c.AgentUpdate(ctx, a.ID, &client.AgentUpdateParams{Version: &one, Name: &name}); !isStatus(err, http.StatusConflict) {
		t.Errorf("update at a stale version: %v, want 409", err)
	}
	if v1, err := c.AgentGet(ctx, a.ID, 1); err != nil || v1.Name != "helper" {
		t.Errorf("get version 1 = %+v, %v", v1, err)
	}
	if latest, err := c.AgentGet(ctx, a.ID, 0); err != nil || latest.Version != 2 {
		t.Errorf("get latest = %+v, %v", latest, err)
	}
	b, err := c.AgentCreate(ctx, &client.AgentCreateParams{Name: "second", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := c.AgentList(ctx, &client.ListParams{Limit: 1})
	if err != nil || len(p1.Data) != 1 || p1.Data[0].ID != b.ID || p1.Next() == "" {
		t.Fatalf("first page = %+v, %v; want the newest agent and a next page", p1, err)
	}
	p2, err := c.AgentList(ctx, &client.ListParams{Limit: 1, Page: p1.Next()})
	if err != nil || len(p2.Data) != 1 || p2.Data[0].ID != a.ID {
		t.Fatalf("second page = %+v, %v", p2, err)
	}
	archived, err := c.AgentArchive(ctx, b.ID)
	if err != nil || archived.ArchivedAt == nil {
		t.Fatalf("archive = %+v, %v", archived, err)
	}
	if page, err := c.AgentList(ctx, nil); err != nil || len(page.Data) != 1 || page.Data[0].ID != a.ID {
		t.Errorf("list without archived = %+v, %v", page, err)
	}
	if page, err := c.AgentList(ctx, &client.ListParams{IncludeArchived: true}); err != nil || len(page.Data) != 2 {
		t.Errorf("list with archived = %+v, %v", page, err)
	}
}

func TestEnvironments(t *testing.T) {
	t.Parallel()
	c, _, _ := newServer(t)
	ctx := ctxT(t)
	e, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "limited", Config: apitype.EnvConfig{
		Type:       "cloud",
		Networking: &apitype.Networking{Type: "limited", AllowedHosts: []string{"example.com"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !apitype.HasPrefix(e.ID, apitype.PrefixEnvironment) || e.Config.Type != "cloud" || e.Config.Networking == nil ||
		!slices.Equal(e.Config.Networking.AllowedHosts, []string{"example.com"}) {
		t.Fatalf("created environment = %+v (networking %+v)", e, e.Config.Networking)
	}
	desc := "for tests"
	if up, err := c.EnvironmentUpdate(ctx, e.ID, &client.EnvironmentUpdateParams{Description: &desc}); err != nil ||
		up.Description == nil || *up.Description != desc {
		t.Errorf("update = %+v, %v", up, err)
	}
	if got, err := c.EnvironmentGet(ctx, e.ID); err != nil || got.Name != "limited" || got.Description == nil {
		t.Errorf("get = %+v, %v", got, err)
	}
	self, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "mine", Config: apitype.EnvConfig{Type: "self_hosted"}})
	if err != nil || self.Config.Type != "self_hosted" {
		t.Fatalf("self_hosted = %+v, %v", self, err)
	}
	if page, err := c.EnvironmentList(ctx, nil); err != nil || len(page.Data) != 2 {
		t.Errorf("list = %+v, %v", page, err)
	}
	if a, err := c.EnvironmentArchive(ctx, self.ID); err != nil || a.ArchivedAt == nil {
		t.Errorf("archive = %+v, %v", a, err)
	}
	if d, err := c.EnvironmentDelete(ctx, self.ID); err != nil || d.ID != self.ID || d.Type != "environment_deleted" {
		t.Errorf("delete = %+v, %v", d, err)
	}
	if _, err := c.EnvironmentGet(ctx, self.ID); !client.IsNotFound(err) {
		t.Errorf("get after delete: %v, want 404", err)
	}
}

// fixture creates an agent and an environment.
func fixture(t *testing.T, c *client.Client) (agentID, envID string) {
	t.Helper()
	ctx := ctxT(t)
	a, err := c.AgentCreate(ctx, &client.AgentCreateParams{Name: "a", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "e", Config: apitype.EnvConfig{Type: "cloud"}})
	if err != nil {
		t.Fatal(err)
	}
	return a.ID, e.ID
}

func TestSessionsAndEvents(t *testing.T) {
	t.Parallel()
	c, _, _ := newServer(t)
	ctx := ctxT(t)
	agentID, envID := fixture(t, c)
	s, err := c.SessionCreate(ctx, &client.SessionCreateParams{
		Agent: client.AgentRef{ID: agentID, Version: 1}, EnvironmentID: envID, Title: "t",
		InitialEvents: []apitype.NewEvent{client.UserMessage("Say <hello> & bye.")},
		Metadata:      map[string]string{"k": "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !apitype.HasPrefix(s.ID, apitype.PrefixSession) || s.Agent.ID != agentID || s.Agent.Version != 1 ||
		s.EnvironmentID != envID || s.Title == nil || *s.Title != "t" || s.Status != apitype.StatusRunning {
		t.Fatalf("created session = %+v", s)
	}
	sent, err := c.EventSend(ctx, s.ID, client.UserMessage("second"), client.UserInterrupt())
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 2 || sent[0].Type != apitype.EventUserMessage || sent[1].Type != apitype.EventUserInterrupt ||
		!apitype.HasPrefix(sent[0].ID, apitype.PrefixEvent) {
		t.Fatalf("sent = %+v", sent)
	}
	var all []*client.Event
	for ev, err := range c.Events(ctx, s.ID, &client.EventListParams{Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ev)
	}
	if len(all) != 3 || all[1].ID != sent[0].ID || all[2].ID != sent[1].ID {
		t.Fatalf("events (a page each) = %v", eventTypes(all))
	}
	var msg apitype.UserMessage
	if err := all[0].Decode(&msg); err != nil || len(msg.Content) != 1 || msg.Content[0].Text != "Say <hello> & bye." {
		t.Errorf("first message = %+v, %v", msg, err)
	}
	desc, err := c.EventList(ctx, s.ID, &client.EventListParams{Desc: true, Limit: 1, Types: []apitype.EventType{apitype.EventUserMessage}})
	if err != nil || len(desc.Data) != 1 || desc.Data[0].ID != sent[0].ID {
		t.Errorf("newest user.message = %+v, %v", desc, err)
	}

	title := "renamed"
	if up, err := c.SessionUpdate(ctx, s.ID, &client.SessionUpdateParams{Title: &title}); err != nil || *up.Title != title {
		t.Errorf("update = %+v, %v", up, err)
	}
	if got, err := c.SessionGet(ctx, s.ID); err != nil || *got.Title != title || got.Metadata["k"] != "v" {
		t.Errorf("get = %+v, %v", got, err)
	}
	other, err := c.SessionCreate(ctx, &client.SessionCreateParams{Agent: client.AgentRef{ID: agentID}, EnvironmentID: envID})
	if err != nil {
		t.Fatal(err)
	}
	if page, err := c.SessionList(ctx, &client.SessionListParams{AgentID: agentID, ListParams: client.ListParams{Limit: 10}}); err != nil || len(page.Data) != 2 || page.Data[0].ID != other.ID {
		t.Errorf("list = %+v, %v", page, err)
	}
	if a, err := c.SessionArchive(ctx, other.ID); err != nil || a.ArchivedAt == nil {
		t.Errorf("archive = %+v, %v", a, err)
	}
	if d, err := c.SessionDelete(ctx, other.ID); err != nil || d.Type != "session_deleted" {
		t.Errorf("delete = %+v, %v", d, err)
	}
}

func eventTypes(events []*client.Event) []apitype.EventType {
	out := make([]apitype.EventType, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

func isStatus(err error, status int) bool {
	e, ok := errors.AsType[*client.Error](err)
	return ok && e.Status == status
}

// Errors come back typed, with the envelope's type and message, the status and the request id.
func TestErrors(t *testing.T) {
	t.Parallel()
	c, _, srv := newServer(t)
	ctx := ctxT(t)
	_, err := c.SessionGet(ctx, "sesn_missing")
	e, ok := errors.AsType[*client.Error](err)
	if !ok || e.Status != http.StatusNotFound || e.Type != string(apitype.ErrNotFound) || !strings.Contains(e.Message, "sesn_missing") ||
		!apitype.HasPrefix(e.RequestID, apitype.PrefixRequest) || e.Temporary() || !client.IsNotFound(err) {
		t.Fatalf("missing session: %#v", err)
	}
	if !strings.Contains(err.Error(), "404 not_found_error") || !strings.Contains(err.Error(), e.RequestID) {
		t.Errorf("Error() = %q", err.Error())
	}
	_, err = c.AgentCreate(ctx, &client.AgentCreateParams{Model: apitype.ModelConfig{ID: "m"}})
	if e, ok := errors.AsType[*client.Error](err); !ok || e.Status != http.StatusBadRequest || e.Type != string(apitype.ErrInvalidRequest) {
		t.Errorf("agent without a name: %v", err)
	}
	bad, err := client.New(client.Config{BaseURL: srv.URL, APIKey: "wrong", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.AgentList(ctx, nil); !isStatus(err, http.StatusUnauthorized) {
		t.Errorf("wrong key: %v, want 401", err)
	}
	if (&client.Error{Status: 503}).Temporary() != true || (&client.Error{}).Temporary() != true || (&client.Error{Status: 429}).Temporary() != true {
		t.Error("503, 429 and stream errors must be temporary")
	}
}

// appendServer appends server events to the session as a brain would (without a lease: the test is the brain).
func appendServer(t *testing.T, st store.Store, sessionID string, events ...apitype.NewEvent) []apitype.Event {
	t.Helper()
	for i := range events {
		events[i].Processed = true
	}
	out, err := st.EventAppend(context.Background(), &store.EventAppendParams{SessionID: sessionID, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func idle(t *testing.T, stop apitype.StopReasonType) apitype.NewEvent {
	ev, err := apitype.MakeEvent(apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: stop}})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// The stream resumes after a Last-Event-ID (an id or a sequence number) and delivers what is appended later.
func TestEventStream(t *testing.T) {
	t.Parallel()
	c, st, _ := newServer(t)
	ctx := ctxT(t)
	agentID, envID := fixture(t, c)
	s, err := c.SessionCreate(ctx, &client.SessionCreateParams{Agent: client.AgentRef{ID: agentID}, EnvironmentID: envID,
		InitialEvents: []apitype.NewEvent{client.UserMessage("one")}})
	if err != nil {
		t.Fatal(err)
	}
	first := appendServer(t, st, s.ID, idle(t, apitype.StopEndTurn))

	from0, err := c.EventStream(ctx, s.ID, &client.StreamParams{LastEventID: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer from0.Close()
	for i, want := range []apitype.EventType{apitype.EventUserMessage, apitype.EventSessionStatusIdle} {
		ev, err := from0.Next()
		if err != nil || ev.Type != want {
			t.Fatalf("event %d from 0 = %+v, %v; want %s", i, ev, err, want)
		}
		if i == 1 && (!ev.TurnOver() || ev.ID != first[0].ID || from0.LastEventID() != ev.ID) {
			t.Errorf("idle event %+v: TurnOver %v, LastEventID %q", ev, ev.TurnOver(), from0.LastEventID())
		}
	}

	// From now on: only what is appended after the stream opened, heartbeats skipped.
	now, err := c.EventStream(ctx, s.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer now.Close()
	time.Sleep(60 * time.Millisecond) // a few heartbeats
	sent, err := c.EventSend(ctx, s.ID, client.UserMessage("two"))
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := now.Next(); err != nil || ev.ID != sent[0].ID {
		t.Fatalf("live stream got %+v, %v; want %s", ev, err, sent[0].ID)
	}
	// Resume after the idle event by id.
	resumed, err := c.EventStream(ctx, s.ID, &client.StreamParams{LastEventID: first[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if ev, err := resumed.Next(); err != nil || ev.ID != sent[0].ID {
		t.Fatalf("resumed stream got %+v, %v; want %s", ev, err, sent[0].ID)
	}
	if _, err := c.EventStream(ctx, s.ID, &client.StreamParams{LastEventID: "sevt_nosuch"}); !isStatus(err, http.StatusBadRequest) {
		t.Errorf("unknown Last-Event-ID: %v, want 400", err)
	}
	if _, err := c.EventStream(ctx, "sesn_missing", nil); !client.IsNotFound(err) {
		t.Errorf("stream of a missing session: %v, want 404", err)
	}
}

// Follow reconnects after a dropped connection with Last-Event-ID, so nothing is missed or repeated, and
// ends when fn says so or the session is deleted.
func TestFollow(t *testing.T) {
	t.Parallel()
	c, st, srv := newServer(t)
	ctx := ctxT(t)
	agentID, envID := fixture(t, c)
	s, err := c.SessionCreate(ctx, &client.SessionCreateParams{Agent: client.AgentRef{ID: agentID}, EnvironmentID: envID})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	seen := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- c.Follow(ctx, s.ID, &client.StreamParams{LastEventID: "0"}, func(ev *client.Event) bool {
			got = append(got, ev.ID)
			seen <- struct{}{}
			return !ev.TurnOver()
		})
	}()
	a, err := c.EventSend(ctx, s.ID, client.UserMessage("a"))
	if err != nil {
		t.Fatal(err)
	}
	<-seen
	srv.CloseClientConnections() // drop the stream: Follow must resume after a
	time.Sleep(20 * time.Millisecond)
	b, err := c.EventSend(ctx, s.ID, client.UserMessage("b"))
	if err != nil {
		t.Fatal(err)
	}
	<-seen
	end := appendServer(t, st, s.ID, idle(t, apitype.StopEndTurn))
	if err := <-done; err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if want := []string{a[0].ID, b[0].ID, end[0].ID}; !slices.Equal(got, want) {
		t.Errorf("followed %v, want %v", got, want)
	}

	// A deleted session ends the stream with session.deleted.
	stream, err := c.EventStream(ctx, s.ID, &client.StreamParams{LastEventID: end[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if _, err := c.SessionDelete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Next(); err != nil || ev.Type != apitype.EventSessionDeleted || !ev.TurnOver() {
		t.Errorf("stream of a deleted session: %+v, %v; want session.deleted", ev, err)
	}
	if ev, err := stream.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after session.deleted: %+v, %v; want EOF", ev, err)
	}
	// A permanent error ends Follow at once.
	if err := c.Follow(ctx, "sesn_missing", nil, func(*client.Event) bool { return true }); !client.IsNotFound(err) {
		t.Errorf("Follow of a missing session: %v, want 404", err)
	}
}

// An error frame on a stream comes back as an *Error with Status 0 (temporary), the envelope's fields kept.
func TestStreamErrorFrame(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-ID") != "sevt_1" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "bad request headers", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, ": ping\n\nid: sevt_2\nevent: agent.message\ndata: {\"id\":\"sevt_2\",\"type\":\"agent.message\",\n"+
			"data: \"processed_at\":null}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"internal server error\"},\"request_id\":\"req_9\"}\n\n")
	}))
	defer srv.Close()
	c, err := client.New(client.Config{BaseURL: srv.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.EventStream(ctxT(t), "sesn_1", &client.StreamParams{LastEventID: "sevt_1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.Next(); err != nil || ev.ID != "sevt_2" || ev.Type != apitype.EventAgentMessage || s.LastEventID() != "sevt_2" {
		t.Fatalf("first = %+v, %v (last id %q)", ev, err, s.LastEventID())
	}
	_, err = s.Next()
	e, ok := errors.AsType[*client.Error](err)
	if !ok || e.Status != 0 || e.Type != string(apitype.ErrAPI) || e.Message != "internal server error" || e.RequestID != "req_9" || !e.Temporary() {
		t.Errorf("error frame: %#v", err)
	}
}
