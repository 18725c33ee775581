package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Agent field limits.
const (
	maxNameLen        = 256
	maxDescriptionLen = 2048
	maxSystemLen      = 100_000
)

// agentCreateRequest is the body of POST /v1/agents. Unions stay raw until validated, so that errors can name
// the exact element.
type agentCreateRequest struct {
	Name              string            `json:"name"`
	Model             json.RawMessage   `json:"model"`
	Description       *string           `json:"description"`
	System            *string           `json:"system"`
	Tools             []json.RawMessage `json:"tools"`
	MCPServers        []json.RawMessage `json:"mcp_servers"`
	Skills            []json.RawMessage `json:"skills"`
	Multiagent        json.RawMessage   `json:"multiagent"`
	ExecutionIdentity json.RawMessage   `json:"execution_identity"`
	Metadata          map[string]string `json:"metadata"`
}

// agentUpdateRequest is the body of POST /v1/agents/{id}: omit to preserve, null to clear.
type agentUpdateRequest struct {
	Version           *int                        `json:"version"`
	Name              nullable[string]            `json:"name"`
	Description       nullable[string]            `json:"description"`
	System            nullable[string]            `json:"system"`
	Model             nullable[json.RawMessage]   `json:"model"`
	Tools             nullable[[]json.RawMessage] `json:"tools"`
	MCPServers        nullable[[]json.RawMessage] `json:"mcp_servers"`
	Skills            nullable[[]json.RawMessage] `json:"skills"`
	Multiagent        nullable[json.RawMessage]   `json:"multiagent"`
	ExecutionIdentity nullable[json.RawMessage]   `json:"execution_identity"`
	Metadata          map[string]*string          `json:"metadata"`
}

// parseAgentCreate validates a create request into a new agent (without id and times).
func parseAgentCreate(body []byte) (*apitype.Agent, error) {
	var req agentCreateRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := checkString("name", req.Name, true, maxNameLen); err != nil {
		return nil, err
	}
	a := &apitype.Agent{Type: apitype.ObjectAgent, Name: req.Name, Version: 1}
	if req.Description != nil {
		if err := checkString("description", *req.Description, false, maxDescriptionLen); err != nil {
			return nil, err
		}
		a.Description = *req.Description
	}
	if req.System != nil {
		if err := checkString("system", *req.System, false, maxSystemLen); err != nil {
			return nil, err
		}
		a.System = *req.System
	}
	if isNull(req.Model) {
		return nil, invalid("model", "required")
	}
	var err error
	if a.Model, err = parseModel("model", req.Model, nil); err != nil {
		return nil, err
	}
	if a.MCPServers, err = resolveMCPServers("mcp_servers", req.MCPServers); err != nil {
		return nil, err
	}
	if a.Tools, err = resolveTools("tools", req.Tools, a.MCPServers); err != nil {
		return nil, err
	}
	if a.Skills, err = resolveSkills("skills", req.Skills); err != nil {
		return nil, err
	}
	if a.Multiagent, err = parseMultiagent("multiagent", req.Multiagent, nil); err != nil {
		return nil, err
	}
	if a.ExecutionIdentity, err = resolveExecIdentity("execution_identity", req.ExecutionIdentity); err != nil {
		return nil, err
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return nil, err
	}
	a.Metadata = req.Metadata
	normalizeAgent(a)
	return a, nil
}

