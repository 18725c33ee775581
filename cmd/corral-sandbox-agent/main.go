// Command corral-sandbox-agent is the in-sandbox agent: bound read-only into every sandbox and started as its
// process, it runs the built-in tools for the host over line-delimited JSON on stdin/stdout. Build it static
// (CGO_ENABLED=0). The corral binary contains the same agent and runs it when invoked under this name. See
// package internal/sandbox/agent.
package main

import (
	"os"

	"github.com/corralhq/corral/internal/sandbox/agent"
)

func main() {
	os.Exit(agent.Main(os.Args[1:]))
}
