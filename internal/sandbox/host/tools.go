package host

import (
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
)

// tools are the agent's tools as the sandbox port declares them, converted once.
var tools = func() []sandbox.Tool {
	out := make([]sandbox.Tool, len(agent.Tools()))
	for i, t := range agent.Tools() {
		out[i] = sandbox.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
	}
	return out
}()

// Tools are the in-sandbox agent's built-in tools (agent.Tools), for the Tools of the providers whose sandboxes
// run it. The slice and its schemas are shared: callers must not modify them.
func Tools() []sandbox.Tool { return tools }
