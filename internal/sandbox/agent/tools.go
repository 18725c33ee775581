package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"
)

// builtin is one tool of the built-in toolset: its definition as the model is offered it, and what runs a call.
type builtin struct {
	Tool
	// run runs a call; shell names the call's shell (Request.Shell), which only bash uses.
	run func(s *Server, ctx context.Context, shell string, input json.RawMessage, timeout time.Duration, outCap int) result
}

// builtins are the tools of agent_toolset_20260401 that the agent runs, in the reference order. The descriptions
// and input schemas are those of the official SDK's local executors (anthropic-sdk-go/v2 tools/agenttoolset), so
// a model sees the same tools here as with the hosted service; bash's schema also marks command as required.
// Adding a tool is one entry here.
//
// web_fetch and web_search are not sandbox tools: the hosted service runs them on its own side, and so does
// Corral's brain: web_fetch through the webfetch port (internal/harness/webfetch.go), web_search through the
// server's search provider (internal/harness/websearch.go).
var builtins = []builtin{
	{
		Tool: Tool{
			Name:        "bash",
			Description: "Run a bash command in a persistent shell. State (cwd, env vars) persists across calls.",
			InputSchema: schema(`{"type": "object", "properties": {
				"command": {"type": "string", "description": "The command to run"},
				"restart": {"type": "boolean", "description": "Restart the persistent shell before running"},
				"timeout_ms": {"type": "integer", "description": "Per-call timeout in milliseconds"}},
				"required": ["command"]}`),
		},
		run: func(s *Server, ctx context.Context, shell string, input json.RawMessage, timeout time.Duration, outCap int) result {
			return s.bash.run(ctx, shell, input, timeout, outCap)
		},
	},
	{
		Tool: Tool{
			Name:        "edit",
			Description: "Replace a unique occurrence of old_string with new_string in a file (set replace_all to replace every occurrence).",
			InputSchema: schema(`{"type": "object", "properties": {
				"file_path": {"type": "string", "description": "Path of the file to edit, rooted at the workdir (absolute paths inside it are allowed)."},
				"old_string": {"type": "string", "description": "Substring to find and replace."},
				"new_string": {"type": "string", "description": "Replacement text."},
				"replace_all": {"type": "boolean", "description": "Replace every occurrence instead of requiring a unique match."}},
				"required": ["file_path", "old_string", "new_string"]}`),
		},
		run: fileTool(execEdit),
	},
	{
		Tool: Tool{
			Name:        "read",
			Description: "Read a file rooted at the workdir: UTF-8 text, an image (PNG, JPEG, GIF, WebP), a PDF (its text and pages) or a Jupyter notebook (.ipynb: its cells with their outputs).",
			InputSchema: schema(`{"type": "object", "properties": {
				"file_path": {"type": "string", "description": "Path of the file to read, rooted at the workdir (absolute paths inside it are allowed)."},
				"view_range": {"type": "array", "items": {"type": "integer"}, "description": "[start_line, end_line] 1-indexed inclusive"}},
				"required": ["file_path"]}`),
		},
		run: fileTool(execRead),
	},
	{
		Tool: Tool{
			Name:        "write",
			Description: "Write a UTF-8 text file rooted at the workdir, creating parent directories as needed.",
			InputSchema: schema(`{"type": "object", "properties": {
				"file_path": {"type": "string", "description": "Path of the file to write, rooted at the workdir (absolute paths inside it are allowed)."},
				"content": {"type": "string", "description": "Full file contents to write."}},
				"required": ["file_path", "content"]}`),
		},
		run: fileTool(execWrite),
	},
	{
		Tool: Tool{
			Name:        "glob",
			Description: "List paths matching a glob pattern (e.g. **/*.go), newest first.",
			InputSchema: schema(`{"type": "object", "properties": {
				"pattern": {"type": "string", "description": "Glob pattern, e.g. **/*.go (** matches any depth)."},
				"path": {"type": "string", "description": "Directory to search in. Defaults to the workdir."}},
				"required": ["pattern"]}`),
		},
		run: fileTool(execGlob),
	},
	{
		Tool: Tool{
			Name:        "grep",
			Description: "Search file contents for a regex. Uses ripgrep if available, otherwise a built-in walker.",
			InputSchema: schema(`{"type": "object", "properties": {
				"pattern": {"type": "string", "description": "Regular expression to search for."},
				"path": {"type": "string", "description": "Directory to search in. Defaults to the workdir."}},
				"required": ["pattern"]}`),
		},
		run: fileTool(execGrep),
	},
}

// tools and byName index builtins.
var (
	tools = func() []Tool {
		out := make([]Tool, len(builtins))
		for i, b := range builtins {
			out[i] = b.Tool
		}
		return out
	}()
	byName = func() map[string]*builtin {
		m := make(map[string]*builtin, len(builtins))
		for i := range builtins {
			m[builtins[i].Name] = &builtins[i]
		}
		return m
	}()
)

// Tool is a built-in tool as the agent declares it: the host kit offers it as a sandbox.Tool (host.Tools). The
// agent links nothing of the sandbox port, so it has a declaration of its own.
type Tool struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema (an object schema) of the tool's input.
	InputSchema json.RawMessage
}

// Tools are the built-in tools the agent runs, in the order the model is offered them. The slice and its
// schemas are shared: callers must not modify them.
func Tools() []Tool { return tools }

// toolNames lists the tools for an error message: "bash, edit, ... and grep".
func toolNames() string {
	names := make([]string, len(builtins))
	for i, b := range builtins {
		names[i] = b.Name
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// fileTool adapts a file tool, which needs neither the context, the shell nor the limits of the call.
func fileTool(f func(json.RawMessage, *Config) result) func(*Server, context.Context, string, json.RawMessage, time.Duration, int) result {
	return func(s *Server, _ context.Context, _ string, input json.RawMessage, _ time.Duration, _ int) result {
		return f(input, &s.cfg)
	}
}

// schema compacts a JSON schema written for reading.
func schema(s string) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		panic("agent: invalid tool schema: " + err.Error())
	}
	return b.Bytes()
}
