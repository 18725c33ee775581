package api_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// maFixture is a server with agents to reference: two plain workers (w1 at version 2), an archived agent and an
// agent that has a multiagent configuration itself.
type maFixture struct {
	h                        *harness
	w1, w2, archived, nested string
	ids                      map[string]string // placeholder ($W1 …) → id
}

func newMAFixture(t *testing.T) *maFixture {
	h := newHarness(t)
	f := &maFixture{h: h}
	f.w1 = f.create(`{"name":"w1","model":"claude-haiku-4-5","system":"work one"}`)
	if status, body := post(h, "/v1/agents/"+f.w1, `{"description":"second version"}`); status != 200 {
		t.Fatalf("update w1: %d %s", status, body)
	}
	f.w2 = f.create(`{"name":"w2","model":"claude-haiku-4-5"}`)
	f.archived = f.create(`{"name":"old","model":"claude-haiku-4-5"}`)
	if status, body := post(h, "/v1/agents/"+f.archived+"/archive", ""); status != 200 {
		t.Fatalf("archive: %d %s", status, body)
	}
	f.nested = f.create(`{"name":"boss","model":"claude-haiku-4-5","multiagent":{"type":"coordinator","agents":["` + f.w2 + `"]}}`)
	f.ids = map[string]string{"$W1": f.w1, "$W2": f.w2, "$OLD": f.archived, "$BOSS": f.nested}
	return f
}

// sub replaces the placeholders of s.
func (f *maFixture) sub(s string) string {
	for k, v := range f.ids {
		s = strings.ReplaceAll(s, k, v)
	}
	return s
}

// create creates an agent and returns its id.
func (f *maFixture) create(body string) string {
	f.h.t.Helper()
	status, b := post(f.h, "/v1/agents", f.sub(body))
	var a struct{ ID string }
	if status != 200 || json.Unmarshal(b, &a) != nil {
		f.h.t.Fatalf("create agent %s: %d %s", body, status, b)
	}
	return a.ID
}

