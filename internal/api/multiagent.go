package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// This file resolves an agent's multiagent configuration (§4.5), in both forms: the legacy coordinator roster and
// multiagent_20261001 (advisor, subagents, workflows). Resolution has two steps: parseMultiagent checks the shape,
// merges an update into the stored configuration and fills the defaults (no store); Server.resolveMultiagent then
// pins every agent reference to a version and checks it (exists, not archived, no multiagent of its own). A
// session snapshots the result with every roster entry expanded to a full agent (snapshotMultiagent).
//
// "self" (and any reference to the agent's own id) is stored and returned as {"type":"agent","id":<own id>,
// "version":<own version>}: the response unions have no "self" variant. Every new version of the agent re-points
// these entries to itself, so a configuration read back and sent again still means "self".

// Multiagent types and limits.
const (
	multiagentCoordinator = "coordinator"
	multiagent20261001    = "multiagent_20261001"
	maxRosterAgents       = 20
	maxAdvisorModelLen    = 256
)

// maRef is a roster entry as stored and returned: {"type":"agent","id","version"} or the coordinator's
// {"type":"advisor","model"}. Before resolution it may also be {"type":"self"} or an agent without a version
// (the latest).
type maRef struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Version int    `json:"version,omitempty"`
	Model   string `json:"model,omitempty"`
}

// maToggle is {"type":"enabled"|"disabled"} (inline_agents).
type maToggle struct {
	Type string `json:"type"`
}

// maAdvisor is multiagent_20261001's advisor: {"type":"enabled","model"} or {"type":"disabled"}.
type maAdvisor struct {
	Type  string `json:"type"`
	Model string `json:"model,omitempty"`
}

// maMembers is a subagents or workflows member: {"type":"disabled"} or {"type":"enabled","inline_agents",
// "predefined_agents"} (both always present when enabled).
type maMembers struct {
	Type             string    `json:"type"`
	InlineAgents     *maToggle `json:"inline_agents,omitempty"`
	PredefinedAgents []maRef   `json:"predefined_agents,omitzero"`
}

// multiagent is «Multiagent» as stored on an agent version and returned.
type multiagent struct {
	Type      string     `json:"type"`
	Agents    []maRef    `json:"agents,omitzero"` // coordinator
	Advisor   *maAdvisor `json:"advisor,omitempty"`
	Subagents *maMembers `json:"subagents,omitempty"`
	Workflows *maMembers `json:"workflows,omitempty"`
}

func defaultMembers() *maMembers {
	return &maMembers{Type: "enabled", InlineAgents: &maToggle{Type: "enabled"}, PredefinedAgents: []maRef{}}
}

// defaultMultiagent is multiagent_20261001 with every member at its default: no advisor, subagents and workflows
// enabled with inline agents and no predefined agents.
func defaultMultiagent() *multiagent {
	return &multiagent{Type: multiagent20261001, Advisor: &maAdvisor{Type: "disabled"}, Subagents: defaultMembers(),
		Workflows: defaultMembers()}
}

// decodeMultiagent reads a stored configuration; nil when there is none (or it cannot be read).
func decodeMultiagent(raw json.RawMessage) *multiagent {
	if isNull(raw) {
		return nil
	}
	var m multiagent
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return &m
}

// parseMultiagent validates «MultiagentIn» at p. stored is the agent's current configuration (nil on create): a
// multiagent_20261001 update merges into a stored multiagent_20261001 level by level. null clears (nil result).
// Agent references are left unresolved (see Server.resolveMultiagent).
func parseMultiagent(p string, raw, stored json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := typeOf(p, raw)
	if err != nil {
		return nil, err
	}
	var m *multiagent
	switch typ {
	case multiagentCoordinator:
		m, err = parseCoordinator(p, raw)
	case multiagent20261001:
		base := decodeMultiagent(stored)
		if base == nil || base.Type != multiagent20261001 {
			base = defaultMultiagent()
		}
		m, err = parseMultiagent20261001(p, raw, base)
	case "":
		return nil, invalid(path(p, "type"), "required")
	default:
		return nil, invalid(path(p, "type"), `must be "coordinator" or "multiagent_20261001"`)
	}
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("multiagent: %w", err)
	}
	return out, nil
}

