package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

const (
	// tsSDKEnv is the npm prefix the official TypeScript SDK is installed under (npm install --prefix DIR
	// @anthropic-ai/sdk@1.10.0; .ci/run does it and sets it).
	tsSDKEnv = "CORRAL_TS_SDK"
	// requireTSSDKEnv=1 (or CI=true) fails the TypeScript SDK tests when node or the SDK is missing instead of
	// skipping them.
	requireTSSDKEnv = "CORRAL_REQUIRE_TS_SDK"
)

// tsSDK returns node's path and the TypeScript SDK's npm prefix, skipping the test (failing it in CI) without
// them.
func tsSDK(t *testing.T) (node, prefix string) {
	t.Helper()
	node, err := exec.LookPath("node")
	prefix = os.Getenv(tsSDKEnv)
	why := ""
	switch {
	case err != nil:
		why = "no node (apt-get install nodejs npm)"
	case prefix == "":
		why = tsSDKEnv + " is not set (the npm prefix of the TypeScript SDK: npm install --prefix DIR @anthropic-ai/sdk@1.10.0)"
	default:
		if _, err := os.Stat(filepath.Join(prefix, "node_modules", "@anthropic-ai", "sdk", "package.json")); err != nil {
			why = "the TypeScript SDK is not installed under " + tsSDKEnv + ": " + err.Error()
		}
	}
	if why == "" {
		return node, prefix
	}
	if os.Getenv(requireTSSDKEnv) == "1" || os.Getenv("CI") == "true" {
		t.Fatalf("the TypeScript SDK is required (%s=1 or CI=true): %s", requireTSSDKEnv, why)
	}
	t.Skip(why)
	return "", ""
}

// tsEvent is what the test reads of an event the TypeScript SDK returned.
type tsEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	FromSessionThreadID string `json:"from_session_thread_id"`
	ToSessionThreadID   string `json:"to_session_thread_id"`
}

