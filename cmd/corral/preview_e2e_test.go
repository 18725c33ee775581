package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

const previewAnswer = "Streaming previews let a client show the answer while the model is still writing it, " +
	"word by word, and the final event settles it."

// TestSDKStreamPreviews: a real `corral serve` (SQLite, brains in process) and a model that streams slowly. A
// stream opened with event_deltas=agent.message receives event_start and event_delta previews, then the
// agent.message with the same id; the SDK's accumulator shows the text growing and ends with the whole
// answer. A stream without event_deltas sees no previews.
func TestSDKStreamPreviews(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t, modeltest.WithLatency(20*time.Millisecond, 15*time.Millisecond, 0))
	model.Script(modeltest.Turn{Text: previewAnswer})
	s := startServer(t, t.TempDir(), model)
	checkPreviewTurn(t, s.url)
}

// TestSDKStreamPreviewsAcrossProcesses: the same on PostgreSQL with the API and the brain in separate
// processes, so the previews cross between them by NOTIFY.
func TestSDKStreamPreviewsAcrossProcesses(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDSN(t)
	model := modeltest.NewServer(t, modeltest.WithLatency(20*time.Millisecond, 15*time.Millisecond, 0))
	model.Script(modeltest.Turn{Text: previewAnswer})
	key := sharedVaultKey(t)
	api := startServer(t, t.TempDir(), model, "--db", db, "--brains", "0", "--vault-key-file", key)
	startCorral(t, serverEnv(model, testKey), "corral: harness running", "harness", "--db", db, "--data", t.TempDir(),
		"--sandbox", "none", "--brains", "2", "--lease-ttl", "2s", "--poll", "200ms", "--vault-key-file", key)
	checkPreviewTurn(t, api.url)
}

func checkPreviewTurn(t *testing.T, url string) {
	t.Helper()
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess := sdkSession(ctx, t, client, "previews")
	previews := client.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, anthropic.BetaSessionEventStreamParams{
		EventDeltas: []anthropic.BetaManagedAgentsDeltaType{anthropic.BetaManagedAgentsDeltaTypeAgentMessage},
	})
	defer previews.Close()
	plain := client.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, anthropic.BetaSessionEventStreamParams{})
	defer plain.Close()
	if _, err := client.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "Explain previews."}}})},
	}); err != nil {
		t.Fatal(err)
	}

	var (
		acc       anthropic.BetaManagedAgentsEventAccumulator
		seen      []string
		startID   string
		deltas    int
		growing   []string // the accumulated text after each delta
		messageID string
	)
	for previews.Next() {
		ev := previews.Current()
		acc.Accumulate(ev)
		seen = append(seen, ev.Type)
		switch ev.Type {
		case "event_start":
			if startID != "" {
				t.Errorf("a second event_start: %s", ev.RawJSON())
			}
			startID = ev.AsEventStart().Event.ID
		case "event_delta":
			d := ev.AsEventDelta()
			if d.EventID != startID || d.Delta.Index != 0 {
				t.Errorf("delta %s; event_start was %s", ev.RawJSON(), startID)
			}
			deltas++
			growing = append(growing, acc.AgentMessageText(d.EventID))
		case "agent.message":
			messageID = ev.ID
		}
		if ev.Type == "session.status_idle" || ev.Type == "session.error" {
			break
		}
	}
	if err := previews.Err(); err != nil {
		t.Fatalf("stream: %v (events %v)", err, seen)
	}
	if startID == "" || startID != messageID {
		t.Fatalf("event_start id %q, agent.message id %q; events %v", startID, messageID, seen)
	}
	if deltas < 2 {
		t.Fatalf("%d deltas, want the answer streamed in several; events %v", deltas, seen)
	}
	for i, text := range growing {
		if !strings.HasPrefix(previewAnswer, text) || i > 0 && len(text) <= len(growing[i-1]) {
			t.Fatalf("accumulated text after delta %d: %q (before: %q)", i, text, growing[max(i-1, 0)])
		}
	}
	t.Logf("%d deltas; events %v", deltas, seen)
	if got := acc.AgentMessageText(messageID); got != previewAnswer {
		t.Errorf("accumulated message %q, want %q", got, previewAnswer)
	}
	if i, j := strings.LastIndex(strings.Join(seen, " "), "event_delta"), strings.Index(strings.Join(seen, " "), "agent.message"); i > j {
		t.Errorf("deltas after the message: %v", seen)
	}

	var plainSeen []string
	for plain.Next() {
		ev := plain.Current()
		plainSeen = append(plainSeen, ev.Type)
		if strings.HasPrefix(ev.Type, "event_") {
			t.Fatalf("a stream without event_deltas got %s", ev.RawJSON())
		}
		if ev.Type == "session.status_idle" {
			break
		}
	}
	if !strings.Contains(strings.Join(plainSeen, " "), "agent.message") {
		t.Errorf("plain stream: %v", plainSeen)
	}
}