func parseCoordinator(p string, raw json.RawMessage) (*multiagent, error) {
	var in struct {
		Type   string            `json:"type"`
		Agents []json.RawMessage `json:"agents"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	ap := path(p, "agents")
	if len(in.Agents) == 0 {
		return nil, invalid(ap, "required: list 1 to %d agents", maxRosterAgents)
	}
	if len(in.Agents) > maxRosterAgents {
		return nil, invalid(ap, "at most %d agents (got %d)", maxRosterAgents, len(in.Agents))
	}
	m := &multiagent{Type: multiagentCoordinator}
	advisors := 0
	for i, e := range in.Agents {
		r, err := parseRosterEntry(index(ap, i), e, true)
		if err != nil {
			return nil, err
		}
		if r.Type == "advisor" {
			if advisors++; advisors > 1 {
				return nil, invalid(index(ap, i), "at most one advisor")
			}
		}
		m.Agents = append(m.Agents, r)
	}
	if err := checkSelves(ap, m.Agents); err != nil {
		return nil, err
	}
	return m, nil
}

// checkSelves refuses a second {"type":"self"}.
func checkSelves(p string, refs []maRef) error {
	n := 0
	for i, r := range refs {
		if r.Type == "self" {
			if n++; n > 1 {
				return invalid(index(p, i), `at most one {"type":"self"}`)
			}
		}
	}
	return nil
}

// parseRosterEntry reads a roster or predefined agent: "agent_…", {"type":"agent","id","version"?},
// {"type":"self"} and, in a coordinator roster, {"type":"advisor","model"}.
func parseRosterEntry(p string, raw json.RawMessage, advisor bool) (maRef, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			return maRef{}, invalid(p, "expected an agent id or an object")
		}
		if id == "" {
			return maRef{}, invalid(p, "agent id required")
		}
		return maRef{Type: "agent", ID: id}, checkString(p, id, true, 256)
	}
	typ, err := typeOf(p, raw)
	if err != nil {
		return maRef{}, invalid(p, "expected an agent id or an object")
	}
	switch typ {
	case "agent":
		var in struct {
			Type    string `json:"type"`
			ID      string `json:"id"`
			Version *int   `json:"version"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return maRef{}, err
		}
		if err := checkString(path(p, "id"), in.ID, true, 256); err != nil {
			return maRef{}, err
		}
		r := maRef{Type: "agent", ID: in.ID}
		if in.Version != nil {
			if *in.Version < 1 {
				return maRef{}, invalid(path(p, "version"), "must be >= 1")
			}
			r.Version = *in.Version
		}
		return r, nil
	case "self":
		var in struct {
			Type string `json:"type"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return maRef{}, err
		}
		return maRef{Type: "self"}, nil
	case "advisor":
		if !advisor {
			break
		}
		var in struct {
			Type  string `json:"type"`
			Model string `json:"model"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return maRef{}, err
		}
		if err := checkString(path(p, "model"), in.Model, true, maxAdvisorModelLen); err != nil {
			return maRef{}, err
		}
		return maRef{Type: "advisor", Model: in.Model}, nil
	case "":
		return maRef{}, invalid(path(p, "type"), "required")
	}
	if advisor {
		return maRef{}, invalid(path(p, "type"), `must be "agent", "self" or "advisor"`)
	}
	return maRef{}, invalid(path(p, "type"), `must be "agent" or "self"`)
}

