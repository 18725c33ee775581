package harness

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// MCP tools: the agent's mcp_toolset entries offered to the model and their calls routed through Config.MCP, the
// proxy that holds the credentials. The brain sees tool lists and results only, never a token.

// MaxMCPResult caps the text of one MCP tool result (bytes), as the hands cap a built-in tool's output: the rest
// is cut with a note saying how much was shown.
const MaxMCPResult = 100 << 10

// DefaultMCPTimeout bounds one MCP tool call or tool listing when Config.MCPTimeout is zero.
const DefaultMCPTimeout = 2 * time.Minute

// maxToolName is the Messages API's limit on a tool name (pattern ^[a-zA-Z0-9_-]{1,64}$).
const maxToolName = 64

// mcpToolName is the name the model is offered for tool of server: mcp__<server>__<tool> with characters outside
// the API's pattern replaced by "_"; a name too long, or taken by a built-in, custom or other MCP tool, is
// shortened and suffixed with a hash of the server and tool names, so names stay unique and stable.
func mcpToolName(server, tool string, taken func(string) bool) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
				return r
			}
			return '_'
		}, s)
	}
	name := "mcp__" + clean(server) + "__" + clean(tool)
	if len(name) <= maxToolName && !taken(name) {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	for n := 0; ; n++ {
		suffix := "_" + hex.EncodeToString(sum[:4])
		if n > 0 {
			suffix += fmt.Sprintf("_%d", n)
		}
		cand := name[:min(len(name), maxToolName-len(suffix))] + suffix
		if !taken(cand) {
			return cand
		}
	}
}

