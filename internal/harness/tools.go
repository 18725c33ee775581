package harness

import (
	"encoding/json"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
)

// toolRoute is how the brain treats the calls to one tool name.
type toolRoute struct {
	by     execKind                     // who runs the calls (executor.go)
	policy apitype.PermissionPolicyType // gated kinds: the resolved permission policy
	reason string                       // execNone: why the call is refused
	// execMCP: the agent's server and the tool's name there.
	server  apitype.MCPServer
	mcpName string
	// execSearch: the tool's config (domains, user location).
	web *apitype.ToolConfig
}

// toolset is an agent's tools as the brain resolved them: what the model is offered, and how each call is routed.
type toolset struct {
	specs  []model.ToolSpec
	routes map[string]toolRoute
}

// offer offers the model a tool whose calls take the route.
func (ts *toolset) offer(spec model.ToolSpec, r toolRoute) {
	ts.routes[spec.Name] = r
	ts.specs = append(ts.specs, spec)
}

// refuse routes the calls to a tool the model is not offered to an error result saying why.
func (ts *toolset) refuse(name, reason string) {
	ts.routes[name] = toolRoute{by: execNone, reason: reason}
}

// resolveTools is the thread's toolset before its MCP tools: resolveTools of the session's agent, its built-in
// tools routed to the session's executor of built-in tools (the work queue in a self_hosted environment).
func (t *thread) resolveTools() *toolset {
	ts := resolveTools(t.agent.Tools, t.b.cfg.Hands)
	if k := t.builtin(); k != execHands {
		for name, rt := range ts.routes {
			if rt.by == execHands {
				rt.by = k
				ts.routes[name] = rt
			}
		}
	}
	t.addWebFetch(ts)
	if t.roster != nil {
		t.addThreadTools(ts)
	}
	t.addWebSearch(ts)
	return ts
}

// resolveTools merges the routes of a session's tools: the built-in tools the hands serve (hands may be nil:
// none), under the agent's agent_toolset_20260401 config, and the agent's custom tools. The mcp_toolset tools are
// added before each model call (offerMCP, mcp.go), after these, so that their names avoid them.
func resolveTools(tools []apitype.Tool, hands sandbox.Hands) *toolset {
	ts := &toolset{routes: map[string]toolRoute{}}
	for _, t := range tools {
		switch t.Type {
		case apitype.ToolTypeAgentToolset:
			ts.addToolset(&t, hands)
		case apitype.ToolTypeCustom:
			schema := t.InputSchema
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			ts.offer(model.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: schema}, toolRoute{by: execClient})
		}
	}
	return ts
}

// addToolset adds the built-in tools under an agent_toolset_20260401 config: its default_config and per-tool
// configs (as the API stores them: resolved, with enabled and permission_policy set); the default is enabled
// with always_allow. The model is offered the hands' own definitions. A tool of the toolset the hands do not
// serve (web_fetch and web_search, which the hosted service runs on its own side; every tool when there are no
// hands) is refused, whatever the configuration says; the brain's own web_fetch replaces that refusal when it
// has a fetcher (addWebFetch, webfetch.go), and addWebSearch (websearch.go) routes web_search to the server's
// search provider when it has one.
func (ts *toolset) addToolset(t *apitype.Tool, hands sandbox.Hands) {
	var builtins []sandbox.Tool
	if hands != nil {
		builtins = hands.Tools()
	}
	enabled, policy := true, apitype.PolicyAlwaysAllow
	if t.DefaultConfig != nil {
		enabled = t.DefaultConfig.Enabled
		if t.DefaultConfig.PermissionPolicy.Type != "" {
			policy = t.DefaultConfig.PermissionPolicy.Type
		}
	}
	served := map[string]bool{}
	for _, bt := range builtins {
		served[bt.Name] = true
		on, pol := enabled, policy
		for _, c := range t.Configs {
			if c.Name != bt.Name && string(c.Type) != bt.Name {
				continue
			}
			on = c.Enabled
			if c.PermissionPolicy.Type != "" {
				pol = c.PermissionPolicy.Type
			}
		}
		if !on {
			ts.refuse(bt.Name, "the tool "+bt.Name+" is disabled for this agent")
			continue
		}
		ts.offer(model.ToolSpec{Name: bt.Name, Description: bt.Description, InputSchema: bt.InputSchema},
			toolRoute{by: execHands, policy: pol})
	}
	for _, name := range apitype.BuiltinTools {
		switch {
		case served[name]:
		case hands == nil:
			ts.refuse(name, msgNoHands)
		default:
			ts.refuse(name, "the tool "+name+" is not available on this server")
		}
	}
}

// hasBuiltin reports whether any built-in tool is enabled, i.e. whether the session may need a sandbox (a
// self_hosted environment's too, as before the work queue had its own executor: EagerHands provisions for it).
func (ts *toolset) hasBuiltin() bool {
	for _, r := range ts.routes {
		if r.by == execHands || r.by == execWork {
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
	return toolRoute{by: execNone, reason: "there is no tool named " + name}
}

// permission maps a resolved policy to the evaluated_permission of an agent.tool_use. The auto policy has no
// classifier in Corral yet; it asks, which is the safe answer.
func permission(policy apitype.PermissionPolicyType) apitype.Permission {
	if policy == apitype.PolicyAlwaysAllow {
		return apitype.PermissionAllow
	}
	return apitype.PermissionAsk
}
