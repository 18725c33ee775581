package harness

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// outcomeLog builds a log: each event of types, with payloads where given, at seq 1, 2, ..., processed.
func outcomeLog(t *testing.T, evs ...any) []apitype.Event {
	t.Helper()
	now := time.Now()
	var out []apitype.Event
	for i := 0; i < len(evs); i += 2 {
		typ := evs[i].(apitype.EventType)
		data, err := json.Marshal(evs[i+1])
		if err != nil {
			t.Fatal(err)
		}
		if evs[i+1] == nil {
			data = json.RawMessage(`{}`)
		}
		out = append(out, apitype.Event{ID: "ev" + string(rune('a'+i/2)), Type: typ, Seq: int64(i/2 + 1), Data: data, ProcessedAt: &now})
	}
	return out
}

var testDef = apitype.DefineOutcome{OutcomeID: "outc_1", Description: "task", Rubric: json.RawMessage(`{"type":"text","content":"r"}`), MaxIterations: 3}

func TestDeriveOutcome(t *testing.T) {
	sp := func(i int) apitype.OutcomeEvaluationSpan {
		return apitype.OutcomeEvaluationSpan{OutcomeID: "outc_1", Iteration: i}
	}
	end := func(i int, r apitype.OutcomeResult) apitype.OutcomeEvaluationEnd {
		return apitype.OutcomeEvaluationEnd{OutcomeID: "outc_1", Iteration: i, Result: r, Explanation: "x"}
	}
	base := []any{apitype.EventUserDefineOutcome, testDef, apitype.EventSessionStatusRunning, nil,
		apitype.EventAgentMessage, apitype.AgentMessage{Content: []apitype.ContentBlock{apitype.TextBlock("w")}}}
	for _, c := range []struct {
		name      string
		more      []any
		active    bool
		grading   bool // an evaluation started and not ended: the grade step acts
		iteration int
		side      string
	}{
		{"working", nil, true, false, 0, "assistant"},
		{"crashed mid-grading", []any{apitype.EventSpanOutcomeEvaluationStart, sp(0), apitype.EventSpanOutcomeEvaluationOngoing, sp(0)}, true, true, 0, "assistant"},
		{"revising", []any{apitype.EventSpanOutcomeEvaluationStart, sp(0), apitype.EventSpanOutcomeEvaluationEnd, end(0, apitype.OutcomeNeedsRevision)}, true, false, 1, "user"},
		{"second grading", []any{apitype.EventSpanOutcomeEvaluationStart, sp(0), apitype.EventSpanOutcomeEvaluationEnd, end(0, apitype.OutcomeNeedsRevision),
			apitype.EventAgentMessage, apitype.AgentMessage{}, apitype.EventSpanOutcomeEvaluationStart, sp(1)}, true, true, 1, "assistant"},
		{"satisfied", []any{apitype.EventSpanOutcomeEvaluationStart, sp(0), apitype.EventSpanOutcomeEvaluationEnd, end(0, apitype.OutcomeSatisfied)}, false, false, 0, "assistant"},
		{"interrupted", []any{apitype.EventSpanOutcomeEvaluationEnd, end(0, apitype.OutcomeInterrupted)}, false, false, 0, "assistant"},
	} {
		evs := outcomeLog(t, append(append([]any{}, base...), c.more...)...)
		st, err := derive(&tail{events: evs}, execHands)
		if err != nil {
			t.Fatal(err)
		}
		o := st.outcome
		if (o != nil) != c.active || (o != nil && ((o.evaluating != nil) != c.grading || o.iteration != c.iteration)) || st.lastSide != c.side {
			t.Errorf("%s: outcome %+v, side %q", c.name, o, st.lastSide)
			continue
		}
		// The same state survives a compaction of the whole log (the tail keeps the outcome's events).
		tl := &tail{events: evs}
		tl.compactTo("summary", evs[len(evs)-1].Seq)
		st2, err := derive(tl, execHands)
		if err != nil {
			t.Fatal(err)
		}
		if o2 := st2.outcome; (o2 != nil) != c.active || (o2 != nil && ((o2.evaluating != nil) != c.grading || o2.iteration != c.iteration)) {
			t.Errorf("%s, compacted: outcome %+v", c.name, o2)
		}
		if st2.lastSide != "user" {
			t.Errorf("%s, compacted: side %q (a summary is the user's)", c.name, st2.lastSide)
		}
	}
	// An unprocessed definition is not active yet.
	evs := outcomeLog(t, apitype.EventUserDefineOutcome, testDef)
	evs[0].ProcessedAt = nil
	if st, err := derive(&tail{events: evs}, execHands); err != nil || st.outcome != nil || len(st.unprocessed) != 1 {
		t.Fatalf("unprocessed definition: %v %+v", err, st)
	}
}

func TestVerdict(t *testing.T) {
	use := func(name, in string) *model.Response {
		return &model.Response{Content: []model.Block{{Type: model.BlockText, Text: "thinking aloud"},
			{Type: model.BlockToolUse, Name: name, Input: json.RawMessage(in)}}}
	}
	v, why := verdict(use(recordEvaluation, `{"result":"needs_revision","explanation":"e","criteria":[{"criterion":"c","met":false,"explanation":"no"}]}`))
	if v == nil || v.Result != apitype.OutcomeNeedsRevision || v.Explanation != "e" || len(v.Criteria) != 1 || v.Criteria[0].Met {
		t.Fatalf("verdict %+v %q", v, why)
	}
	for in, want := range map[*model.Response]string{
		use(recordEvaluation, `{"result":"great"}`):          `result "great"`,
		use(recordEvaluation, `not json`):                    "not valid",
		use("other_tool", `{"result":"satisfied"}`):          "without calling record_evaluation",
		{Content: []model.Block{{Type: "text", Text: "ok"}}}: "without calling record_evaluation",
	} {
		if v, why := verdict(in); v != nil || !strings.Contains(why, want) {
			t.Errorf("verdict %+v %q, want %q", v, why, want)
		}
	}
}

// TestGraderPromptDocumented: docs/outcomes.md quotes the grader's system prompt as it is.
func TestGraderPromptDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/outcomes.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "> "+GraderSystemPrompt+"\n") {
		t.Error("docs/outcomes.md does not quote GraderSystemPrompt as it is")
	}
}