// offerMCP adds the tools of the agent's MCP servers to the toolset, under each mcp_toolset's configs and
// default_config (enabled; always_allow or always_ask, always_ask by default). The tool lists come from the
// MCP proxy (cached per session there, refreshed when a server says they changed). A server that cannot be
// listed contributes no tools and is reported: the session.error events returned go into the log with the
// turn's start.
func (t *thread) offerMCP() []apitype.NewEvent {
	ts := t.resolveTools()
	t.tools = ts
	var errs []apitype.NewEvent
	for i := range t.agent.Tools {
		set := &t.agent.Tools[i]
		if set.Type != apitype.ToolTypeMCPToolset {
			continue
		}
		srv, ok := t.mcpServer(set.MCPServerName)
		if !ok {
			continue // the API refuses a toolset without its server; nothing to offer
		}
		if t.b.cfg.MCP == nil {
			errs = append(errs, mcpErrorEvent(&mcp.Error{Kind: mcp.KindConnection, Server: srv.Name,
				Message: "this server has no MCP proxy configured, so MCP tools cannot run"}))
			continue
		}
		ctx, cancel := context.WithTimeout(t.ctx, t.mcpTimeout())
		tools, err := t.b.cfg.MCP.ListTools(ctx, t.sess.ID, srv)
		cancel()
		if err != nil {
			if t.ctx.Err() != nil {
				return errs
			}
			e := *mcp.AsError(err, srv.Name)
			e.Message += "; its tools are not offered to the model until it can be listed"
			if !t.mcpDown[srv.Name] { // looked at once per run, not at each model call of a turn
				t.b.cfg.Logger.Warn("mcp server not listed", "session", t.sess.ID, "mcp_server", srv.Name, "kind", e.Kind, "err", e.Message)
				if again, err := t.mcpReported(&e); err != nil {
					t.b.cfg.Logger.Warn("mcp report not checked", "session", t.sess.ID, "mcp_server", srv.Name, "err", err)
					errs = append(errs, mcpErrorEvent(&e))
				} else if !again {
					errs = append(errs, mcpErrorEvent(&e))
				}
				if t.mcpDown == nil {
					t.mcpDown = map[string]bool{}
				}
				t.mcpDown[srv.Name] = true
			}
			continue
		}
		delete(t.mcpDown, srv.Name)
		for _, tool := range tools {
			on, pol := mcpToolConfig(set, tool.Name)
			name := mcpToolName(srv.Name, tool.Name, func(n string) bool { _, ok := ts.routes[n]; return ok })
			route := toolRoute{by: execMCP, policy: pol, server: srv, mcpName: tool.Name}
			if !on {
				route = toolRoute{by: execNone, reason: "the MCP tool " + tool.Name + " of " + srv.Name + " is disabled for this agent"}
				ts.routes[name] = route
				continue
			}
			schema := tool.InputSchema
			if len(schema) == 0 || string(schema) == "null" {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			ts.offer(model.ToolSpec{Name: name, Description: tool.Description, InputSchema: schema}, route)
		}
	}
	return errs
}

// mcpReported reports whether the session's log already says e: the last report about its server is a
// session.error of the same type and message, with no call to the server since. A server that keeps failing
// the same way (a credential missing from the session's vaults, say) is reported once per session, not at
// every turn; one that worked in between, or fails another way, is reported again.
func (t *thread) mcpReported(e *mcp.Error) (bool, error) {
	want := mcpErrorEvent(e)
	var body apitype.SessionError
	if err := json.Unmarshal(want.Data, &body); err != nil {
		return false, err
	}
	before := int64(0)
	for range 4 { // the last 4 pages of errors and MCP calls: an older report is worth repeating
		page, err := t.b.cfg.Store.EventList(t.ctx, &store.EventListParams{
			SessionID: t.sess.ID, BeforeSeq: before, Desc: true, Limit: eventPage,
			Types: []apitype.EventType{apitype.EventSessionError, apitype.EventAgentMCPToolUse},
		})
		if err != nil {
			return false, err
		}
		for _, ev := range page {
			if ev.Type == apitype.EventAgentMCPToolUse {
				var u apitype.AgentMCPToolUse
				if ev.DecodeData(&u) == nil && u.MCPServerName == e.Server {
					return false, nil
				}
				continue
			}
			var se apitype.SessionError
			if ev.DecodeData(&se) != nil || se.Error.MCPServerName != e.Server {
				continue
			}
			return se.Error.Type == body.Error.Type && se.Error.Message == body.Error.Message, nil
		}
		if len(page) < eventPage {
			break
		}
		before = page[len(page)-1].Seq
	}
	return false, nil
}

// mcpToolConfig resolves a tool's enabled and permission policy under its toolset's configs and default_config.
func mcpToolConfig(t *apitype.Tool, name string) (bool, apitype.PermissionPolicyType) {
	on, pol := true, apitype.PolicyAlwaysAsk
	if t.DefaultConfig != nil {
		on = t.DefaultConfig.Enabled
		pol = cmp.Or(t.DefaultConfig.PermissionPolicy.Type, pol)
	}
	for _, c := range t.Configs {
		if c.Name == name {
			on = c.Enabled
			pol = cmp.Or(c.PermissionPolicy.Type, pol)
		}
	}
	return on, pol
}

// mcpServer finds one of the thread's agent's MCP servers by name.
func (t *thread) mcpServer(name string) (apitype.MCPServer, bool) {
	for _, s := range t.agent.MCPServers {
		if s.Name == name {
			return s, true
		}
	}
	return apitype.MCPServer{}, false
}

func (r *run) mcpTimeout() time.Duration { return cmp.Or(r.b.cfg.MCPTimeout, DefaultMCPTimeout) }

// mcpToolUse is the agent.mcp_tool_use of a model's call to an MCP tool.
func mcpToolUse(b *model.Block, route toolRoute) apitype.NewEvent {
	return mustEvent(apitype.EventAgentMCPToolUse, apitype.AgentMCPToolUse{
		MCPServerName: route.server.Name, Name: route.mcpName, Input: b.Input,
		EvaluatedPermission: permission(route.policy), Evaluation: &apitype.ToolEvaluation{Type: route.policy},
		ModelToolUseID: b.ID, ModelToolName: b.Name,
	})
}

// mcpExec is the MCP servers' executor: a call is an agent.mcp_tool_use naming the server and its tool, closed
// with an agent.mcp_tool_result, and run by the brain through the MCP proxy (executeMCP).
type mcpExec struct{}

func (mcpExec) name() string                                      { return "mcp" }
func (mcpExec) gated() bool                                       { return true }
func (mcpExec) answeredBy() apitype.EventType                     { return apitype.EventUserToolResult }
func (mcpExec) recover() bool                                     { return true }
func (mcpExec) use(b *model.Block, rt toolRoute) apitype.NewEvent { return mcpToolUse(b, rt) }

func (mcpExec) close(u *toolUse, isErr bool, src *apitype.FailureSource, text string) apitype.NewEvent {
	return mustEvent(apitype.EventAgentMCPToolResult, apitype.AgentMCPToolResult{
		MCPToolUseID: u.ev.ID, IsError: isErr, Content: []apitype.ContentBlock{apitype.TextBlock(text)}, Source: src,
	})
}

func (mcpExec) settle(*thread, []*toolUse) (bool, error) { return false, nil }
func (mcpExec) run(t *thread, u *toolUse) (bool, error)  { return true, t.executeMCP(u) }

// executeMCP runs an approved MCP tool call through the proxy and appends its result. The agent.mcp_tool_use is
// in the log before the call, so a brain that dies during it leaves a call the next brain closes as of unknown
// outcome, never one it runs again. A server that cannot be reached or refuses the credential also gets a
// session.error naming it; the model sees an error result it can act on, and the turn goes on.
func (t *thread) executeMCP(u *toolUse) error {
	delete(t.fresh, u.ev.ID)
	srv, ok := t.mcpServer(u.server)
	if !ok || t.b.cfg.MCP == nil {
		_, err := t.append("", nil, u.closeResult(true, "the MCP server "+u.server+" is not available to this session"))
		return err
	}
	input := u.data.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}")
	}
	ctx, done := t.watchInterrupts()
	ctx, cancel := context.WithTimeout(ctx, t.mcpTimeout())
	_, span := t.startToolSpan(u.data.Name, u.ev.ID, "mcp")
	span.SetAttributes(attribute.String("corral.mcp.server", srv.Name))
	began := time.Now()
	res, err := t.b.cfg.MCP.CallTool(trace.ContextWithSpan(ctx, span), t.sess.ID, srv, u.data.Name, input)
	t.b.cfg.Metrics.ToolCall(u.data.Name, "mcp", time.Since(began), err != nil || res.IsError)
	timedOut := ctx.Err() == context.DeadlineExceeded
	var src *apitype.FailureSource
	if err != nil {
		src = mcpSource(mcp.AsError(err, srv.Name), timedOut)
	}
	endToolSpan(span, src, err, err == nil && res.IsError)
	cancel()
	interrupted := done()
	var evs []apitype.NewEvent
	switch {
	case interrupted:
		evs = append(evs, u.closeResult(true, msgInterrupted))
	case t.ctx.Err() != nil:
		return context.Cause(t.ctx)
	case timedOut:
		e := &mcp.Error{Kind: mcp.KindConnection, Server: srv.Name, Message: fmt.Sprintf("the tool call did not finish within %s", t.mcpTimeout())}
		evs = append(evs, u.closeFailed(mcpSource(e, true), "The MCP server "+srv.Name+" did not answer in time, so the outcome of this call is unknown."), mcpTimeoutEvent(e))
	case err != nil:
		e := mcp.AsError(err, srv.Name)
		t.b.cfg.Logger.Warn("mcp tool call failed", "session", t.sess.ID, "mcp_server", srv.Name, "tool", u.data.Name, "kind", e.Kind, "err", e.Message)
		evs = append(evs, u.closeFailed(mcpSource(e, false), "The MCP server "+srv.Name+" could not be used: "+e.Message), mcpErrorEvent(e))
	default:
		evs = append(evs, mustEvent(apitype.EventAgentMCPToolResult, apitype.AgentMCPToolResult{
			MCPToolUseID: u.ev.ID, Content: capMCPContent(res.Content), IsError: res.IsError,
		}))
	}
	_, err = t.append("", nil, evs...)
	return err
}

