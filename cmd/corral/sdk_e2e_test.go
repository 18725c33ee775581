package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestSDKFullTurn is the outside check: a real `corral serve`, a scripted model behind ANTHROPIC_BASE_URL, and
// the official Go SDK pointed at the server by base URL only. It streams a whole tool turn: the model runs bash,
// sees corral-42 in the result, and answers.
func TestSDKFullTurn(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo corral-$((6*7)) > out.txt && cat out.txt"}`}}},
		modeltest.Turn{Text: "The file holds corral-42."},
	)
	s := startServer(t, t.TempDir(), model)
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sess := sdkSession(ctx, t, client, "sdk",
		anthropic.BetaAgentNewParamsToolUnion{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}})
	// Open the stream first, then send: the stream carries everything that follows.
	stream := client.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, anthropic.BetaSessionEventStreamParams{})
	defer stream.Close()
	if _, err := client.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "Run it."}}})},
	}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	var toolUseID, result, answer string
	for stream.Next() {
		ev := stream.Current()
		seen = append(seen, ev.Type)
		switch ev.Type {
		case "agent.tool_use":
			tu := ev.AsAgentToolUse()
			if tu.Name != "bash" {
				t.Errorf("tool_use name = %q", tu.Name)
			}
			toolUseID = tu.ID
		case "agent.tool_result":
			tr := ev.AsAgentToolResult()
			if tr.ToolUseID != toolUseID {
				t.Errorf("tool_result for %q, want %q", tr.ToolUseID, toolUseID)
			}
			for _, b := range tr.Content {
				result += b.Text
			}
		case "agent.message":
			for _, b := range ev.AsAgentMessage().Content {
				answer += b.Text
			}
		case "session.status_idle":
			if r := ev.AsSessionStatusIdle().StopReason.Type; r != "end_turn" {
				t.Fatalf("idle with %q; events %v", r, seen)
			}
		}
		if ev.Type == "session.status_idle" {
			break
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v (events %v)", err, seen)
	}
	if toolUseID == "" || !strings.Contains(result, "corral-42") || !strings.Contains(answer, "corral-42") {
		t.Fatalf("tool_use %q, result %q, answer %q; events %v", toolUseID, result, answer, seen)
	}
	got, err := client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "idle" || got.Usage.OutputTokens == 0 {
		t.Errorf("session status %q, usage %+v", got.Status, got.Usage)
	}
}

// sdkSession creates, through the SDK, an agent with the tools, an environment and a session of them.
func sdkSession(ctx context.Context, t *testing.T, client anthropic.Client, name string, tools ...anthropic.BetaAgentNewParamsToolUnion) *anthropic.BetaManagedAgentsSession {
	t.Helper()
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: name, Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}, Tools: tools,
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
		EnvironmentID: env.ID,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sess
}
