package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
)

type streamed = anthropic.BetaManagedAgentsStreamSessionEventsUnion

// next reads one event from the stream or fails after a timeout.
func next(t *testing.T, s *ssestream.Stream[streamed]) streamed {
	t.Helper()
	got := make(chan bool, 1)
	go func() { got <- s.Next() }()
	select {
	case ok := <-got:
		if !ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		return s.Current()
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return streamed{}
}

func agentMessage(text string) apitype.AgentMessage {
	return apitype.AgentMessage{Content: []apitype.ContentBlock{apitype.TextBlock(text)}}
}

func TestStreamLiveAndResume(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	before := h.appendAgent(ctx, id, apitype.EventAgentMessage, agentMessage("before the stream"))

	sctx, cancel := context.WithCancel(ctx)
	stream := h.client.Beta.Sessions.Events.StreamEvents(sctx, id, anthropic.BetaSessionEventStreamParams{})
	if err := stream.Err(); err != nil {
		t.Fatalf("open stream: %v", err)
	}
	// Without Last-Event-ID only events appended after the stream opened arrive.
	first := h.appendAgent(ctx, id, apitype.EventAgentMessage, agentMessage("one"))
	if _, err := h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userText("two")},
	}); err != nil {
		t.Fatal(err)
	}
	got := next(t, stream)
	if got.ID != first.ID || got.Type != "agent.message" || got.Content.OfBetaManagedAgentsAgentMessageEventContentArray[0].Text != "one" {
		t.Fatalf("first streamed event = %s, want %s (not %s)", got.RawJSON(), first.ID, before.ID)
	}
	got = next(t, stream)
	if got.Type != "user.message" {
		t.Fatalf("second streamed event = %s", got.RawJSON())
	}
	lastSeen := got.ID
	cancel()
	_ = stream.Close()

	// While the client is away, the brain keeps appending; a reconnect with Last-Event-ID misses nothing.
	var missed []string
	for i := range 3 {
		missed = append(missed, h.appendAgent(ctx, id, apitype.EventAgentMessage, agentMessage(fmt.Sprint("missed ", i))).ID)
	}
	stream = h.client.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{},
		option.WithHeader("Last-Event-ID", lastSeen))
	defer stream.Close()
	for _, want := range missed {
		if got := next(t, stream); got.ID != want {
			t.Fatalf("replayed %s (%s), want %s", got.ID, got.Type, want)
		}
	}
	live := h.appendAgent(ctx, id, apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}})
	if got := next(t, stream); got.ID != live.ID || got.StopReason.Type != "end_turn" {
		t.Fatalf("live after replay = %s", got.RawJSON())
	}

	// Deleting the session ends every stream with session.deleted.
	if _, err := h.client.Beta.Sessions.Delete(ctx, id, anthropic.BetaSessionDeleteParams{}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, stream); got.Type != "session.deleted" {
		t.Fatalf("after delete = %s", got.RawJSON())
	}
	if stream.Next() {
		t.Fatalf("stream continued after session.deleted: %s", stream.Current().RawJSON())
	}
}

func TestStreamManySubscribers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	const subscribers, events = 4, 20
	streams := make([]*ssestream.Stream[streamed], subscribers)
	for i := range streams {
		streams[i] = h.client.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{})
		defer streams[i].Close()
	}
	var want []string
	for i := range events {
		want = append(want, h.appendAgent(ctx, id, apitype.EventAgentMessage, agentMessage(fmt.Sprint(i))).ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, subscribers)
	for _, s := range streams {
		wg.Go(func() {
			for i, w := range want {
				if !s.Next() {
					errs <- fmt.Errorf("ended at %d: %v", i, s.Err())
					return
				}
				if s.Current().ID != w {
					errs <- fmt.Errorf("event %d = %s, want %s", i, s.Current().ID, w)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStreamFramingAndHeartbeat(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	ev := h.appendAgent(ctx, id, apitype.EventAgentMessage, agentMessage("framed"))

	req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/v1/sessions/"+id+"/events/stream", nil)
	req.Header.Set("x-api-key", testKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Last-Event-ID", "0") // a sequence number: replay from the start
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	var lines []string
	for len(lines) < 4 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSuffix(line, "\n"))
	}
	if lines[0] != "id: "+ev.ID || lines[1] != "event: agent.message" || !strings.HasPrefix(lines[2], `data: {"id":"`+ev.ID+`"`) || lines[3] != "" {
		t.Fatalf("frame = %q", lines)
	}
	line, err := r.ReadString('\n') // the heartbeat interval is 50ms in tests
	if err != nil || line != ": ping\n" {
		t.Fatalf("heartbeat = %q, %v", line, err)
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	stream := h.client.Beta.Sessions.Events.StreamEvents(ctx, "sesn_nope", anthropic.BetaSessionEventStreamParams{})
	wantAPIError(t, stream.Err(), http.StatusNotFound, apitype.ErrNotFound)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	stream = h.client.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{},
		option.WithHeader("Last-Event-ID", "sevt_unknown"))
	wantAPIError(t, stream.Err(), http.StatusBadRequest, apitype.ErrInvalidRequest)
}

// TestStreamPollsWithoutNotify checks that a stream whose store cannot notify across processes still sees
// appends made behind its back, by polling.
func TestStreamPollsWithoutNotify(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	// A second server over the same store, with subscriptions that never fire: only polling can wake it.
	client := httpServer(t, api.Config{Store: deafStore{h.store}, Keys: &api.KeyAuth{Static: testKey},
		PollInterval: 20 * time.Millisecond})
	stream := client.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{})
	defer stream.Close()
	ev := h.appendAgent(ctx, id, apitype.EventAgentMessage, agentMessage("polled"))
	if got := next(t, stream); got.ID != ev.ID {
		t.Fatalf("got %s, want %s", got.ID, ev.ID)
	}
}

// A stream outlives the server's read and write timeouts: corral serve sets both to a minute.
func TestStreamOutlivesServerTimeouts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)

	srv := httptest.NewUnstartedServer(newAPI(t, api.Config{Store: h.store, Keys: &api.KeyAuth{Static: testKey}}).Handler())
	srv.Config.ReadTimeout = 100 * time.Millisecond
	srv.Config.WriteTimeout = 100 * time.Millisecond
	srv.Start()
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(srv.URL),
		option.WithAPIKey(testKey), option.WithMaxRetries(0), option.WithHTTPClient(srv.Client()))

	stream := client.Beta.Sessions.Events.StreamEvents(ctx, id, anthropic.BetaSessionEventStreamParams{})
	defer stream.Close()
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // past both timeouts
	want := h.appendAgent(ctx, id, apitype.EventAgentMessage, agentMessage("late"))
	if got := next(t, stream); got.ID != want.ID {
		t.Fatalf("streamed %s (%s), want %s", got.ID, got.Type, want.ID)
	}
}
