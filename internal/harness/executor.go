package harness

import (
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// Executors: who runs the calls to a tool. Every tool route names an executor kind (tools.go), every tool use in
// the log carries the kind of the route it was made under (derive), and everything that differs between kinds
// (the event that records a call, the event that closes one, whether the brain runs it or waits for an answer,
// what becomes of a call a crash cut short) is a method of the kind's executor, looked up in executors. No step
// asks which kind a call is: the route sources (resolveTools, offerMCP) and the readers of tool use events
// (useEvents) name the kinds, the executors say what the kinds do.
//
// Adding a kind of tool is one executor and one row of executors: the thread tools of multi-agent sessions
// (start_thread, send_thread_message, consult_advisor) were added so (agentsExec, coordinate.go), their calls
// recorded as agent.tool_use, run by the brain, and run again when a crash cut one short (their effects and their
// result are one append).
type executor interface {
	// name names the kind in metrics and spans (corral.tool.route).
	name() string
	// gated reports whether the calls are under a permission policy: allowed, asked or denied when the model makes
	// them, and confirmed by the user when asked. A client's own tool is not.
	gated() bool
	// use is the event that records the model's call b to a tool of route rt, before anything runs it.
	use(b *model.Block, rt toolRoute) apitype.NewEvent
	// close is the result that ends call u without running it (a denial, an interrupt, a crash), failed in src's
	// part of Corral (nil: in none).
	close(u *toolUse, isErr bool, src *apitype.FailureSource, text string) apitype.NewEvent
	// answeredBy is the client event type that can answer the calls (user.tool_result or user.custom_tool_result).
	answeredBy() apitype.EventType
	// recover reports whether the brain closes, as of unknown outcome, an approved call this run did not start and
	// that has no result (a crash cut it short; rule 8). Kinds whose calls someone else runs settle them their way.
	recover() bool
	// settle acts on the kind's open calls, refused ones aside, before the client's answers are read (the work
	// queue hands them to a worker). It reports whether it appended anything.
	settle(t *thread, open []*toolUse) (bool, error)
	// run runs an approved call the run made or saw confirmed and appends its result. It reports false when the
	// brain does not run the kind's calls: they wait for an answer from outside (the client, a worker).
	run(t *thread, u *toolUse) (bool, error)
}

// execKind names an executor: the key of executors.
type execKind int

const (
	execNone   execKind = iota // nobody: the call is refused with an error result (see toolRoute.reason)
	execHands                  // the hands: a built-in tool, run in the session's sandbox (hands.go)
	execClient                 // the API client: a custom tool, answered with user.custom_tool_result
	execMCP                    // an MCP server, through the MCP proxy (mcp.go)
	execWork                   // a self_hosted environment's built-in tool, on a worker via the work queue
	execAgents                 // a multi-agent session's thread tools, run by the brain itself (coordinate.go)
	execWeb                    // web_fetch, run by the brain itself outside every sandbox (webfetch.go)
	execSearch                 // web_search, run by the brain through the server's search provider (websearch.go)
)

// executors is the one table of executors, by kind.
var executors = map[execKind]executor{
	execNone:   refusedExec{},
	execHands:  handsExec{},
	execClient: clientExec{},
	execMCP:    mcpExec{},
	execWork:   workExec{},
	execAgents: agentsExec{},
	execWeb:    webExec{},
	execSearch: searchExec{},
}

// exec is the executor of a kind.
func exec(k execKind) executor { return executors[k] }

// builtinExec is the shared part of the executors of built-in tools and of refused calls: an agent.tool_use with
// the evaluated permission, an agent.tool_result to close it, answered by a user.tool_result, never run by
// default.
type builtinExec struct{}

func (builtinExec) gated() bool                   { return true }
func (builtinExec) answeredBy() apitype.EventType { return apitype.EventUserToolResult }
func (builtinExec) recover() bool                 { return false }

func (builtinExec) use(b *model.Block, rt toolRoute) apitype.NewEvent {
	return mustEvent(apitype.EventAgentToolUse, apitype.AgentToolUse{Name: b.Name, Input: b.Input, ModelToolUseID: b.ID,
		EvaluatedPermission: permission(rt.policy), Evaluation: &apitype.ToolEvaluation{Type: rt.policy}})
}

func (builtinExec) close(u *toolUse, isErr bool, src *apitype.FailureSource, text string) apitype.NewEvent {
	if src != nil {
		return failedResult(u.ev.ID, src, text)
	}
	return toolResult(u.ev.ID, isErr, text)
}

func (builtinExec) settle(*thread, []*toolUse) (bool, error) { return false, nil }
func (builtinExec) run(*thread, *toolUse) (bool, error)      { return false, nil }

// refusedExec records a call to a tool nobody runs (unknown, disabled, or not served here) as an agent.tool_use
// denied before any policy; the step that finds it gives it its route's reason as an error result.
type refusedExec struct{ builtinExec }

func (refusedExec) name() string { return "none" }

func (refusedExec) use(b *model.Block, _ toolRoute) apitype.NewEvent {
	return mustEvent(apitype.EventAgentToolUse, apitype.AgentToolUse{Name: b.Name, Input: b.Input, ModelToolUseID: b.ID,
		EvaluatedPermission: apitype.PermissionDeny})
}

// clientExec is the API client's: a custom tool, recorded as an agent.custom_tool_use and answered by the client's
// user.custom_tool_result; the brain runs nothing and the session waits (requires_action).
type clientExec struct{ builtinExec }

func (clientExec) name() string                  { return "client" }
func (clientExec) gated() bool                   { return false }
func (clientExec) answeredBy() apitype.EventType { return apitype.EventUserCustomToolResult }

func (clientExec) use(b *model.Block, _ toolRoute) apitype.NewEvent {
	return mustEvent(apitype.EventAgentCustomToolUse, apitype.AgentToolUse{Name: b.Name, Input: b.Input, ModelToolUseID: b.ID})
}

// rerunOpen is the settle of an executor whose calls have no effect but their result (or whose effects and
// result are one append): the first approved call a crash left open, not sent by this run, is run again.
func rerunOpen(t *thread, open []*toolUse, run func(*thread, *toolUse) error) (bool, error) {
	for _, u := range open {
		if u.approved() && !t.fresh[u.ev.ID] {
			return true, run(t, u)
		}
	}
	return false, nil
}