// TestTSSDKThreads drives a multi-agent session's threads with the official TypeScript SDK
// (testdata/threads.mjs, run by node): a coordinator starts a roster agent whose model call the fake model
// holds; the script lists the threads (the child running), gets the child, streams the child's events (from
// its start, then live: the test releases the held call once the stream is open) until it idles, and lists the
// threads by status and the child's events. The stream and the list agree, event for event.
func TestTSSDKThreads(t *testing.T) {
	t.Parallel()
	node, prefix := tsSDK(t)
	model := modeltest.NewServer(t)
	hold := make(chan struct{})
	var released bool
	defer func() {
		if !released {
			close(hold)
		}
	}()
	model.Script(
		modeltest.Turn{Match: bySystemPrompt(coordinatorSystem), ToolUses: []modeltest.ToolUse{
			{Name: "start_thread", Input: `{"agent":"alpha","message":"Find the answer."}`}}},
		modeltest.Turn{Match: bySystemPrompt(coordinatorSystem), Text: "Alpha is on it."},
		modeltest.Turn{Match: bySystemPrompt(alphaSystem), Text: "The answer is 42.", Hold: hold},
		modeltest.Turn{Match: bySystemPrompt(coordinatorSystem), Text: "Alpha says 42."},
	)
	s := startServer(t, t.TempDir(), model, "--images", "host")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := sdkClient(s)
	sid := multiagentSession(ctx, t, c, rosterAgent{"alpha", alphaSystem})
	if _, err := c.Beta.Sessions.Events.Send(ctx, sid, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "Ask alpha."}}})},
	}); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "threads.mjs"))
	cmd.Env = append(os.Environ(), tsSDKEnv+"="+prefix, "CORRAL_URL="+s.url, "CORRAL_KEY="+testKey, "SESSION_ID="+sid)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), `{"streaming"`) && !released {
			released = true
			close(hold) // the child's stream is open: let its model call finish
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node threads.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, strings.Join(lines, "\n"), stderr.String())
	}
	if len(lines) != 2 {
		t.Fatalf("node threads.mjs printed %d lines, want 2:\n%s\nstderr:\n%s", len(lines), strings.Join(lines, "\n"), stderr.String())
	}
	var got struct {
		Version string `json:"version"`
		Running []struct {
			ID             string  `json:"id"`
			ParentThreadID *string `json:"parent_thread_id"`
			Status         string  `json:"status"`
			AgentName      string  `json:"agent_name"`
			AgentType      string  `json:"agent_type"`
		} `json:"running"`
		Retrieved struct {
			ID        string `json:"id"`
			SessionID string `json:"session_id"`
			Type      string `json:"type"`
		} `json:"retrieved"`
		Streamed []tsEvent `json:"streamed"`
		Idle     []struct {
			ID           string `json:"id"`
			Status       string `json:"status"`
			OutputTokens int64  `json:"output_tokens"`
		} `json:"idle"`
		StillRunning  int       `json:"still_running"`
		Listed        []tsEvent `json:"listed"`
		PrimaryEvents []string  `json:"primary_events"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &got); err != nil {
		t.Fatalf("%v: %s", err, lines[1])
	}
	t.Logf("@anthropic-ai/sdk %s: %d events streamed, %d listed", got.Version, len(got.Streamed), len(got.Listed))
	if got.Version != "1.10.0" {
		t.Errorf("the TypeScript SDK is %s, want 1.10.0", got.Version)
	}

	// The list while the child ran: the primary (no parent), then the child, running, of the roster agent.
	if len(got.Running) != 2 || got.Running[0].ParentThreadID != nil || got.Running[0].AgentName != "coordinator" {
		t.Fatalf("threads listed while the child ran: %+v", got.Running)
	}
	primary, child := got.Running[0], got.Running[1]
	if child.ParentThreadID == nil || *child.ParentThreadID != primary.ID || child.AgentName != "alpha" || child.AgentType != "agent" ||
		child.Status != "running" {
		t.Errorf("the child listed while it ran: %+v", child)
	}
	if got.Retrieved.ID != child.ID || got.Retrieved.SessionID != sid || got.Retrieved.Type != "session_thread" {
		t.Errorf("the child retrieved: %+v", got.Retrieved)
	}

	// The child's stream: its whole turn, from the task to its report and idle.
	var types []string
	var answer, report string
	for _, ev := range got.Streamed {
		types = append(types, ev.Type)
		switch ev.Type {
		case "agent.message":
			answer = joinText(ev)
		case "agent.thread_message_sent":
			report = joinText(ev)
			if ev.ToSessionThreadID != primary.ID {
				t.Errorf("the child reported to %q, want the primary %q", ev.ToSessionThreadID, primary.ID)
			}
		}
	}
	if len(types) == 0 || types[0] != "agent.thread_message_received" || joinText(got.Streamed[0]) != "Find the answer." ||
		got.Streamed[0].FromSessionThreadID != primary.ID || types[len(types)-1] != "session.thread_status_idle" ||
		!slices.Contains(types, "session.thread_status_running") {
		t.Errorf("the child's stream: %v", types)
	}
	if answer != "The answer is 42." || report != "The answer is 42." {
		t.Errorf("the child answered %q and reported %q", answer, report)
	}
	// The child's events listed: the same events as streamed, in the same order.
	ids := func(evs []tsEvent) []string {
		var out []string
		for _, ev := range evs {
			out = append(out, ev.ID)
		}
		return out
	}
	if s, l := ids(got.Streamed), ids(got.Listed); !slices.Equal(s, l) || len(slices.Compact(slices.Clone(s))) != len(s) {
		t.Errorf("the child's events streamed %v and listed %v: want the same, each once", s, l)
	}

	// At the end, listed by status: both threads idle, none running; the child's usage counted.
	if len(got.Idle) != 2 || got.StillRunning != 0 {
		t.Errorf("threads idle at the end: %+v; running: %d", got.Idle, got.StillRunning)
	}
	for _, th := range got.Idle {
		if th.ID == child.ID && th.OutputTokens == 0 {
			t.Errorf("the child's usage: %+v", th)
		}
	}
	// The primary's events: the child created, and its report received.
	if !slices.Contains(got.PrimaryEvents, "session.thread_created") || !slices.Contains(got.PrimaryEvents, "agent.thread_message_received") {
		t.Errorf("the primary's events: %v", got.PrimaryEvents)
	}
}

func joinText(ev tsEvent) string {
	var b strings.Builder
	for _, c := range ev.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}