// mcpErrorEvent is the session.error of an MCP failure. The session goes on (retrying: the next turn tries the
// server again).
func mcpErrorEvent(e *mcp.Error) apitype.NewEvent { return mcpError(e, mcpSource(e, false)) }

// mcpTimeoutEvent is the session.error of an MCP tool call that did not finish in time.
func mcpTimeoutEvent(e *mcp.Error) apitype.NewEvent { return mcpError(e, mcpSource(e, true)) }

func mcpError(e *mcp.Error, src *apitype.FailureSource) apitype.NewEvent {
	typ := apitype.SessionErrMCPConnection
	if e.Kind == mcp.KindAuthentication {
		typ = apitype.SessionErrMCPAuthentication
	}
	return mustEvent(apitype.EventSessionError, apitype.SessionError{Error: apitype.SessionErrorBody{
		Type: typ, Message: e.Error(), MCPServerName: e.Server,
		RetryStatus: apitype.RetryStatus{Type: apitype.RetryStatusRetrying}, Source: src,
	}})
}

// capMCPContent keeps at most MaxMCPResult bytes of a result's content (text, image and document sources), cutting
// the text block that passes it and dropping what follows, with a note saying how much was shown.
func capMCPContent(content []apitype.ContentBlock) []apitype.ContentBlock {
	size := func(c apitype.ContentBlock) int { return len(c.Text) + len(c.Source) + len(c.Content) }
	all := 0
	for _, c := range content {
		all += size(c)
	}
	if all <= MaxMCPResult {
		return content
	}
	shown, out := 0, []apitype.ContentBlock{}
	for _, c := range content {
		if shown+size(c) <= MaxMCPResult {
			shown += size(c)
			out = append(out, c)
			continue
		}
		if room := MaxMCPResult - shown; c.Type == apitype.ContentText && room > 0 {
			cut := room
			for cut > 0 && c.Text[cut]&0xC0 == 0x80 {
				cut--
			}
			out = append(out, apitype.TextBlock(c.Text[:cut]))
			shown += cut
		}
		break
	}
	return append(out, apitype.TextBlock(fmt.Sprintf("[output truncated: %d of %d bytes shown]", shown, all)))
}