// multiagentOf returns the multiagent of an agent or session response.
func multiagentOf(t *testing.T, body []byte, session bool) json.RawMessage {
	t.Helper()
	var r struct {
		Multiagent json.RawMessage `json:"multiagent"`
		Agent      struct {
			Multiagent json.RawMessage `json:"multiagent"`
		} `json:"agent"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if session {
		return r.Agent.Multiagent
	}
	return r.Multiagent
}

// sameJSON compares two JSON documents by value.
func sameJSON(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("decode want %s: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

const maDefaults = `{"type":"multiagent_20261001","advisor":{"type":"disabled"},` +
	`"subagents":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[]},` +
	`"workflows":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[]}}`

// TestMultiagentCreate: every validation of both forms is a 400 invalid_request_error naming the field path; the
// accepted configurations come back resolved (defaults filled, references pinned to versions, self = the agent).
func TestMultiagentCreate(t *testing.T) {
	t.Parallel()
	f := newMAFixture(t)
	twentyOne := `"` + strings.Repeat(`$W2","`, 20) + `$W2"`
	for _, c := range []struct {
		name, multiagent string
		want             string // the resolved multiagent ($SELF: the new agent's id) or, on a 400, the message's start
		ok               bool
	}{
		{"defaults", `{"type":"multiagent_20261001"}`, maDefaults, true},
		{"null members take their defaults", `{"type":"multiagent_20261001","advisor":null,"subagents":null,"workflows":null}`, maDefaults, true},
		{"full", `{"type":"multiagent_20261001","advisor":{"type":"enabled","model":"claude-opus-4-6"},` +
			`"subagents":{"type":"enabled","predefined_agents":["$W1",{"type":"agent","id":"$W2","version":1},{"type":"self"}],"inline_agents":{"type":"disabled"}},` +
			`"workflows":{"type":"disabled"}}`,
			`{"type":"multiagent_20261001","advisor":{"type":"enabled","model":"claude-opus-4-6"},` +
				`"subagents":{"type":"enabled","inline_agents":{"type":"disabled"},"predefined_agents":[{"type":"agent","id":"$W1","version":2},{"type":"agent","id":"$W2","version":1},{"type":"agent","id":"$SELF","version":1}]},` +
				`"workflows":{"type":"disabled"}}`, true},
		{"pinned older version", `{"type":"multiagent_20261001","workflows":{"type":"enabled","predefined_agents":[{"type":"agent","id":"$W1","version":1}]}}`,
			`{"type":"multiagent_20261001","advisor":{"type":"disabled"},"subagents":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[]},` +
				`"workflows":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[{"type":"agent","id":"$W1","version":1}]}}`, true},
		{"same agent in both lists", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["$W2"]},"workflows":{"type":"enabled","predefined_agents":["$W2"]}}`,
			`{"type":"multiagent_20261001","advisor":{"type":"disabled"},"subagents":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[{"type":"agent","id":"$W2","version":1}]},` +
				`"workflows":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[{"type":"agent","id":"$W2","version":1}]}}`, true},
		{"coordinator", `{"type":"coordinator","agents":["$W1",{"type":"agent","id":"$W2"},{"type":"self"},{"type":"advisor","model":"claude-opus-4-6"}]}`,
			`{"type":"coordinator","agents":[{"type":"agent","id":"$W1","version":2},{"type":"agent","id":"$W2","version":1},{"type":"agent","id":"$SELF","version":1},{"type":"advisor","model":"claude-opus-4-6"}]}`, true},

		{"unknown type", `{"type":"swarm"}`, `multiagent.type: must be "coordinator" or "multiagent_20261001"`, false},
		{"no type", `{"agents":["$W1"]}`, `multiagent.type: required`, false},
		{"not an object", `"coordinator"`, `multiagent: expected an object`, false},
		{"coordinator without agents", `{"type":"coordinator"}`, `multiagent.agents: required`, false},
		{"coordinator empty", `{"type":"coordinator","agents":[]}`, `multiagent.agents: required`, false},
		{"coordinator over 20", `{"type":"coordinator","agents":[` + twentyOne + `]}`, `multiagent.agents: at most 20 agents (got 21)`, false},
		{"coordinator unknown key", `{"type":"coordinator","agents":["$W1"],"depth":2}`, `multiagent.depth: unknown field`, false},
		{"missing agent", `{"type":"coordinator","agents":["agent_011Cnothere"]}`, `multiagent.agents[0]: no agent agent_011Cnothere`, false},
		{"missing version", `{"type":"coordinator","agents":[{"type":"agent","id":"$W2","version":9}]}`, `multiagent.agents[0]: agent $W2 has no version 9`, false},
		{"version 0", `{"type":"coordinator","agents":[{"type":"agent","id":"$W2","version":0}]}`, `multiagent.agents[0].version: must be >= 1`, false},
		{"agent without id", `{"type":"coordinator","agents":[{"type":"agent"}]}`, `multiagent.agents[0].id: required`, false},
		{"empty string", `{"type":"coordinator","agents":[""]}`, `multiagent.agents[0]: agent id required`, false},
		{"archived", `{"type":"coordinator","agents":["$W1","$OLD"]}`, `multiagent.agents[1]: agent $OLD is archived`, false},
		{"depth", `{"type":"coordinator","agents":["$BOSS"]}`, `multiagent.agents[0]: agent $BOSS (version 1) has a multiagent configuration itself`, false},
		{"duplicate", `{"type":"coordinator","agents":["$W1",{"type":"agent","id":"$W1","version":1}]}`, `multiagent.agents[1]: agent $W1 is listed twice (also at multiagent.agents[0]`, false},
		{"two selves", `{"type":"coordinator","agents":[{"type":"self"},{"type":"self"}]}`, `multiagent.agents[1]: at most one {"type":"self"}`, false},
		{"two advisors", `{"type":"coordinator","agents":[{"type":"advisor","model":"a"},{"type":"advisor","model":"b"}]}`, `multiagent.agents[1]: at most one advisor`, false},
		{"advisor without model", `{"type":"coordinator","agents":[{"type":"advisor"}]}`, `multiagent.agents[0].model: required`, false},
		{"roster entry type", `{"type":"coordinator","agents":[{"type":"inline"}]}`, `multiagent.agents[0].type: must be "agent", "self" or "advisor"`, false},
		{"roster entry number", `{"type":"coordinator","agents":[7]}`, `multiagent.agents[0]: expected an agent id or an object`, false},

		{"advisor enabled without model", `{"type":"multiagent_20261001","advisor":{"type":"enabled"}}`, `multiagent.advisor.model: required`, false},
		{"advisor without type", `{"type":"multiagent_20261001","advisor":{"model":"m"}}`, `multiagent.advisor.type: required`, false},
		{"advisor disabled with model", `{"type":"multiagent_20261001","advisor":{"type":"disabled","model":"m"}}`, `multiagent.advisor.model: unknown field`, false},
		{"advisor type", `{"type":"multiagent_20261001","advisor":{"type":"on"}}`, `multiagent.advisor.type: must be "enabled" or "disabled"`, false},
		{"members without type", `{"type":"multiagent_20261001","subagents":{"predefined_agents":[]}}`, `multiagent.subagents.type: required`, false},
		{"disabled members with agents", `{"type":"multiagent_20261001","workflows":{"type":"disabled","predefined_agents":[]}}`, `multiagent.workflows.predefined_agents: unknown field`, false},
		{"inline disabled without agents", `{"type":"multiagent_20261001","subagents":{"type":"enabled","inline_agents":{"type":"disabled"}}}`,
			`multiagent.subagents.predefined_agents: required (at least one agent) when inline_agents is disabled`, false},
		{"inline disabled with empty list", `{"type":"multiagent_20261001","workflows":{"type":"enabled","inline_agents":{"type":"disabled"},"predefined_agents":[]}}`,
			`multiagent.workflows.predefined_agents: required (at least one agent) when inline_agents is disabled`, false},
		{"inline type", `{"type":"multiagent_20261001","subagents":{"type":"enabled","inline_agents":{"type":"maybe"}}}`, `multiagent.subagents.inline_agents.type: must be "enabled" or "disabled"`, false},
		{"inline spelled as the spec's summary", `{"type":"multiagent_20261001","subagents":{"type":"enabled","inline":{"type":"enabled"}}}`, `multiagent.subagents.inline: unknown field`, false},
		{"predefined over 20", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[` + twentyOne + `]}}`, `multiagent.subagents.predefined_agents: at most 20 agents (got 21)`, false},
		{"predefined advisor", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"advisor","model":"m"}]}}`, `multiagent.subagents.predefined_agents[0].type: must be "agent" or "self"`, false},
		{"predefined two selves", `{"type":"multiagent_20261001","workflows":{"type":"enabled","predefined_agents":[{"type":"self"},"$W1",{"type":"self"}]}}`, `multiagent.workflows.predefined_agents[2]: at most one {"type":"self"}`, false},
		{"predefined duplicate", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["$W2","$W1","$W2"]}}`, `multiagent.subagents.predefined_agents[2]: agent $W2 is listed twice`, false},
		{"predefined archived", `{"type":"multiagent_20261001","workflows":{"type":"enabled","predefined_agents":["$OLD"]}}`, `multiagent.workflows.predefined_agents[0]: agent $OLD is archived`, false},
		{"predefined depth", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[{"type":"agent","id":"$BOSS"}]}}`, `multiagent.subagents.predefined_agents[0]: agent $BOSS (version 1) has a multiagent`, false},
		{"predefined missing", `{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["agent_011Cgone"]}}`, `multiagent.subagents.predefined_agents[0]: no agent agent_011Cgone`, false},
		{"unknown top-level key", `{"type":"multiagent_20261001","teams":{}}`, `multiagent.teams: unknown field`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := post(f.h, "/v1/agents", f.sub(`{"name":"lead","model":"claude-sonnet-4-6","multiagent":`+c.multiagent+`}`))
			if !c.ok {
				var env envelope
				if status != 400 || json.Unmarshal(body, &env) != nil || env.Error.Type != apitype.ErrInvalidRequest ||
					!strings.HasPrefix(env.Error.Message, f.sub(c.want)) {
					t.Fatalf("got %d %s, want 400 %q", status, body, f.sub(c.want))
				}
				return
			}
			var a struct{ ID string }
			if status != 200 || json.Unmarshal(body, &a) != nil {
				t.Fatalf("create: %d %s", status, body)
			}
			want := strings.ReplaceAll(f.sub(c.want), "$SELF", a.ID)
			if got := multiagentOf(t, body, false); !sameJSON(t, got, want) {
				t.Fatalf("multiagent = %s\nwant        %s", got, want)
			}
			// Read back the same.
			status, body = f.h.doGet("/v1/agents/" + a.ID)
			if got := multiagentOf(t, body, false); status != 200 || !sameJSON(t, got, want) {
				t.Fatalf("read back: %d %s", status, got)
			}
		})
	}
}

