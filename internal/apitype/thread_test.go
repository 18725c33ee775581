package apitype_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
)

// snapAgent is a roster entry as the API writes it in a session snapshot: a full thread agent.
func snapAgent(id string, version int, name string) string {
	a := apitype.ThreadAgent{Type: apitype.ThreadAgentAgent, ID: id, Version: version, Name: name, System: "s",
		Model:             apitype.ModelConfig{ID: "claude-haiku-4-5", Effort: &apitype.Effort{Type: apitype.EffortHigh}},
		Tools:             []apitype.Tool{},
		MCPServers:        []apitype.MCPServer{},
		Skills:            []apitype.SkillRef{},
		ExecutionIdentity: &apitype.ExecutionIdentity{Type: apitype.IdentityServiceAccount}}
	b, _ := json.Marshal(a)
	return string(b)
}

// TestParseRoster reads the session snapshots the API writes (internal/api snapshotMultiagent) in both forms:
// self is the entry with the session agent's id (listed, and Self set), inline_agents gates Inline, the advisor
// is its model; workflows' agents are not subagents.
func TestParseRoster(t *testing.T) {
	t.Parallel()
	const self = "agent_011Cself"
	w1, w2, me := snapAgent("agent_011Cw1", 2, "w1"), snapAgent("agent_011Cw2", 1, "w2"), snapAgent(self, 3, "lead")
	for _, c := range []struct {
		name, raw string
		want      *apitype.Roster // nil: no roster
		names     []string
		err       bool
	}{
		{"absent", ``, nil, nil, false},
		{"null", `null`, nil, nil, false},
		{"multiagent_20261001", `{"type":"multiagent_20261001","advisor":{"type":"enabled","model":"claude-opus-4-6"},` +
			`"subagents":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[` + w1 + `,` + me + `]},` +
			`"workflows":{"type":"enabled","inline_agents":{"type":"disabled"},"predefined_agents":[` + w2 + `]}}`,
			&apitype.Roster{Self: true, Inline: true, Advisor: "claude-opus-4-6"}, []string{"w1", "lead"}, false},
		{"inline disabled, no advisor", `{"type":"multiagent_20261001","advisor":{"type":"disabled"},` +
			`"subagents":{"type":"enabled","inline_agents":{"type":"disabled"},"predefined_agents":[` + w2 + `]},"workflows":{"type":"disabled"}}`,
			&apitype.Roster{}, []string{"w2"}, false},
		{"subagents disabled", `{"type":"multiagent_20261001","advisor":{"type":"disabled"},"subagents":{"type":"disabled"},` +
			`"workflows":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[` + w1 + `]}}`,
			&apitype.Roster{}, nil, false},
		{"defaults", `{"type":"multiagent_20261001","advisor":{"type":"disabled"},` +
			`"subagents":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[]},` +
			`"workflows":{"type":"enabled","inline_agents":{"type":"enabled"},"predefined_agents":[]}}`,
			&apitype.Roster{Inline: true}, nil, false},
		{"coordinator", `{"type":"coordinator","agents":[` + w1 + `,` + me + `,{"type":"advisor","model":"claude-opus-4-6"}]}`,
			&apitype.Roster{Self: true, Advisor: "claude-opus-4-6"}, []string{"w1", "lead"}, false},
		{"coordinator without self", `{"type":"coordinator","agents":[` + w2 + `]}`, &apitype.Roster{}, []string{"w2"}, false},
		{"unknown type", `{"type":"swarm"}`, nil, nil, true},
		{"malformed", `{"type":"coordinator","agents":[7]}`, nil, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := apitype.ParseRoster(json.RawMessage(c.raw), self)
			if (err != nil) != c.err {
				t.Fatalf("err = %v, want error %v", err, c.err)
			}
			if c.want == nil {
				if r != nil {
					t.Fatalf("roster = %+v, want none", r)
				}
				return
			}
			if r == nil || r.Self != c.want.Self || r.Inline != c.want.Inline || r.Advisor != c.want.Advisor {
				t.Fatalf("roster = %+v, want %+v", r, c.want)
			}
			var names []string
			for _, a := range r.Agents {
				names = append(names, a.Name)
				if a.Type != apitype.ThreadAgentAgent || a.ID == "" || a.Version == 0 || a.Model.ID == "" ||
					a.ExecutionIdentity == nil || a.Tools == nil {
					t.Errorf("agent not a full snapshot: %+v", a)
				}
			}
			if !slices.Equal(names, c.names) {
				t.Errorf("agents = %v, want %v", names, c.names)
			}
			for _, n := range c.names {
				if a := r.Find(n); a == nil || r.Find(a.ID) != a {
					t.Errorf("Find(%q) = %v", n, a)
				}
			}
		})
	}
}
