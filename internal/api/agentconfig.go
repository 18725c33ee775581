package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// This file validates and resolves the parts of an agent configuration that sessions reuse: model, tools, MCP
// servers, skills, execution identity and multiagent.

var efforts = []apitype.EffortType{apitype.EffortLow, apitype.EffortMedium, apitype.EffortHigh, apitype.EffortXHigh,
	apitype.EffortMax}

// defaultEffort is the effort of a model configured without one.
const defaultEffort = apitype.EffortHigh

// parseModel validates «ModelConfigIn»: a model id or {"id","effort","speed","inference_geo"}. prev, when not
// nil, is the stored model: an omitted effort keeps it.
func parseModel(p string, raw json.RawMessage, prev *apitype.ModelConfig) (apitype.ModelConfig, error) {
	raw = bytes.TrimSpace(raw)
	var m apitype.ModelConfig
	if len(raw) > 0 && raw[0] == '"' {
		if err := json.Unmarshal(raw, &m.ID); err != nil {
			return m, invalid(p, "expected a string or an object")
		}
	} else {
		var in struct {
			ID           string          `json:"id"`
			Effort       json.RawMessage `json:"effort"`
			Speed        string          `json:"speed"`
			InferenceGeo string          `json:"inference_geo"`
		}
		if len(raw) == 0 || raw[0] != '{' {
			return m, invalid(p, "expected a model id or an object")
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return m, err
		}
		m.ID, m.Speed, m.InferenceGeo = in.ID, in.Speed, in.InferenceGeo
		if !isNull(in.Effort) {
			e, err := parseEffort(path(p, "effort"), in.Effort)
			if err != nil {
				return m, err
			}
			m.Effort = &apitype.Effort{Type: e}
		}
		switch m.Speed {
		case "", "standard", "fast":
		default:
			return m, invalid(path(p, "speed"), `must be "standard" or "fast"`)
		}
		if err := checkString(path(p, "inference_geo"), m.InferenceGeo, false, 64); err != nil {
			return m, err
		}
	}
	if err := checkString(path(p, "id"), m.ID, true, 256); err != nil {
		return m, err
	}
	if m.Effort == nil {
		if prev != nil && prev.Effort != nil {
			m.Effort = &apitype.Effort{Type: prev.Effort.Type}
		} else {
			m.Effort = &apitype.Effort{Type: defaultEffort}
		}
	}
	return m, nil
}

func parseEffort(p string, raw json.RawMessage) (apitype.EffortType, error) {
	var e apitype.EffortType
	if bytes.HasPrefix(raw, []byte(`"`)) {
		if err := json.Unmarshal(raw, &e); err != nil {
			return "", invalid(p, "expected a string or an object")
		}
	} else {
		var in apitype.Effort
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return "", err
		}
		e = in.Type
	}
	if !e.Valid() {
		return "", invalid(p, "unknown effort %q (want one of %s)", e, join(efforts, ", "))
	}
	return e, nil
}

// Tool limits.
const (
	maxTools      = 256
	maxMCPServers = 20
	maxSkills     = 20
)