// TestMultiagentTwenty: 20 distinct agents are the most a roster or predefined list holds.
func TestMultiagentTwenty(t *testing.T) {
	t.Parallel()
	f := newMAFixture(t)
	var refs []string
	for i := range 20 {
		refs = append(refs, `"`+f.create(fmt.Sprintf(`{"name":"w%d","model":"claude-haiku-4-5"}`, i))+`"`)
	}
	list := strings.Join(refs, ",")
	for _, ma := range []string{`{"type":"coordinator","agents":[` + list + `]}`,
		`{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":[` + list + `]}}`} {
		status, body := post(f.h, "/v1/agents", `{"name":"lead","model":"m","multiagent":`+ma+`}`)
		if status != 200 || strings.Count(string(body), `"version":1`) != 21 {
			t.Errorf("20 agents: %d %s", status, body)
		}
		status, body = post(f.h, "/v1/agents", `{"name":"lead","model":"m","multiagent":`+strings.Replace(ma, "[", `[{"type":"self"},`, 1)+`}`)
		if status != 400 || !strings.Contains(string(body), "at most 20 agents (got 21)") {
			t.Errorf("21 agents: %d %s", status, body)
		}
	}
}

// doGet is h.do for a GET.
func (h *harness) doGet(path string) (int, []byte) {
	status, _, b := h.do("GET", path, "")
	return status, b
}

