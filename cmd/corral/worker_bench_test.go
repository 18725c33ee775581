package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/pagination"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// BenchmarkWorkerToolStart measures, for a new session of a self-hosted environment, the time from the brain
// appending an agent.tool_use to the tool's command starting on an idle worker: the work item queued, the long
// poll woken, ack, heartbeat, the session and its history read, the call dispatched (and, for corral worker,
// the sandbox provisioned). The command prints its start time (date +%s%N); the agent.tool_use carries the time
// it was appended; both are this machine's clock. It reports the median and the worst (ms).
func BenchmarkWorkerToolStart(b *testing.B) {
	b.Run("sqlite/sdk-worker", func(b *testing.B) { benchToolStart(b, false, false) })
	b.Run("postgres/sdk-worker", func(b *testing.B) { benchToolStart(b, true, false) })
	b.Run("sqlite/corral-worker-bwrap", func(b *testing.B) { benchToolStart(b, false, true) })
}

func benchToolStart(b *testing.B, postgres, corralWorker bool) {
	model := modeltest.NewServer(b)
	var extra []string
	if postgres {
		extra = append(extra, "--db", pgtest.NewDSN(b))
	}
	s := startServer(b, b.TempDir(), model, extra...)
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	envID, key, agentID := selfHostedEnv(ctx, b, client, "bench")

	if corralWorker {
		if os.Geteuid() != 0 {
			sandboxtest.Require(b, "bwrap", errors.New("the bwrap backend needs root"))
		}
		sandboxtest.Require(b, "bwrap", bwrap.Available(""))
		startCorral(b, os.Environ(), "corral: worker ", "worker", "--url", s.url, "--env", envID, "--key", key,
			"--data", b.TempDir(), "--sandbox", "bwrap", "--session-idle", "10ms")
	} else {
		idle := 10 * time.Millisecond
		stop := runSDKWorker(ctx, b, client, envID, key, b.TempDir(), "bench", &idle)
		defer func() { _ = stop() }()
	}

	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		model.Script(
			modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"date +%s%N"}`}}},
			modeltest.Turn{Text: "ok"},
		)
		sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
			EnvironmentID: envID,
		})
		if err != nil {
			b.Fatal(err)
		}
		l, useAt := followToolStart(ctx, b, client, sess.ID)
		ns, err := strconv.ParseInt(strings.TrimSpace(l), 10, 64)
		if err != nil {
			b.Fatalf("tool output %q", l)
		}
		lat = append(lat, time.Unix(0, ns).Sub(useAt))
		// The next session finds the worker idle again: wait until it stopped this one's item.
		waitQueueIdle(ctx, b, client, envID)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "ms-p50")
	b.ReportMetric(float64(lat[len(lat)-1])/1e6, "ms-max")
}

// followToolStart sends a message and follows the session to end_turn, returning the text of the tool's
// user.tool_result and the time its agent.tool_use was appended.
func followToolStart(ctx context.Context, b *testing.B, client anthropic.Client, sessionID string) (string, time.Time) {
	stream := client.Beta.Sessions.Events.StreamEvents(ctx, sessionID, anthropic.BetaSessionEventStreamParams{})
	defer stream.Close()
	if _, err := client.Beta.Sessions.Events.Send(ctx, sessionID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "go"}}})},
	}); err != nil {
		b.Fatal(err)
	}
	var out string
	var at time.Time
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "agent.tool_use":
			at = ev.ProcessedAt
		case "user.tool_result":
			for _, c := range ev.AsUserToolResult().Content {
				out += c.Text
			}
		case "session.status_idle":
			if ev.AsSessionStatusIdle().StopReason.Type == "end_turn" {
				return out, at
			}
		}
	}
	b.Fatalf("stream ended: %v", stream.Err())
	return "", time.Time{}
}

// waitQueueIdle waits until every work item of the environment is stopped.
func waitQueueIdle(ctx context.Context, b *testing.B, client anthropic.Client, envID string) {
	for {
		var page pagination.PageCursor[anthropic.BetaSelfHostedWork]
		if err := client.Get(ctx, "v1/environments/"+envID+"/work?limit=100", nil, &page); err != nil {
			b.Fatal(err)
		}
		busy := false
		for _, w := range page.Data {
			busy = busy || w.State != "stopped"
		}
		if !busy {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatal("the worker never let go of its item")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
