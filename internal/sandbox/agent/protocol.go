// Package agent is the in-sandbox agent: the small static program (cmd/corral-sandbox-agent) bound read-only
// into every sandbox and started as the sandbox's process, and the sandbox's half of its protocol. It speaks
// line-delimited JSON over stdin/stdout: one Request per line in, one Response per line out, matched by ID, and
// implements the built-in toolset agent_toolset_20260401 (bash, read, write, edit, glob, grep) with the schemas
// and behaviour of the reference SDK's tools/agenttoolset. Tools declares them: name, description, schema and
// implementation of each tool are one entry of one table (tools.go).
//
// The protocol's types (this file) stay here rather than in a package of their own: the host's half
// (host.Client) needs them and the tool table, the agent needs nothing of the host, and a package of a few
// types would only add a name. The agent links neither the sandbox port nor the host kit (internal/archtest
// enforces it), so it declares its tools (Tool) and its one failure (FailureTimeout) itself.
//
// The agent guards itself against the code it runs (guard.go): it is not dumpable, so nothing in the sandbox
// can trace it or open its /proc entries, and it runs as the sandbox's pid 1, which ignores every signal sent
// from inside and reaps the sandbox's orphans.
package agent

import (
	"encoding/json"

	"github.com/corralhq/corral/internal/apitype"
)

// Request is one tool call sent to the agent.
type Request struct {
	ID        uint64          `json:"id"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	TimeoutMS int64           `json:"timeout_ms,omitempty"` // default timeout of a command; 0 = agent default
	OutputCap int             `json:"output_cap,omitempty"` // cap on the result's text, bytes; 0 = agent default
	// Shell names the persistent shell a bash call runs in: "" is the default shell; the threads of a
	// multi-agent session each name their own (the thread's id), so that each has its own cwd and variables
	// while they share the sandbox's filesystem. At most MaxShells run at a time; a name is at most 128
	// letters, digits, '_', '-' and '.'. The other tools ignore it.
	Shell string `json:"shell,omitempty"`
	// Cancel, when set, makes this line a cancellation of the request with that ID (its command is killed);
	// it gets no response of its own.
	Cancel uint64 `json:"cancel,omitempty"`
	// Limits asks for the agent's cgroup event counters as they are once the call is over (Response.Limits):
	// what LimitEventsTool answers, without a request of its own after every call.
	Limits bool `json:"limits,omitempty"`
	// Data is a chunk of an archive transfer (ArchivePutTool), at most ArchiveChunk bytes.
	Data []byte `json:"data,omitempty"`
}

// Response is the agent's answer to one Request.
type Response struct {
	ID      uint64                 `json:"id"`
	Content []apitype.ContentBlock `json:"content"`
	IsError bool                   `json:"is_error,omitempty"`
	// Failure is FailureTimeout when the command ran past its timeout; the host keeps only the values it knows.
	Failure string `json:"failure,omitempty"`
	// Limits are the counters Request.Limits asked for (nil when it did not, or from an agent that predates it).
	Limits *LimitEvents `json:"limits,omitempty"`
	// Data is a chunk of an archive transfer (ArchiveGetTool), at most ArchiveChunk bytes; EOF marks its last.
	Data []byte `json:"data,omitempty"`
	EOF  bool   `json:"eof,omitempty"`
}

// FailureTimeout is Response.Failure for a command that ran past its timeout (sandbox.FailureTimeout, which the
// host kit maps it to).
const FailureTimeout = "timeout"

// PingTool is a request the agent answers at once with "pong": the host's proof that the agent runs.
const PingTool = "ping"

// LimitEventsTool is a request the agent answers with its own cgroup's event counters, as JSON LimitEvents: how
// a backend that cannot read a sandbox's cgroups from its host (a pod on another machine) learns that the kernel
// killed a process at the memory limit or refused a fork at the pids limit. Read-only kernel files: nothing in
// the sandbox can change what they say.
const LimitEventsTool = "limit_events"

// LimitEvents is LimitEventsTool's answer: the text of the agent's memory cgroup's oom_control (v1) or
// memory.events (v2) file, and of its pids.events, each "" when absent.
type LimitEvents struct {
	Memory string `json:"memory"`
	Pids   string `json:"pids"`
}

// Defaults the agent applies when a Request leaves them zero.
const (
	DefaultTimeoutMS = 120_000
	// MaxTimeoutMS caps bash's timeout_ms: one command cannot hold a brain's worker for longer than an hour.
	MaxTimeoutMS     = 3_600_000
	DefaultOutputCap = 100 * 1024
	// MaxImageBytes caps an image the read tool returns (base64 in a response: it bounds a message's size).
	MaxImageBytes = 5 * 1024 * 1024
)

// Paths inside a sandbox shared by every isolating backend.
const (
	// BinPath is where the agent binary is bound, read-only.
	BinPath = "/.corral/agent"
	// ProxySocketPath is where the host's egress proxy socket is bound, when the sandbox has networking.
	ProxySocketPath = "/.corral/proxy.sock"
	// Workspace is the sandbox's working directory; relative tool paths resolve against it.
	Workspace = "/workspace"
	// ProxyListenAddr is where the agent bridges TCP to the egress proxy socket inside the sandbox.
	ProxyListenAddr = "127.0.0.1:3128"
)