// TestMultiagentUpdateMerge: a multiagent_20261001 update merges level by level into a stored
// multiagent_20261001 (omitted keeps, null defaults, another type replaces with defaults, lists replace), and is
// validated on the merged result; another form replaces; null clears; self follows the agent's versions.
func TestMultiagentUpdateMerge(t *testing.T) {
	t.Parallel()
	f := newMAFixture(t)
	id := f.create(`{"name":"lead","model":"claude-sonnet-4-6","multiagent":{"type":"multiagent_20261001",` +
		`"advisor":{"type":"enabled","model":"claude-opus-4-6"},` +
		`"subagents":{"type":"enabled","predefined_agents":["$W1",{"type":"self"}],"inline_agents":{"type":"disabled"}}}}`)
	f.ids["$SELF"] = id
	enabled := func(inline, agents string) string {
		return `{"type":"enabled","inline_agents":{"type":"` + inline + `"},"predefined_agents":[` + agents + `]}`
	}
	ma := func(advisor, sub, wf string) string {
		return `{"type":"multiagent_20261001","advisor":` + advisor + `,"subagents":` + sub + `,"workflows":` + wf + `}`
	}
	adv := `{"type":"enabled","model":"claude-opus-4-6"}`
	w1 := `{"type":"agent","id":"$W1","version":2}`
	w2 := `{"type":"agent","id":"$W2","version":1}`
	self := func(v int) string { return fmt.Sprintf(`{"type":"agent","id":"$SELF","version":%d}`, v) }
	defWF := enabled("enabled", "")
	for i, c := range []struct {
		name, update string
		want         string // multiagent after the update, or the 400 message's start
		version      int    // the agent's version after it; 0 on a 400
	}{
		{"other fields keep it; self follows", `{"description":"v2"}`, ma(adv, enabled("disabled", w1+","+self(2)), defWF), 2},
		{"omitted keys keep", `{"multiagent":{"type":"multiagent_20261001"}}`, ma(adv, enabled("disabled", w1+","+self(2)), defWF), 2},
		{"read-back sent again is the same", `{"multiagent":` + ma(adv, enabled("disabled", w1+","+self(2)), defWF) + `}`,
			ma(adv, enabled("disabled", w1+","+self(2)), defWF), 2},
		{"list replaces, inline kept", `{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["$W2"]}}}`,
			ma(adv, enabled("disabled", w2), defWF), 3},
		{"null advisor takes its default", `{"multiagent":{"type":"multiagent_20261001","advisor":null}}`,
			ma(`{"type":"disabled"}`, enabled("disabled", w2), defWF), 4},
		{"validated on the merged result", `{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":null}}}`,
			`multiagent.subagents.predefined_agents: required (at least one agent) when inline_agents is disabled`, 0},
		{"another type replaces", `{"multiagent":{"type":"multiagent_20261001","workflows":{"type":"disabled"}}}`,
			ma(`{"type":"disabled"}`, enabled("disabled", w2), `{"type":"disabled"}`), 5},
		{"and back: omitted keys default", `{"multiagent":{"type":"multiagent_20261001","workflows":{"type":"enabled","predefined_agents":[{"type":"self"}]}}}`,
			ma(`{"type":"disabled"}`, enabled("disabled", w2), enabled("enabled", self(6))), 6},
		{"null member takes its default", `{"multiagent":{"type":"multiagent_20261001","subagents":null}}`,
			ma(`{"type":"disabled"}`, enabled("enabled", ""), enabled("enabled", self(7))), 7},
		{"inline null takes its default", `{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","inline_agents":{"type":"disabled"},"predefined_agents":["$W1"]}}}`,
			ma(`{"type":"disabled"}`, enabled("disabled", w1), enabled("enabled", self(8))), 8},
		{"", `{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","inline_agents":null}}}`,
			ma(`{"type":"disabled"}`, enabled("enabled", w1), enabled("enabled", self(9))), 9},
		{"an object sent needs its type", `{"multiagent":{"type":"multiagent_20261001","advisor":{"model":"x"}}}`, `multiagent.advisor.type: required`, 0},
		{"an enabled advisor needs its model", `{"multiagent":{"type":"multiagent_20261001","advisor":{"type":"enabled"}}}`, `multiagent.advisor.model: required`, 0},
		{"coordinator replaces", `{"multiagent":{"type":"coordinator","agents":[{"type":"self"},"$W2"]}}`,
			`{"type":"coordinator","agents":[` + self(10) + `,` + w2 + `]}`, 10},
		{"multiagent_20261001 over a coordinator starts from the defaults", `{"multiagent":{"type":"multiagent_20261001","advisor":` + adv + `}}`,
			ma(adv, defWF, defWF), 11},
		{"a reference to the agent's own id is self", `{"multiagent":{"type":"coordinator","agents":["$SELF"]}}`,
			`{"type":"coordinator","agents":[` + self(12) + `]}`, 12},
		{"self and own id are the same agent", `{"multiagent":{"type":"coordinator","agents":["$SELF",{"type":"self"}]}}`,
			`multiagent.agents[1]: agent $SELF is listed twice`, 0},
		{"null clears", `{"multiagent":null}`, `null`, 13},
	} {
		status, body := post(f.h, "/v1/agents/"+id, f.sub(c.update))
		if c.version == 0 {
			var env envelope
			if status != 400 || json.Unmarshal(body, &env) != nil || !strings.HasPrefix(env.Error.Message, f.sub(c.want)) {
				t.Fatalf("step %d %s: got %d %s, want 400 %q", i, c.name, status, body, f.sub(c.want))
			}
			continue
		}
		var a struct{ Version int }
		if status != 200 || json.Unmarshal(body, &a) != nil {
			t.Fatalf("step %d %s: %d %s", i, c.name, status, body)
		}
		if got := multiagentOf(t, body, false); a.Version != c.version || !sameJSON(t, got, f.sub(c.want)) {
			t.Fatalf("step %d %s: version %d multiagent %s\nwant version %d %s", i, c.name, a.Version, got, c.version, f.sub(c.want))
		}
	}
}

