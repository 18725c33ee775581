package harness

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/host"
)

// logOf builds a tail from (type, payload) pairs: events e1, e2, ... with sequence numbers from 1, all processed.
func logOf(t *testing.T, entries ...any) *tail {
	t.Helper()
	tl := &tail{}
	now := time.Now()
	for i := 0; i < len(entries); i += 2 {
		typ := entries[i].(apitype.EventType)
		data, err := json.Marshal(entries[i+1])
		if err != nil {
			t.Fatal(err)
		}
		seq := int64(len(tl.events) + 1)
		ev := apitype.Event{ID: fmt.Sprintf("e%d", seq), Type: typ, Seq: seq, Data: data, ProcessedAt: &now}
		tl.events = append(tl.events, ev)
		tl.lastSeq = seq
	}
	return tl
}

func text(s string) apitype.UserMessage {
	return apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock(s)}}
}

func TestTranscriptPlacesQueuedMessagesAfterToolResults(t *testing.T) {
	tl := logOf(t,
		apitype.EventUserMessage, text("do it"), // 1
		apitype.EventSpanModelRequestStart, struct{}{}, // 2
		apitype.EventAgentToolUse, apitype.AgentToolUse{Name: "bash", Input: json.RawMessage(`{}`), ModelToolUseID: "toolu_1"}, // 3
		apitype.EventUserMessage, text("also this"), // 4: sent while the tool ran
		apitype.EventSpanModelRequestEnd, struct{}{}, // 5
		apitype.EventAgentToolResult, apitype.AgentToolResult{ToolUseID: "e3", Content: []apitype.ContentBlock{apitype.TextBlock("ok")}}, // 6
	)
	turns, err := transcript(tl)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 3 {
		t.Fatalf("%d turns: %+v", len(turns), turns)
	}
	last := turns[2].msg
	if last.Role != "user" || len(last.Content) != 2 || last.Content[0].Type != model.BlockToolResult ||
		last.Content[0].ToolUseID != "toolu_1" || last.Content[1].Text != "also this" {
		t.Errorf("last turn = %+v", last)
	}
}