// validToolName reports whether name is 1-128 characters of [A-Za-z0-9_-].
func validToolName(name string) bool {
	if len(name) < 1 || len(name) > 128 {
		return false
	}
	for i := range len(name) {
		if c := name[i]; !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

type policyIn struct {
	Type apitype.PermissionPolicyType `json:"type"`
}

func (pi *policyIn) resolve(p string, def apitype.PermissionPolicy) (apitype.PermissionPolicy, error) {
	if pi == nil {
		return def, nil
	}
	if !pi.Type.Valid() {
		return def, invalid(path(p, "type"), "unknown permission policy %q", pi.Type)
	}
	return apitype.PermissionPolicy{Type: pi.Type}, nil
}

type toolDefaultsIn struct {
	Enabled          *bool     `json:"enabled"`
	PermissionPolicy *policyIn `json:"permission_policy"`
}

func (d *toolDefaultsIn) resolve(p string, defPolicy apitype.PermissionPolicyType) (*apitype.ToolDefaults, error) {
	out := &apitype.ToolDefaults{Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: defPolicy}}
	if d == nil {
		return out, nil
	}
	if d.Enabled != nil {
		out.Enabled = *d.Enabled
	}
	pol, err := d.PermissionPolicy.resolve(path(p, "permission_policy"), out.PermissionPolicy)
	out.PermissionPolicy = pol
	return out, err
}

// Default permission policies: the built-in toolset runs tools without asking (the hosted service's documented
// default); MCP tools ask first.
const (
	defaultBuiltinPolicy = apitype.PolicyAlwaysAllow
	defaultMCPPolicy     = apitype.PolicyAlwaysAsk
)

// resolveTools validates tools[] and resolves every default, so that responses (and the brain) see each
// built-in tool's effective configuration. servers are the agent's MCP servers, which mcp_toolsets reference.
func resolveTools(p string, raws []json.RawMessage, servers []apitype.MCPServer) ([]apitype.Tool, error) {
	if len(raws) > maxTools {
		return nil, invalid(p, "at most %d tools", maxTools)
	}
	tools := make([]apitype.Tool, 0, len(raws))
	seenToolset := false
	customNames := map[string]bool{}
	mcpNames := map[string]bool{}
	for i, raw := range raws {
		ip := index(p, i)
		typ, err := typeOf(ip, raw)
		if err != nil {
			return nil, err
		}
		var t apitype.Tool
		switch apitype.ToolType(typ) {
		case apitype.ToolTypeAgentToolset:
			if seenToolset {
				return nil, invalid(ip, "only one %s entry is allowed", apitype.ToolTypeAgentToolset)
			}
			seenToolset = true
			t, err = resolveToolset(ip, raw)
		case apitype.ToolTypeMCPToolset:
			t, err = resolveMCPToolset(ip, raw, servers)
			if err == nil {
				if mcpNames[t.MCPServerName] {
					return nil, invalid(path(ip, "mcp_server_name"), "MCP server %q has two toolsets", t.MCPServerName)
				}
				mcpNames[t.MCPServerName] = true
			}
		case apitype.ToolTypeCustom:
			t, err = resolveCustomTool(ip, raw)
			if err == nil {
				if customNames[t.Name] {
					return nil, invalid(path(ip, "name"), "duplicate custom tool name %q", t.Name)
				}
				customNames[t.Name] = true
			}
		case "":
			return nil, invalid(path(ip, "type"), "required")
		default:
			return nil, invalid(path(ip, "type"), "unknown tool type %q", typ)
		}
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	for i, s := range servers {
		if !mcpNames[s.Name] {
			return nil, invalid(index("mcp_servers", i), "MCP server %q is not referenced by any mcp_toolset in tools", s.Name)
		}
	}
	return tools, nil
}

type builtinConfigIn struct {
	Name             string          `json:"name"`
	Type             string          `json:"type"`
	Enabled          *bool           `json:"enabled"`
	PermissionPolicy *policyIn       `json:"permission_policy"`
	AllowedDomains   []string        `json:"allowed_domains"`
	BlockedDomains   []string        `json:"blocked_domains"`
	MaxContentTokens *int            `json:"max_content_tokens"`
	URLSources       json.RawMessage `json:"url_sources"`
	UserLocation     json.RawMessage `json:"user_location"`
}

func resolveToolset(p string, raw json.RawMessage) (apitype.Tool, error) {
	var in struct {
		Type          string            `json:"type"`
		DefaultConfig *toolDefaultsIn   `json:"default_config"`
		Configs       []builtinConfigIn `json:"configs"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return apitype.Tool{}, err
	}
	def, err := in.DefaultConfig.resolve(path(p, "default_config"), defaultBuiltinPolicy)
	if err != nil {
		return apitype.Tool{}, err
	}
	byName := map[string]apitype.ToolConfig{}
	for i, c := range in.Configs {
		cp := index(path(p, "configs"), i)
		name := c.Name
		if name == "" {
			name = c.Type // the type is accepted as an alias of the name
		}
		if c.Type != "" && c.Type != name {
			return apitype.Tool{}, invalid(path(cp, "type"), "%q does not match name %q", c.Type, name)
		}
		if !slices.Contains(apitype.BuiltinTools, name) {
			if name == "" {
				return apitype.Tool{}, invalid(path(cp, "name"), "required")
			}
			return apitype.Tool{}, invalid(path(cp, "name"), "unknown built-in tool %q (want one of %s)", name,
				strings.Join(apitype.BuiltinTools, ", "))
		}
		if _, dup := byName[name]; dup {
			return apitype.Tool{}, invalid(path(cp, "name"), "tool %q configured twice", name)
		}
		tc, err := resolveBuiltinConfig(cp, name, c, def)
		if err != nil {
			return apitype.Tool{}, err
		}
		byName[name] = tc
	}
	t := apitype.Tool{Type: apitype.ToolTypeAgentToolset, DefaultConfig: def}
	for _, name := range apitype.BuiltinTools {
		tc, ok := byName[name]
		if !ok {
			tc = apitype.ToolConfig{Name: name, Type: apitype.BuiltinToolType(name), Enabled: def.Enabled, PermissionPolicy: def.PermissionPolicy}
		}
		if name == "web_fetch" && tc.URLSources == nil {
			tc.URLSources = &apitype.WebURLSources{} // resolved: every source unset (null), i.e. all
		}
		t.Configs = append(t.Configs, tc)
	}
	return t, nil
}

func resolveBuiltinConfig(p, name string, c builtinConfigIn, def *apitype.ToolDefaults) (apitype.ToolConfig, error) {
	tc := apitype.ToolConfig{Name: name, Type: apitype.BuiltinToolType(name), Enabled: def.Enabled, PermissionPolicy: def.PermissionPolicy}
	if c.Enabled != nil {
		tc.Enabled = *c.Enabled
	}
	pol, err := c.PermissionPolicy.resolve(path(p, "permission_policy"), def.PermissionPolicy)
	if err != nil {
		return tc, err
	}
	tc.PermissionPolicy = pol
	web := name == "web_fetch" || name == "web_search"
	if !web && (c.AllowedDomains != nil || c.BlockedDomains != nil) {
		return tc, invalid(p, "allowed_domains and blocked_domains apply only to web_fetch and web_search")
	}
	if c.AllowedDomains != nil && c.BlockedDomains != nil {
		return tc, invalid(p, "allowed_domains and blocked_domains are mutually exclusive")
	}
	for _, f := range []struct {
		key  string
		list []string
	}{{"allowed_domains", c.AllowedDomains}, {"blocked_domains", c.BlockedDomains}} {
		if f.list == nil {
			continue
		}
		if len(f.list) == 0 || len(f.list) > 64 {
			return tc, invalid(path(p, f.key), "must list between 1 and 64 domains")
		}
		for j, d := range f.list {
			if d == "" || strings.ContainsAny(d, " \t\r\n") || (name == "web_fetch" && strings.Contains(d, "/")) {
				return tc, invalid(index(path(p, f.key), j), "invalid domain %q", d)
			}
		}
	}
	tc.AllowedDomains, tc.BlockedDomains = c.AllowedDomains, c.BlockedDomains
	if name != "web_fetch" && (c.MaxContentTokens != nil || !isNull(c.URLSources)) {
		return tc, invalid(p, "max_content_tokens and url_sources apply only to web_fetch")
	}
	if c.MaxContentTokens != nil {
		if *c.MaxContentTokens < 1 {
			return tc, invalid(path(p, "max_content_tokens"), "must be >= 1")
		}
		tc.MaxContentTokens = c.MaxContentTokens
	}
	if !isNull(c.URLSources) {
		src, err := resolveURLSources(path(p, "url_sources"), c.URLSources)
		if err != nil {
			return tc, err
		}
		tc.URLSources = src
	}
	if name != "web_search" && !isNull(c.UserLocation) {
		return tc, invalid(p, "user_location applies only to web_search")
	}
	if !isNull(c.UserLocation) {
		var loc struct {
			Type     string `json:"type"`
			City     string `json:"city,omitempty"`
			Region   string `json:"region,omitempty"`
			Country  string `json:"country,omitempty"`
			Timezone string `json:"timezone,omitempty"`
		}
		lp := path(p, "user_location")
		if err := strictUnmarshal(lp, c.UserLocation, &loc); err != nil {
			return tc, err
		}
		if loc.Type == "" {
			loc.Type = "approximate"
		}
		if loc.Type != "approximate" {
			return tc, invalid(path(lp, "type"), `must be "approximate"`)
		}
		if loc.Country != "" && len(loc.Country) != 2 {
			return tc, invalid(path(lp, "country"), "must be an ISO 3166-1 alpha-2 code")
		}
		tc.UserLocation, _ = json.Marshal(loc)
	}
	return tc, nil
}

func resolveURLSources(p string, raw json.RawMessage) (*apitype.WebURLSources, error) {
	var in struct {
		UserInput         json.RawMessage `json:"user_input"`
		ClientToolResults json.RawMessage `json:"client_tool_results"`
		ServerToolResults json.RawMessage `json:"server_tool_results"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	var out apitype.WebURLSources
	var err error
	if out.UserInput, err = resolveURLFilter(path(p, "user_input"), in.UserInput, false); err != nil {
		return nil, err
	}
	if out.ClientToolResults, err = resolveURLFilter(path(p, "client_tool_results"), in.ClientToolResults, true); err != nil {
		return nil, err
	}
	if out.ServerToolResults, err = resolveURLFilter(path(p, "server_tool_results"), in.ServerToolResults, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// resolveURLFilter normalises a URL filter to its object form; null stays null (= all).
func resolveURLFilter(p string, raw json.RawMessage, lists bool) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	var f struct {
		Type  string `json:"type"`
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools,omitempty"`
	}
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) {
		if err := json.Unmarshal(raw, &f.Type); err != nil {
			return nil, invalid(p, "expected a string or an object")
		}
	} else if err := strictUnmarshal(p, raw, &f); err != nil {
		return nil, err
	}
	switch f.Type {
	case "all", "none":
		if len(f.Tools) > 0 {
			return nil, invalid(path(p, "tools"), "not allowed with type %q", f.Type)
		}
	case "only", "except":
		if !lists {
			return nil, invalid(path(p, "type"), `must be "all" or "none"`)
		}
		if len(f.Tools) == 0 || len(f.Tools) > 128 {
			return nil, invalid(path(p, "tools"), "must list between 1 and 128 tools")
		}
		for i := range f.Tools {
			if f.Tools[i].Type == "" {
				f.Tools[i].Type = "tool_reference"
			}
			if f.Tools[i].Type != "tool_reference" || f.Tools[i].Name == "" {
				return nil, invalid(index(path(p, "tools"), i), `want {"type":"tool_reference","name":...}`)
			}
		}
	default:
		return nil, invalid(path(p, "type"), "unknown URL filter %q", f.Type)
	}
	out, _ := json.Marshal(f)
	return out, nil
}

func resolveMCPToolset(p string, raw json.RawMessage, servers []apitype.MCPServer) (apitype.Tool, error) {
	var in struct {
		Type          string          `json:"type"`
		MCPServerName string          `json:"mcp_server_name"`
		DefaultConfig *toolDefaultsIn `json:"default_config"`
		Configs       []struct {
			Name             string    `json:"name"`
			Enabled          *bool     `json:"enabled"`
			PermissionPolicy *policyIn `json:"permission_policy"`
		} `json:"configs"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return apitype.Tool{}, err
	}
	if err := checkString(path(p, "mcp_server_name"), in.MCPServerName, true, 255); err != nil {
		return apitype.Tool{}, err
	}
	if !slices.ContainsFunc(servers, func(s apitype.MCPServer) bool { return s.Name == in.MCPServerName }) {
		return apitype.Tool{}, invalid(path(p, "mcp_server_name"), "no MCP server named %q in mcp_servers", in.MCPServerName)
	}
	def, err := in.DefaultConfig.resolve(path(p, "default_config"), defaultMCPPolicy)
	if err != nil {
		return apitype.Tool{}, err
	}
	t := apitype.Tool{Type: apitype.ToolTypeMCPToolset, MCPServerName: in.MCPServerName, DefaultConfig: def,
		Configs: []apitype.ToolConfig{}}
	seen := map[string]bool{}
	for i, c := range in.Configs {
		cp := index(path(p, "configs"), i)
		if err := checkString(path(cp, "name"), c.Name, true, 128); err != nil {
			return apitype.Tool{}, err
		}
		if seen[c.Name] {
			return apitype.Tool{}, invalid(path(cp, "name"), "tool %q configured twice", c.Name)
		}
		seen[c.Name] = true
		tc := apitype.ToolConfig{Name: c.Name, Enabled: def.Enabled, PermissionPolicy: def.PermissionPolicy}
		if c.Enabled != nil {
			tc.Enabled = *c.Enabled
		}
		if tc.PermissionPolicy, err = c.PermissionPolicy.resolve(path(cp, "permission_policy"), def.PermissionPolicy); err != nil {
			return apitype.Tool{}, err
		}
		t.Configs = append(t.Configs, tc)
	}
	return t, nil
}

func resolveCustomTool(p string, raw json.RawMessage) (apitype.Tool, error) {
	var in struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return apitype.Tool{}, err
	}
	if in.Name == "" {
		return apitype.Tool{}, invalid(path(p, "name"), "required")
	}
	if !validToolName(in.Name) {
		return apitype.Tool{}, invalid(path(p, "name"), "must be 1-128 characters of [A-Za-z0-9_-]")
	}
	if err := checkString(path(p, "description"), in.Description, true, 10000); err != nil {
		return apitype.Tool{}, err
	}
	sp := path(p, "input_schema")
	if isNull(in.InputSchema) {
		return apitype.Tool{}, invalid(sp, "required")
	}
	var schema struct {
		Type       *string         `json:"type"`
		Properties json.RawMessage `json:"properties"`
		Required   json.RawMessage `json:"required"`
	}
	if err := json.Unmarshal(in.InputSchema, &schema); err != nil {
		return apitype.Tool{}, invalid(sp, "must be a JSON schema object")
	}
	if schema.Type == nil || *schema.Type != "object" {
		return apitype.Tool{}, invalid(path(sp, "type"), `must be "object"`)
	}
	if !isNull(schema.Properties) && !bytes.HasPrefix(bytes.TrimSpace(schema.Properties), []byte("{")) {
		return apitype.Tool{}, invalid(path(sp, "properties"), "must be an object")
	}
	if !isNull(schema.Required) {
		var req []string
		if err := json.Unmarshal(schema.Required, &req); err != nil {
			return apitype.Tool{}, invalid(path(sp, "required"), "must be an array of strings")
		}
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, in.InputSchema) // valid: it just decoded
	return apitype.Tool{Type: apitype.ToolTypeCustom, Name: in.Name, Description: in.Description,
		InputSchema: compact.Bytes()}, nil
}

// resolveMCPServers validates mcp_servers[]: unique names, http(s) URLs.
func resolveMCPServers(p string, raws []json.RawMessage) ([]apitype.MCPServer, error) {
	if len(raws) > maxMCPServers {
		return nil, invalid(p, "at most %d MCP servers", maxMCPServers)
	}
	out := make([]apitype.MCPServer, 0, len(raws))
	seen := map[string]bool{}
	for i, raw := range raws {
		ip := index(p, i)
		var in apitype.MCPServer
		if err := strictUnmarshal(ip, raw, &in); err != nil {
			return nil, err
		}
		if in.Type == "" {
			in.Type = "url"
		}
		if in.Type != "url" {
			return nil, invalid(path(ip, "type"), `must be "url"`)
		}
		if err := checkString(path(ip, "name"), in.Name, true, 255); err != nil {
			return nil, err
		}
		if seen[in.Name] {
			return nil, invalid(path(ip, "name"), "duplicate MCP server name %q", in.Name)
		}
		seen[in.Name] = true
		if err := checkURL(path(ip, "url"), in.URL); err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

func checkURL(p, s string) error {
	if s == "" {
		return invalid(p, "required")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid(p, "must be an http or https URL")
	}
	return nil
}

// resolveSkills validates skills[]; an omitted version resolves to "latest".
func resolveSkills(p string, raws []json.RawMessage) ([]apitype.SkillRef, error) {
	if len(raws) > maxSkills {
		return nil, invalid(p, "at most %d skills", maxSkills)
	}
	out := make([]apitype.SkillRef, 0, len(raws))
	for i, raw := range raws {
		ip := index(p, i)
		var in apitype.SkillRef
		if err := strictUnmarshal(ip, raw, &in); err != nil {
			return nil, err
		}
		if !in.Type.Valid() {
			return nil, invalid(path(ip, "type"), `must be "anthropic" or "custom"`)
		}
		if err := checkString(path(ip, "skill_id"), in.SkillID, true, 256); err != nil {
			return nil, err
		}
		if in.Type == apitype.SkillSourceAnthropic {
			return nil, invalid(path(ip, "skill_id"), "Anthropic's pre-built skill %q is not available on this server; "+
				"upload a skill of your own (POST /v1/skills) and reference it as {\"type\":\"custom\"}", in.SkillID)
		}
		if in.Version == "" {
			in.Version = "latest"
		}
		out = append(out, in)
	}
	return out, nil
}

// resolveSkillVersions checks that each custom skill reference names a stored skill version and resolves its
// version ("latest" included) to the version's id, as the hosted service answers it.
func (s *Server) resolveSkillVersions(ctx context.Context, p string, refs []apitype.SkillRef) error {
	for i := range refs {
		ref := &refs[i]
		v, err := s.store.SkillVersionGet(ctx, ref.SkillID, ref.Version)
		if errors.Is(err, store.ErrNotFound) {
			return invalid(path(index(p, i), "skill_id"), "no skill %q with version %q (create it with POST /v1/skills)", ref.SkillID, ref.Version)
		}
		if err != nil {
			return err
		}
		ref.Version = v.ID
	}
	return nil
}

// resolveExecIdentity validates execution_identity; omitted or null is the service account.
func resolveExecIdentity(p string, raw json.RawMessage) (apitype.ExecutionIdentity, error) {
	def := apitype.ExecutionIdentity{Type: apitype.IdentityServiceAccount}
	if isNull(raw) {
		return def, nil
	}
	var in apitype.ExecutionIdentity
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return def, err
	}
	switch in.Type {
	case apitype.IdentityServiceAccount:
		if in.RoleARN != "" {
			return def, invalid(path(p, "role_arn"), "not allowed for service_account")
		}
		return def, nil
	case apitype.IdentityAWSRole:
		if err := checkString(path(p, "role_arn"), in.RoleARN, true, 2048); err != nil {
			return def, err
		}
		return in, nil
	}
	return def, invalid(path(p, "type"), `must be "service_account" or "aws_role"`)
}