// TestMultiagentSessionSnapshot: a session of a multi-agent agent snapshots its roster as full agents of the
// pinned versions (self: the session's own agent, overrides included; the advisor stays {type, model}), in both
// forms, and apitype.ParseRoster reads the snapshots. Overrides leave multiagent alone.
func TestMultiagentSessionSnapshot(t *testing.T) {
	t.Parallel()
	f := newMAFixture(t)
	ctx := ctxT(t)
	_, envID := f.h.seed(ctx)
	lead := f.create(`{"name":"lead","model":"claude-sonnet-4-6","system":"lead","multiagent":{"type":"multiagent_20261001",` +
		`"advisor":{"type":"enabled","model":"claude-opus-4-6"},` +
		`"subagents":{"type":"enabled","predefined_agents":[{"type":"agent","id":"$W1","version":1},{"type":"self"}]},` +
		`"workflows":{"type":"enabled","inline_agents":{"type":"disabled"},"predefined_agents":["$W2"]}}}`)
	coord := f.create(`{"name":"coord","model":"claude-sonnet-4-6","multiagent":{"type":"coordinator",` +
		`"agents":["$W1",{"type":"self"},{"type":"advisor","model":"claude-opus-4-6"}]}}`)
	// w1 moves on: the roster keeps the version it pinned.
	if status, body := post(f.h, "/v1/agents/"+f.w1, `{"system":"work one, v3"}`); status != 200 {
		t.Fatalf("update w1: %d %s", status, body)
	}

	session := func(agent string) (json.RawMessage, *apitype.Session) {
		t.Helper()
		status, body := post(f.h, "/v1/sessions", `{"agent":`+agent+`,"environment_id":"`+envID+`"}`)
		if status != 200 {
			t.Fatalf("session: %d %s", status, body)
		}
		var s apitype.Session
		decodeRaw(t, string(body), &s)
		return multiagentOf(t, body, true), &s
	}

	raw, s := session(`{"type":"agent_with_overrides","id":"` + lead + `","system":"overridden"}`)
	var snap struct {
		Type      string
		Advisor   map[string]any
		Subagents struct {
			Type             string
			InlineAgents     map[string]any        `json:"inline_agents"`
			PredefinedAgents []apitype.ThreadAgent `json:"predefined_agents"`
		}
		Workflows struct {
			Type             string
			InlineAgents     map[string]any        `json:"inline_agents"`
			PredefinedAgents []apitype.ThreadAgent `json:"predefined_agents"`
		}
	}
	decodeRaw(t, string(raw), &snap)
	if snap.Type != "multiagent_20261001" || snap.Advisor["type"] != "enabled" || snap.Advisor["model"] != "claude-opus-4-6" ||
		snap.Subagents.Type != "enabled" || snap.Subagents.InlineAgents["type"] != "enabled" ||
		snap.Workflows.InlineAgents["type"] != "disabled" {
		t.Fatalf("snapshot = %s", raw)
	}
	pre := snap.Subagents.PredefinedAgents
	if len(pre) != 2 || len(snap.Workflows.PredefinedAgents) != 1 {
		t.Fatalf("predefined agents: %s", raw)
	}
	if w := pre[0]; w.Type != apitype.ThreadAgentAgent || w.ID != f.w1 || w.Version != 1 || w.Name != "w1" || w.System != "work one" ||
		w.Model.ID != "claude-haiku-4-5" || w.Model.Effort == nil || w.Tools == nil || w.MCPServers == nil || w.Skills == nil ||
		w.ExecutionIdentity == nil || w.ExecutionIdentity.Type != "service_account" {
		t.Errorf("w1 snapshot = %+v", w)
	}
	if self := pre[1]; self.ID != lead || self.ID != s.Agent.ID || self.Version != 1 || self.System != "overridden" || self.Name != "lead" {
		t.Errorf("self snapshot = %+v", self)
	}
	if w := snap.Workflows.PredefinedAgents[0]; w.ID != f.w2 || w.Version != 1 || w.Name != "w2" {
		t.Errorf("workflow agent = %+v", w)
	}
	// The snapshot holds no references to other agents' multiagent (depth 1) and keeps every field of a thread agent.
	if strings.Contains(string(raw), `"multiagent"`) {
		t.Errorf("nested multiagent in %s", raw)
	}
	r, err := apitype.ParseRoster(s.Agent.Multiagent, s.Agent.ID)
	if err != nil || r == nil || !r.Self || !r.Inline || r.Advisor != "claude-opus-4-6" || len(r.Agents) != 2 ||
		r.Find("w1") == nil || r.Find("w1").Version != 1 || r.Find(lead) == nil {
		t.Errorf("ParseRoster = %+v, %v", r, err)
	}
	// Read back through GET: the same snapshot.
	status, body := f.h.doGet("/v1/sessions/" + s.ID)
	if got := multiagentOf(t, body, true); status != 200 || !sameJSON(t, got, string(raw)) {
		t.Errorf("GET session multiagent = %s", got)
	}

	raw, s = session(`"` + coord + `"`)
	var csnap struct {
		Type   string
		Agents []json.RawMessage
	}
	decodeRaw(t, string(raw), &csnap)
	if csnap.Type != "coordinator" || len(csnap.Agents) != 3 {
		t.Fatalf("coordinator snapshot = %s", raw)
	}
	var w, self apitype.ThreadAgent
	decodeRaw(t, string(csnap.Agents[0]), &w)
	decodeRaw(t, string(csnap.Agents[1]), &self)
	if w.ID != f.w1 || w.Version != 2 || w.Description != "second version" || self.ID != coord || self.Name != "coord" {
		t.Errorf("coordinator roster: %s", raw)
	}
	if !sameJSON(t, csnap.Agents[2], `{"type":"advisor","model":"claude-opus-4-6"}`) {
		t.Errorf("advisor entry = %s", csnap.Agents[2])
	}
	r, err = apitype.ParseRoster(s.Agent.Multiagent, s.Agent.ID)
	if err != nil || r == nil || !r.Self || r.Advisor != "claude-opus-4-6" || len(r.Agents) != 2 || r.Find("w1").Version != 2 {
		t.Errorf("ParseRoster(coordinator) = %+v, %v", r, err)
	}

	// A single-agent session has no multiagent, and no threads.
	raw, single := session(`"` + f.w2 + `"`)
	if string(raw) != "null" {
		t.Errorf("single-agent session multiagent = %s", raw)
	}
	if th := threadsOf(t, f.h, single.ID); len(th) != 0 {
		t.Errorf("single-agent session threads: %+v", th)
	}
}