// applyAgentUpdate validates an update request against the current version and returns the next version's
// configuration (same version number; the caller decides whether anything changed).
func applyAgentUpdate(cur *apitype.Agent, req *agentUpdateRequest) (*apitype.Agent, error) {
	next := *cur
	if req.Name.Set {
		if req.Name.Null {
			return nil, invalid("name", "cannot be cleared")
		}
		if err := checkString("name", req.Name.Value, true, maxNameLen); err != nil {
			return nil, err
		}
		next.Name = req.Name.Value
	}
	if req.Description.Set {
		if err := checkString("description", req.Description.Value, false, maxDescriptionLen); err != nil {
			return nil, err
		}
		next.Description = req.Description.Value
	}
	if req.System.Set {
		if err := checkString("system", req.System.Value, false, maxSystemLen); err != nil {
			return nil, err
		}
		next.System = req.System.Value
	}
	var err error
	if req.Model.Set {
		if req.Model.Null {
			return nil, invalid("model", "cannot be cleared")
		}
		if next.Model, err = parseModel("model", req.Model.Value, &cur.Model); err != nil {
			return nil, err
		}
	}
	if req.MCPServers.Set {
		if next.MCPServers, err = resolveMCPServers("mcp_servers", req.MCPServers.Value); err != nil {
			return nil, err
		}
	}
	if req.Tools.Set {
		if next.Tools, err = resolveTools("tools", req.Tools.Value, next.MCPServers); err != nil {
			return nil, err
		}
	} else if req.MCPServers.Set {
		// The stored tools must still reference only servers that exist, and every server needs a toolset.
		if err := checkToolServers(next.Tools, next.MCPServers); err != nil {
			return nil, err
		}
	}
	if req.Skills.Set {
		if next.Skills, err = resolveSkills("skills", req.Skills.Value); err != nil {
			return nil, err
		}
	}
	if req.Multiagent.Set {
		if next.Multiagent, err = parseMultiagent("multiagent", req.Multiagent.Value, cur.Multiagent); err != nil {
			return nil, err
		}
	}
	if req.ExecutionIdentity.Set {
		if next.ExecutionIdentity, err = resolveExecIdentity("execution_identity", req.ExecutionIdentity.Value); err != nil {
			return nil, err
		}
	}
	if req.Metadata != nil {
		if next.Metadata, err = patchMetadata("metadata", cur.Metadata, req.Metadata); err != nil {
			return nil, err
		}
	}
	normalizeAgent(&next)
	return &next, nil
}

// checkToolServers checks that mcp_toolsets and mcp_servers still match after mcp_servers alone changed.
func checkToolServers(tools []apitype.Tool, servers []apitype.MCPServer) error {
	names := map[string]bool{}
	for _, s := range servers {
		names[s.Name] = false
	}
	for i, t := range tools {
		if t.Type != apitype.ToolTypeMCPToolset {
			continue
		}
		if _, ok := names[t.MCPServerName]; !ok {
			return invalid(path(index("tools", i), "mcp_server_name"), "no MCP server named %q in mcp_servers", t.MCPServerName)
		}
		names[t.MCPServerName] = true
	}
	for i, s := range servers {
		if !names[s.Name] {
			return invalid(index("mcp_servers", i), "MCP server %q is not referenced by any mcp_toolset in tools", s.Name)
		}
	}
	return nil
}

// normalizeAgent makes empty collections encode as [] and {}, never null.
func normalizeAgent(a *apitype.Agent) {
	if a.Tools == nil {
		a.Tools = []apitype.Tool{}
	}
	if a.MCPServers == nil {
		a.MCPServers = []apitype.MCPServer{}
	}
	if a.Skills == nil {
		a.Skills = []apitype.SkillRef{}
	}
	if a.Metadata == nil {
		a.Metadata = map[string]string{}
	}
	if a.ExecutionIdentity.Type == "" {
		a.ExecutionIdentity.Type = "service_account"
	}
	if len(a.Multiagent) == 0 {
		a.Multiagent = nil
	}
}

// sameConfig reports whether two versions configure the agent identically.
func sameConfig(a, b *apitype.Agent) bool {
	strip := func(x apitype.Agent) []byte {
		x.Version, x.CreatedAt, x.UpdatedAt, x.ArchivedAt = 0, time.Time{}, time.Time{}, nil
		out, _ := json.Marshal(x)
		return out
	}
	return bytes.Equal(strip(*a), strip(*b))
}

func (s *Server) agentCreate(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	a, err := parseAgentCreate(body)
	if err != nil {
		return err
	}
	if err := s.resolveSkillVersions(r.Context(), "skills", a.Skills); err != nil {
		return err
	}
	now := s.now()
	a.ID = apitype.NewID(apitype.PrefixAgent)
	a.CreatedAt, a.UpdatedAt = now, now
	if err := s.resolveMultiagent(r.Context(), "multiagent", a); err != nil {
		return err
	}
	if err := s.own(r.Context(), a.ID); err != nil {
		return err
	}
	if err := s.store.AgentCreate(r.Context(), a); err != nil {
		return err
	}
	s.emitWebhook(r.Context(), "agent.created", a.ID)
	s.warnWebSearch(w, a.Tools)
	return writeJSON(w, http.StatusOK, a)
}