// parseMultiagent20261001 merges the sent configuration into base (the stored multiagent_20261001, or the
// defaults): an omitted key keeps base's value, null takes the default, an object of another type replaces and
// defaults its omitted keys, a predefined_agents list replaces.
func parseMultiagent20261001(p string, raw json.RawMessage, base *multiagent) (*multiagent, error) {
	var in struct {
		Type      string                    `json:"type"`
		Advisor   nullable[json.RawMessage] `json:"advisor"`
		Subagents nullable[json.RawMessage] `json:"subagents"`
		Workflows nullable[json.RawMessage] `json:"workflows"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	m := &multiagent{Type: multiagent20261001, Advisor: base.Advisor, Subagents: base.Subagents, Workflows: base.Workflows}
	var err error
	switch {
	case in.Advisor.Null:
		m.Advisor = &maAdvisor{Type: "disabled"}
	case in.Advisor.Set:
		if m.Advisor, err = parseAdvisor(path(p, "advisor"), in.Advisor.Value); err != nil {
			return nil, err
		}
	}
	if m.Subagents, err = mergeMembers(path(p, "subagents"), in.Subagents, m.Subagents); err != nil {
		return nil, err
	}
	if m.Workflows, err = mergeMembers(path(p, "workflows"), in.Workflows, m.Workflows); err != nil {
		return nil, err
	}
	if m.Advisor == nil {
		m.Advisor = &maAdvisor{Type: "disabled"}
	}
	return m, nil
}

func parseAdvisor(p string, raw json.RawMessage) (*maAdvisor, error) {
	typ, err := typeOf(p, raw)
	if err != nil {
		return nil, err
	}
	var in maAdvisor
	switch typ {
	case "enabled":
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return nil, err
		}
		if err := checkString(path(p, "model"), in.Model, true, maxAdvisorModelLen); err != nil {
			return nil, err
		}
		return &in, nil
	case "disabled":
		var in struct {
			Type string `json:"type"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return nil, err
		}
		return &maAdvisor{Type: "disabled"}, nil
	case "":
		return nil, invalid(path(p, "type"), "required")
	}
	return nil, invalid(path(p, "type"), `must be "enabled" or "disabled"`)
}

// mergeMembers merges a sent subagents or workflows member into base, then checks that an enabled member without
// inline agents has predefined agents.
func mergeMembers(p string, sent nullable[json.RawMessage], base *maMembers) (*maMembers, error) {
	if base == nil || sent.Null {
		base = defaultMembers()
	}
	if !sent.Set || sent.Null {
		return base, nil
	}
	typ, err := typeOf(p, sent.Value)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "disabled":
		var in struct {
			Type string `json:"type"`
		}
		if err := strictUnmarshal(p, sent.Value, &in); err != nil {
			return nil, err
		}
		return &maMembers{Type: "disabled"}, nil
	case "enabled":
	case "":
		return nil, invalid(path(p, "type"), "required")
	default:
		return nil, invalid(path(p, "type"), `must be "enabled" or "disabled"`)
	}
	var in struct {
		Type             string                      `json:"type"`
		PredefinedAgents nullable[[]json.RawMessage] `json:"predefined_agents"`
		InlineAgents     nullable[json.RawMessage]   `json:"inline_agents"`
	}
	if err := strictUnmarshal(p, sent.Value, &in); err != nil {
		return nil, err
	}
	m := defaultMembers()
	if base.Type == "enabled" { // same type: merge
		m.PredefinedAgents = append([]maRef{}, base.PredefinedAgents...)
		if base.InlineAgents != nil {
			m.InlineAgents = &maToggle{Type: base.InlineAgents.Type}
		}
	}
	switch {
	case in.InlineAgents.Null:
		m.InlineAgents = &maToggle{Type: "enabled"}
	case in.InlineAgents.Set:
		ip := path(p, "inline_agents")
		typ, err := typeOf(ip, in.InlineAgents.Value)
		if err != nil {
			return nil, err
		}
		var t maToggle
		if err := strictUnmarshal(ip, in.InlineAgents.Value, &t); err != nil {
			return nil, err
		}
		switch typ {
		case "enabled", "disabled":
		case "":
			return nil, invalid(path(ip, "type"), "required")
		default:
			return nil, invalid(path(ip, "type"), `must be "enabled" or "disabled"`)
		}
		m.InlineAgents = &t
	}
	pp := path(p, "predefined_agents")
	switch {
	case in.PredefinedAgents.Null:
		m.PredefinedAgents = []maRef{}
	case in.PredefinedAgents.Set:
		if len(in.PredefinedAgents.Value) > maxRosterAgents {
			return nil, invalid(pp, "at most %d agents (got %d)", maxRosterAgents, len(in.PredefinedAgents.Value))
		}
		m.PredefinedAgents = make([]maRef, 0, len(in.PredefinedAgents.Value))
		for i, e := range in.PredefinedAgents.Value {
			r, err := parseRosterEntry(index(pp, i), e, false)
			if err != nil {
				return nil, err
			}
			m.PredefinedAgents = append(m.PredefinedAgents, r)
		}
		if err := checkSelves(pp, m.PredefinedAgents); err != nil {
			return nil, err
		}
	}
	if m.InlineAgents.Type == "disabled" && len(m.PredefinedAgents) == 0 {
		return nil, invalid(pp, "required (at least one agent) when inline_agents is disabled")
	}
	return m, nil
}