// threadsOf lists a session's threads from the store.
func threadsOf(t *testing.T, h *harness, sessionID string) []apitype.SessionThread {
	t.Helper()
	th, err := h.store.ThreadList(ctxT(t), &store.ThreadListParams{SessionID: sessionID, Limit: 10})
	if err != nil {
		t.Fatalf("threads of %s: %v", sessionID, err)
	}
	return th
}

// TestMultiagentPrimaryThread: a multi-agent session has its primary thread from its creation: no parent, the
// session's agent (overrides included), idle, or running when initial events start the first turn.
func TestMultiagentPrimaryThread(t *testing.T) {
	t.Parallel()
	f := newMAFixture(t)
	_, envID := f.h.seed(ctxT(t))
	lead := f.create(`{"name":"lead","model":"claude-sonnet-4-6","multiagent":{"type":"coordinator","agents":["$W1"]}}`)
	for _, c := range []struct {
		name, extra, status string
	}{
		{"idle", ``, apitype.StatusIdle},
		{"running", `,"initial_events":[{"type":"user.message","content":[{"type":"text","text":"go"}]}]`, apitype.StatusRunning},
	} {
		status, body := post(f.h, "/v1/sessions", `{"agent":{"type":"agent_with_overrides","id":"`+lead+
			`","system":"led"},"environment_id":"`+envID+`"`+c.extra+`}`)
		if status != 200 {
			t.Fatalf("%s: session: %d %s", c.name, status, body)
		}
		var s apitype.Session
		decodeRaw(t, string(body), &s)
		th := threadsOf(t, f.h, s.ID)
		if len(th) != 1 {
			t.Fatalf("%s: threads = %+v", c.name, th)
		}
		p := th[0]
		if p.Type != apitype.ObjectSessionThread || !apitype.HasPrefix(p.ID, apitype.PrefixThread) || p.SessionID != s.ID ||
			!p.Primary() || p.Status != c.status || p.WorkflowRunID != nil || p.ArchivedAt != nil ||
			!p.CreatedAt.Equal(s.CreatedAt) {
			t.Errorf("%s: primary thread = %+v", c.name, p)
		}
		if a := p.Agent; a.Type != apitype.ThreadAgentAgent || a.ID != lead || a.Version != 1 || a.Name != "lead" ||
			a.System != "led" || a.Model.ID != "claude-sonnet-4-6" || a.ExecutionIdentity == nil {
			t.Errorf("%s: primary thread agent = %+v", c.name, a)
		}
	}
}

