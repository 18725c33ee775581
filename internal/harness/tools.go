package harness

import (
	"encoding/json"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// builtinTool is one tool of agent_toolset_20260401 that the brain offers the model.
type builtinTool struct {
	name        string
	description string
	schema      string
}

// builtinTools are the tools of agent_toolset_20260401 that Corral runs in its sandboxes, in the reference
// order. The descriptions and input schemas are those of the official SDK's local executors
// (anthropic-sdk-go/v2 tools/agenttoolset), so a model sees the same tools here as with the hosted service.
//
// web_fetch and web_search are not implemented: the hosted service runs them on its own side, and Corral has no
// equivalent yet. They are never offered to the model, whatever the agent's configuration says; a call to either
// gets an error result.
var builtinTools = []builtinTool{
	{
		name:        "bash",
		description: "Run a bash command in a persistent shell. State (cwd, env vars) persists across calls.",
		schema: `{"type":"object","properties":{` +
			`"command":{"type":"string","description":"The command to run"},` +
			`"restart":{"type":"boolean","description":"Restart the persistent shell before running"},` +
			`"timeout_ms":{"type":"integer","description":"Per-call timeout in milliseconds"}}}`,
	},
	{
		name:        "edit",
		description: "Replace a unique occurrence of old_string with new_string in a file (set replace_all to replace every occurrence).",
		schema: `{"type":"object","properties":{` +
			`"file_path":{"type":"string","description":"Path of the file to edit, rooted at the workdir (absolute paths inside it are allowed)."},` +
			`"old_string":{"type":"string","description":"Substring to find and replace."},` +
			`"new_string":{"type":"string","description":"Replacement text."},` +
			`"replace_all":{"type":"boolean","description":"Replace every occurrence instead of requiring a unique match."}},` +
			`"required":["file_path","old_string","new_string"]}`,
	},
	{
		name:        "read",
		description: "Read a UTF-8 text file rooted at the workdir.",
		schema: `{"type":"object","properties":{` +
			`"file_path":{"type":"string","description":"Path of the file to read, rooted at the workdir (absolute paths inside it are allowed)."},` +
			`"view_range":{"type":"array","items":{"type":"integer"},"description":"[start_line, end_line] 1-indexed inclusive"}},` +
			`"required":["file_path"]}`,
	},
	{
		name:        "write",
		description: "Write a UTF-8 text file rooted at the workdir, creating parent directories as needed.",
		schema: `{"type":"object","properties":{` +
			`"file_path":{"type":"string","description":"Path of the file to write, rooted at the workdir (absolute paths inside it are allowed)."},` +
			`"content":{"type":"string","description":"Full file contents to write."}},` +
			`"required":["file_path","content"]}`,
	},
	{
		name:        "glob",
		description: "List paths matching a glob pattern (e.g. **/*.go), newest first.",
		schema: `{"type":"object","properties":{` +
			`"pattern":{"type":"string","description":"Glob pattern, e.g. **/*.go (** matches any depth)."},` +
			`"path":{"type":"string","description":"Directory to search in. Defaults to the workdir."}},` +
			`"required":["pattern"]}`,
	},
	{
		name:        "grep",
		description: "Search file contents for a regex. Uses ripgrep if available, otherwise a built-in walker.",
		schema: `{"type":"object","properties":{` +
			`"pattern":{"type":"string","description":"Regular expression to search for."},` +
			`"path":{"type":"string","description":"Directory to search in. Defaults to the workdir."}},` +
			`"required":["pattern"]}`,
	},
}

// toolKind says how a tool call is routed.
type toolKind int

const (
	toolUnknown toolKind = iota // not offered to the model: refused with an error result
	toolBuiltin                 // a built-in tool: run by the hands
	toolCustom                  // a custom tool: run by the API client
)

// toolRoute is how the brain treats calls to one tool name.
type toolRoute struct {
	kind   toolKind
	policy apitype.PermissionPolicyType // built-in: the resolved permission policy
	reason string                       // unknown: why the call is refused
}

// toolset is an agent's tools as the brain resolved them: what the model is offered, and how each call is routed.
type toolset struct {
	specs  []model.ToolSpec
	routes map[string]toolRoute
}

// resolveTools resolves an agent's tools. Built-in tools follow agent_toolset_20260401's default_config and
// per-tool configs (as the API stores them: resolved, with enabled and permission_policy set); the default is
// enabled with always_allow. Custom tools are offered with their input schema. mcp_toolset is not supported
// yet: its tools are left out.
func resolveTools(tools []apitype.Tool) *toolset {
	ts := &toolset{routes: map[string]toolRoute{}}
	for _, t := range tools {
		switch t.Type {
		case apitype.ToolTypeAgentToolset:
			enabled, policy := true, apitype.PolicyAlwaysAllow
			if t.DefaultConfig != nil {
				enabled = t.DefaultConfig.Enabled
				if t.DefaultConfig.PermissionPolicy.Type != "" {
					policy = t.DefaultConfig.PermissionPolicy.Type
				}
			}
			for _, bt := range builtinTools {
				on, pol := enabled, policy
				for _, c := range t.Configs {
					if c.Name != bt.name && c.Type != bt.name {
						continue
					}
					on = c.Enabled
					if c.PermissionPolicy.Type != "" {
						pol = c.PermissionPolicy.Type
					}
				}
				if !on {
					ts.routes[bt.name] = toolRoute{kind: toolUnknown, reason: "the tool " + bt.name + " is disabled for this agent"}
					continue
				}
				ts.routes[bt.name] = toolRoute{kind: toolBuiltin, policy: pol}
				ts.specs = append(ts.specs, model.ToolSpec{
					Name: bt.name, Description: bt.description, InputSchema: json.RawMessage(bt.schema),
				})
			}
			for _, name := range []string{"web_fetch", "web_search"} {
				ts.routes[name] = toolRoute{kind: toolUnknown, reason: "the tool " + name + " is not available on this server"}
			}
		case apitype.ToolTypeCustom:
			schema := t.InputSchema
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			ts.routes[t.Name] = toolRoute{kind: toolCustom}
			ts.specs = append(ts.specs, model.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: schema})
		}
	}
	return ts
}

// hasBuiltin reports whether any built-in tool is enabled, i.e. whether the session may need a sandbox.
func (ts *toolset) hasBuiltin() bool {
	for _, r := range ts.routes {
		if r.kind == toolBuiltin {
			return true
		}
	}
	return false
}

// route says how a call to name is handled.
func (ts *toolset) route(name string) toolRoute {
	if r, ok := ts.routes[name]; ok {
		return r
	}
	return toolRoute{kind: toolUnknown, reason: "there is no tool named " + name}
}

// permission maps a resolved policy to the evaluated_permission of an agent.tool_use. The auto policy has no
// classifier in Corral yet; it asks, which is the safe answer.
func permission(policy apitype.PermissionPolicyType) apitype.Permission {
	if policy == apitype.PolicyAlwaysAllow {
		return "allow"
	}
	return "ask"
}