// resolveMultiagent pins every agent reference of a's multiagent (as parseMultiagent left it) to a version:
// "self" and a's own id become a itself at a.Version; a string or an object without version takes the agent's
// latest version. Every other referenced agent must exist, not be archived, and have no multiagent (depth 1);
// each list must reference distinct agents.
func (s *Server) resolveMultiagent(ctx context.Context, p string, a *apitype.Agent) error {
	m := decodeMultiagent(a.Multiagent)
	if m == nil {
		a.Multiagent = nil
		return nil
	}
	resolve := func(lp string, refs []maRef) error {
		seen := map[string]int{}
		for i := range refs {
			r := &refs[i]
			ep := index(lp, i)
			if r.Type == "advisor" {
				continue
			}
			if r.Type == "self" || r.ID == a.ID {
				*r = maRef{Type: "agent", ID: a.ID, Version: a.Version}
			} else {
				ref, err := s.store.AgentGet(ctx, &store.AgentGetParams{ID: r.ID, Version: r.Version})
				switch {
				case errors.Is(err, store.ErrNotFound) && r.Version > 0:
					return invalid(ep, "agent %s has no version %d", r.ID, r.Version)
				case errors.Is(err, store.ErrNotFound):
					return invalid(ep, "no agent %s", r.ID)
				case err != nil:
					return err
				case ref.ArchivedAt != nil:
					return invalid(ep, "agent %s is archived", r.ID)
				case !isNull(ref.Multiagent):
					return invalid(ep, "agent %s (version %d) has a multiagent configuration itself; a roster agent cannot (depth is 1)",
						r.ID, ref.Version)
				}
				r.Version = ref.Version
			}
			if j, dup := seen[r.ID]; dup {
				return invalid(ep, "agent %s is listed twice (also at %s; a reference to the agent itself counts as self)",
					r.ID, index(lp, j))
			}
			seen[r.ID] = i
		}
		return nil
	}
	if err := resolve(path(p, "agents"), m.Agents); err != nil {
		return err
	}
	for _, mem := range []struct {
		name string
		m    *maMembers
	}{{"subagents", m.Subagents}, {"workflows", m.Workflows}} {
		if mem.m != nil {
			if err := resolve(path(path(p, mem.name), "predefined_agents"), mem.m.PredefinedAgents); err != nil {
				return err
			}
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("multiagent: %w", err)
	}
	a.Multiagent = out
	return nil
}

// repointSelf makes a's references to itself name its current version (after an update wrote a new one).
func repointSelf(a *apitype.Agent) {
	m := decodeMultiagent(a.Multiagent)
	if m == nil {
		return
	}
	lists := [][]maRef{m.Agents}
	for _, mem := range []*maMembers{m.Subagents, m.Workflows} {
		if mem != nil {
			lists = append(lists, mem.PredefinedAgents)
		}
	}
	changed := false
	for _, l := range lists {
		for i := range l {
			if l[i].Type == "agent" && l[i].ID == a.ID && l[i].Version != a.Version {
				l[i].Version, changed = a.Version, true
			}
		}
	}
	if changed {
		if out, err := json.Marshal(m); err == nil {
			a.Multiagent = out
		}
	}
}

// snapshotMultiagent is «SessionMultiagent»: the session agent's multiagent with every roster and predefined
// agent expanded to a full agent snapshot of its pinned version. The agent itself ("self") is the session's own
// agent snapshot (overrides included); the advisor stays {type, model}.
func (s *Server) snapshotMultiagent(ctx context.Context, p string, sa *apitype.SessionAgent) (json.RawMessage, error) {
	m := decodeMultiagent(sa.Multiagent)
	if m == nil {
		return nil, nil
	}
	expand := func(refs []maRef) ([]any, error) {
		out := make([]any, 0, len(refs))
		for _, r := range refs {
			if r.Type == "advisor" {
				out = append(out, r)
				continue
			}
			if r.ID == sa.ID {
				out = append(out, sessionThreadAgent(sa))
				continue
			}
			a, err := s.store.AgentGet(ctx, &store.AgentGetParams{ID: r.ID, Version: r.Version})
			if errors.Is(err, store.ErrNotFound) {
				return nil, invalid(p, "roster agent %s has no version %d", r.ID, r.Version)
			}
			if err != nil {
				return nil, err
			}
			out = append(out, agentThreadAgent(a))
		}
		return out, nil
	}
	type members struct {
		Type             string    `json:"type"`
		InlineAgents     *maToggle `json:"inline_agents,omitempty"`
		PredefinedAgents []any     `json:"predefined_agents,omitzero"`
	}
	snapMembers := func(mem *maMembers) (*members, error) {
		if mem == nil {
			return nil, nil
		}
		out := &members{Type: mem.Type, InlineAgents: mem.InlineAgents}
		if mem.Type == "enabled" {
			var err error
			if out.PredefinedAgents, err = expand(mem.PredefinedAgents); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	snap := struct {
		Type      string     `json:"type"`
		Agents    []any      `json:"agents,omitzero"`
		Advisor   *maAdvisor `json:"advisor,omitempty"`
		Subagents *members   `json:"subagents,omitempty"`
		Workflows *members   `json:"workflows,omitempty"`
	}{Type: m.Type, Advisor: m.Advisor}
	var err error
	if m.Type == multiagentCoordinator {
		if snap.Agents, err = expand(m.Agents); err != nil {
			return nil, err
		}
	}
	if snap.Subagents, err = snapMembers(m.Subagents); err != nil {
		return nil, err
	}
	if snap.Workflows, err = snapMembers(m.Workflows); err != nil {
		return nil, err
	}
	out, err := json.Marshal(snap)
	if err != nil {
		return nil, fmt.Errorf("multiagent snapshot: %w", err)
	}
	return out, nil
}

// agentThreadAgent is a stored agent version as a thread's agent (no multiagent: depth is 1).
func agentThreadAgent(a *apitype.Agent) apitype.ThreadAgent {
	normalizeAgent(a)
	ei := a.ExecutionIdentity
	return apitype.ThreadAgent{Type: apitype.ThreadAgentAgent, ID: a.ID, Version: a.Version, Name: a.Name,
		Description: a.Description, System: a.System, Model: a.Model, Tools: a.Tools, MCPServers: a.MCPServers,
		Skills: a.Skills, ExecutionIdentity: &ei}
}

// sessionThreadAgent is a session's agent snapshot as a thread's agent: its primary thread's, and "self".
func sessionThreadAgent(sa *apitype.SessionAgent) apitype.ThreadAgent {
	ei := sa.ExecutionIdentity
	t := apitype.ThreadAgent{Type: apitype.ThreadAgentAgent, ID: sa.ID, Version: sa.Version, Name: sa.Name,
		Description: sa.Description, System: sa.System, Model: sa.Model, Tools: sa.Tools, MCPServers: sa.MCPServers,
		Skills: sa.Skills, ExecutionIdentity: &ei}
	if t.Tools == nil {
		t.Tools = []apitype.Tool{}
	}
	if t.MCPServers == nil {
		t.MCPServers = []apitype.MCPServer{}
	}
	if t.Skills == nil {
		t.Skills = []apitype.SkillRef{}
	}
	return t
}