func TestCompactionSplitNeverSeparatesAToolCallFromItsResult(t *testing.T) {
	user := func(seq int64, blocks ...model.Block) transcriptTurn {
		return transcriptTurn{msg: model.Message{Role: "user", Content: blocks}, minSeq: seq, maxSeq: seq}
	}
	asst := func(seq int64, blocks ...model.Block) transcriptTurn {
		return transcriptTurn{msg: model.Message{Role: "assistant", Content: blocks}, minSeq: seq, maxSeq: seq}
	}
	txt := model.Block{Type: model.BlockText, Text: "some text of a turn"}
	use := model.Block{Type: model.BlockToolUse, ID: "t", Name: "bash", Input: json.RawMessage(`{}`)}
	res := model.Block{Type: model.BlockToolResult, ToolUseID: "t"}
	for _, tc := range []struct {
		name  string
		turns []transcriptTurn
		keep  int
		want  int
	}{
		{"keeps what fits", []transcriptTurn{user(1, txt), asst(2, txt), user(3, txt)}, 1000, 1},
		{"keeps the least when nothing fits", []transcriptTurn{user(1, txt), asst(2, txt), user(3, txt)}, 0, 2},
		{"skips a tool result turn", []transcriptTurn{user(1, txt), asst(2, use), user(3, res)}, 0, 1},
		{"nothing to cut", []transcriptTurn{user(1, txt)}, 0, 0},
		{"events out of order", []transcriptTurn{user(1, txt), asst(5, txt), user(3, txt)}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := compactionSplit(tc.turns, tc.keep); got != tc.want {
				t.Errorf("split = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestResolveTools(t *testing.T) {
	tools := []apitype.Tool{
		{Type: apitype.ToolTypeAgentToolset,
			DefaultConfig: &apitype.ToolDefaults{Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}},
			Configs: []apitype.ToolConfig{
				{Name: "bash", Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAsk}},
				{Name: "write", Enabled: false},
				{Name: "web_fetch", Enabled: true},
			}},
		{Type: apitype.ToolTypeMCPToolset, MCPServerName: "docs"},
		{Type: apitype.ToolTypeCustom, Name: "deploy", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
	ts := resolveTools(tools, sandbox.Unavailable(host.Tools(), "no sandbox here"))
	var names []string
	for _, s := range ts.specs {
		names = append(names, s.Name)
	}
	if want := "bash edit read glob grep deploy"; strings.Join(names, " ") != want {
		t.Errorf("offered %q, want %q", strings.Join(names, " "), want)
	}
	// The model is offered the hands' own definitions.
	for _, s := range ts.specs[:5] {
		i := slices.IndexFunc(host.Tools(), func(t sandbox.Tool) bool { return t.Name == s.Name })
		if d := host.Tools()[i]; s.Description != d.Description || string(s.InputSchema) != string(d.InputSchema) {
			t.Errorf("offered %+v, want the hands' definition %+v", s, d)
		}
	}
	for name, want := range map[string]toolRoute{
		"bash":      {by: execHands, policy: apitype.PolicyAlwaysAsk},
		"read":      {by: execHands, policy: apitype.PolicyAlwaysAllow},
		"write":     {by: execNone, reason: "the tool write is disabled for this agent"},
		"web_fetch": {by: execNone, reason: "the tool web_fetch is not available on this server"},
		"deploy":    {by: execClient},
		"nope":      {by: execNone, reason: "there is no tool named nope"},
	} {
		if got := ts.route(name); got != want {
			t.Errorf("route(%s) = %+v, want %+v", name, got, want)
		}
	}

	// Without hands no built-in tool is offered, and a call to one is refused with the reason.
	ts = resolveTools(tools, nil)
	if len(ts.specs) != 1 || ts.specs[0].Name != "deploy" {
		t.Errorf("without hands: offered %+v, want deploy only", ts.specs)
	}
	for _, name := range []string{"bash", "write", "web_fetch"} {
		if got := ts.route(name); got.by != execNone || got.reason != msgNoHands {
			t.Errorf("without hands: route(%s) = %+v, want refused with %q", name, got, msgNoHands)
		}
	}
	if ts.hasBuiltin() {
		t.Error("without hands: hasBuiltin")
	}
}

// TestTranscriptNotesInterruptedTurns: a turn interrupted while running (including one that began before the tail,
// after a compaction) ends with the assistant note; an interrupt while idle adds none.
func TestTranscriptNotesInterruptedTurns(t *testing.T) {
	describe := func(turns []transcriptTurn) string {
		var parts []string
		for _, tt := range turns {
			var texts []string
			for _, b := range tt.msg.Content {
				texts = append(texts, b.Text)
			}
			parts = append(parts, tt.msg.Role+": "+strings.Join(texts, " | "))
		}
		return strings.Join(parts, "\n")
	}
	for _, tc := range []struct {
		name  string
		prior apitype.EventType
		log   []any
		want  string
	}{
		{"interrupted mid-answer", "", []any{
			apitype.EventUserMessage, text("first"),
			apitype.EventSessionStatusRunning, struct{}{},
			apitype.EventSpanModelRequestStart, struct{}{},
			apitype.EventUserInterrupt, struct{}{},
			apitype.EventAgentMessage, apitype.AgentMessage{Content: []apitype.ContentBlock{apitype.TextBlock("Partial")}},
			apitype.EventSpanModelRequestEnd, struct{}{},
			apitype.EventSessionStatusIdle, struct{}{},
			apitype.EventUserMessage, text("second"),
		}, "user: first\nassistant: Partial | " + interruptedNote + "\nuser: second"},
		{"a turn that began before the tail", apitype.EventSessionStatusRunning, []any{
			apitype.EventSpanModelRequestStart, struct{}{},
			apitype.EventUserInterrupt, struct{}{},
			apitype.EventSpanModelRequestEnd, struct{}{},
			apitype.EventSessionStatusIdle, struct{}{},
			apitype.EventUserMessage, text("second"),
		}, "assistant: " + interruptedNote + "\nuser: second"},
		{"interrupt while idle", "", []any{
			apitype.EventUserMessage, text("first"),
			apitype.EventSessionStatusRunning, struct{}{},
			apitype.EventSpanModelRequestStart, struct{}{},
			apitype.EventAgentMessage, apitype.AgentMessage{Content: []apitype.ContentBlock{apitype.TextBlock("Done.")}},
			apitype.EventSpanModelRequestEnd, struct{}{},
			apitype.EventSessionStatusIdle, struct{}{},
			apitype.EventUserInterrupt, struct{}{},
			apitype.EventUserMessage, text("second"),
		}, "user: first\nassistant: Done.\nuser: second"},
	} {
		tl := logOf(t, tc.log...)
		tl.priorStatus = tc.prior
		turns, err := transcript(tl)
		if err != nil {
			t.Fatal(err)
		}
		if got := describe(turns); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