// TestMultiagentSDK: an agent created through the official SDK with multiagent_20261001 reads back typed.
func TestMultiagentSDK(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	worker, err := h.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "worker",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-haiku-4-5"}})
	if err != nil {
		t.Fatalf("worker: %v", err)
	}
	a, err := h.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name:  "lead",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-6"},
		Multiagent: anthropic.BetaManagedAgentsMultiagentParamsUnion{
			OfMultiagent20261001: &anthropic.BetaManagedAgentsMultiagent20261001Params{
				Advisor: anthropic.BetaManagedAgentsMultiagentAdvisorParamsUnion{
					OfEnabled: &anthropic.BetaManagedAgentsMultiagentAdvisorEnabledParams{Model: "claude-opus-4-6"}},
				Subagents: anthropic.BetaManagedAgentsMultiagentSubagentsParamsUnion{
					OfEnabled: &anthropic.BetaManagedAgentsMultiagentSubagentsEnabledParams{
						PredefinedAgents: []anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion{
							{OfString: anthropic.String(worker.ID)},
							{OfBetaManagedAgentsMultiagentSelfs: &anthropic.BetaManagedAgentsMultiagentSelfParams{}},
						},
					}},
				Workflows: anthropic.BetaManagedAgentsMultiagentWorkflowsParamsUnion{
					OfDisabled: &anthropic.BetaManagedAgentsMultiagentWorkflowsDisabledParams{}},
			},
		},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	got, err := h.client.Beta.Agents.Get(ctx, a.ID, anthropic.BetaAgentGetParams{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	m := got.Multiagent.AsMultiagent20261001()
	if got.Multiagent.Type != "multiagent_20261001" || m.Advisor.Type != "enabled" || m.Advisor.Model != "claude-opus-4-6" {
		t.Fatalf("multiagent = %s", got.Multiagent.RawJSON())
	}
	sub := m.Subagents.AsEnabled()
	if m.Subagents.Type != "enabled" || sub.InlineAgents.Type != "enabled" || len(sub.PredefinedAgents) != 2 ||
		sub.PredefinedAgents[0].ID != worker.ID || sub.PredefinedAgents[0].Version != 1 ||
		sub.PredefinedAgents[1].ID != a.ID || sub.PredefinedAgents[1].Version != 1 {
		t.Errorf("subagents = %s", m.Subagents.RawJSON())
	}
	if m.Workflows.Type != "disabled" {
		t.Errorf("workflows = %s", m.Workflows.RawJSON())
	}
}
