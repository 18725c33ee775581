package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestArchivedSessionRefusesEvents: archiving terminates the session (session.status_terminated, status
// terminated, duration frozen) once, and the archived session refuses every new event with a 400 in the error
// envelope, so nothing reaches its log.
func TestArchivedSessionRefusesEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)

	arch, err := h.client.Beta.Sessions.Archive(ctx, id, anthropic.BetaSessionArchiveParams{})
	if err != nil || arch.ArchivedAt.IsZero() || arch.Status != "terminated" {
		t.Fatalf("archive: %v %s", err, arch.RawJSON())
	}
	again, err := h.client.Beta.Sessions.Archive(ctx, id, anthropic.BetaSessionArchiveParams{})
	if err != nil || !again.ArchivedAt.Equal(arch.ArchivedAt) || again.Status != "terminated" ||
		again.Stats.DurationSeconds != arch.Stats.DurationSeconds {
		t.Fatalf("archive again: %v %s, first %s", err, again.RawJSON(), arch.RawJSON())
	}
	got, err := h.client.Beta.Sessions.Get(ctx, id, anthropic.BetaSessionGetParams{})
	if err != nil || got.Status != "terminated" || got.Stats.DurationSeconds != arch.Stats.DurationSeconds {
		t.Fatalf("get: %v %s", err, got.RawJSON())
	}

	refusesEvents(t, h, id, "archived")
}

// TestTerminatedSessionRefusesEvents: a terminated session that is not archived refuses a message (appended with
// no read before it: the append's own transaction refuses it) and an interrupt (checked before) with a 400 that
// says so, and a message to no session is a 404; nothing reaches a log.
func TestTerminatedSessionRefusesEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	if _, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Status: apitype.StatusTerminated,
		Events: []apitype.NewEvent{{Type: apitype.EventSessionStatusTerminated, Processed: true}}}); err != nil {
		t.Fatal(err)
	}
	refusesEvents(t, h, id, "terminated")
	_, err := h.client.Beta.Sessions.Events.Send(ctx, "sesn_011CNoSuchSession00000000", anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userText("hello?")},
	})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
}

// refusesEvents checks that the session refuses a message and an interrupt with a 400 whose message has the word
// given (why), and that its log is its one session.status_terminated.
func refusesEvents(t *testing.T, h *harness, id, why string) {
	t.Helper()
	ctx := ctxT(t)
	for _, ev := range []anthropic.BetaManagedAgentsEventParamsUnion{
		userText("are you there?"),
		{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{}},
	} {
		_, err := h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
			Events: []anthropic.BetaManagedAgentsEventParamsUnion{ev},
		})
		if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.Contains(aerr.Message, why) {
			t.Errorf("message %q does not say the session is %s", aerr.Message, why)
		}
	}
	events, err := h.store.EventList(ctx, &store.EventListParams{SessionID: id, Limit: 10})
	if err != nil || len(events) != 1 || events[0].Type != apitype.EventSessionStatusTerminated {
		t.Fatalf("log = %+v, %v; want one session.status_terminated", events, err)
	}
}