func (s *Server) agentGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("agent_id")
	version, err := newQuery(r.URL).intParam("version")
	if err != nil {
		return err
	}
	a, err := s.store.AgentGet(r.Context(), &store.AgentGetParams{ID: id, Version: version})
	if err != nil {
		if version > 0 && errors.Is(err, store.ErrNotFound) {
			return notFound("agent version", id+"@"+strconv.Itoa(version))
		}
		return lookup(err, "agent", id)
	}
	normalizeAgent(a)
	return writeJSON(w, http.StatusOK, a)
}

func (s *Server) agentUpdate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("agent_id")
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req agentUpdateRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if req.Version != nil && *req.Version < 1 {
		return invalid("version", "must be >= 1")
	}
	cur, err := s.store.AgentGet(r.Context(), &store.AgentGetParams{ID: id})
	if err != nil {
		return lookup(err, "agent", id)
	}
	normalizeAgent(cur)
	if cur.ArchivedAt != nil {
		return invalid("", "agent %s is archived and cannot be updated", id)
	}
	if req.Version != nil && *req.Version != cur.Version {
		return conflict("version: agent %s is at version %d, not %d; re-read it and retry", id, cur.Version, *req.Version)
	}
	next, err := applyAgentUpdate(cur, &req)
	if err != nil {
		return err
	}
	if req.Skills.Set {
		if err := s.resolveSkillVersions(r.Context(), "skills", next.Skills); err != nil {
			return err
		}
	}
	if req.Multiagent.Set {
		if err := s.resolveMultiagent(r.Context(), "multiagent", next); err != nil {
			return err
		}
	}
	if sameConfig(cur, next) {
		return writeJSON(w, http.StatusOK, cur)
	}
	next.Version = cur.Version + 1
	repointSelf(next)
	next.UpdatedAt = s.now()
	if err := s.store.AgentPutVersion(r.Context(), next); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return conflict("agent %s was updated concurrently; re-read it and retry", id)
		}
		return lookup(err, "agent", id)
	}
	s.emitWebhook(r.Context(), "agent.updated", id)
	s.warnWebSearch(w, next.Tools)
	return writeJSON(w, http.StatusOK, next)
}

func (s *Server) agentList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	p, limit, c, err := listParams(q, defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	p.Desc = true
	data, next, _, err := listByCreated(p, limit, c, false,
		func(p *store.ListParams) ([]apitype.Agent, error) {
			return s.store.AgentList(r.Context(), inWorkspace(r, p))
		},
		func(a *apitype.Agent) (time.Time, string) { return a.CreatedAt, a.ID })
	if err != nil {
		return err
	}
	for i := range data {
		normalizeAgent(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Agent]{Data: data, NextPage: next})
}

func (s *Server) agentArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("agent_id")
	a, err := s.store.AgentArchive(r.Context(), id, s.now())
	if err != nil {
		return lookup(err, "agent", id)
	}
	normalizeAgent(a)
	s.emitWebhook(r.Context(), "agent.archived", id)
	return writeJSON(w, http.StatusOK, a)
}

func (s *Server) agentVersionList(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("agent_id")
	q := newQuery(r.URL)
	limit, err := q.limit(defaultVersionList, maxLimit)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	before := 0
	if c != nil {
		if c.Seq < 2 || c.ID != "" {
			return invalid("page", "invalid page token")
		}
		before = int(c.Seq)
	}
	if _, err := s.store.AgentGet(r.Context(), &store.AgentGetParams{ID: id}); err != nil {
		return lookup(err, "agent", id)
	}
	versions, err := s.store.AgentVersionList(r.Context(), &store.AgentVersionListParams{
		ID: id, Limit: limit + 1, BeforeVersion: before,
	})
	if err != nil {
		return lookup(err, "agent", id)
	}
	versions, more := trim(versions, limit)
	if versions == nil {
		versions = []apitype.Agent{}
	}
	var next *string
	if more && len(versions) > 0 {
		next = seqCursor(int64(versions[len(versions)-1].Version))
	}
	for i := range versions {
		normalizeAgent(&versions[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Agent]{Data: versions, NextPage: next})
}
