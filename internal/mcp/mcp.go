// Package mcp is the port through which the brain reaches a session's MCP servers: it lists their tools and
// calls them by the session's identity. The adapter (internal/proxy's MCP, in-process or as corral proxy) holds
// the credentials: the brain never sees a token, and nothing here carries one.
package mcp

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/corralhq/corral/internal/apitype"
)

// Client calls MCP servers on behalf of sessions. ListTools may answer from a per-session cache that the
// adapter refreshes when the server says its tools changed.
type Client interface {
	ListTools(ctx context.Context, sessionID string, server apitype.MCPServer) ([]Tool, error)
	// CallTool calls one tool. A tool that fails (or that the server no longer has) is a Result with IsError;
	// an error means the server could not be used: an *Error for a connection or authentication failure.
	CallTool(ctx context.Context, sessionID string, server apitype.MCPServer, name string, input json.RawMessage) (*Result, error)
}

// Tool is one tool an MCP server offers.
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage // a JSON Schema object
}

// Result is what a tool call returned, as session event content.
type Result struct {
	Content []apitype.ContentBlock
	IsError bool
}

// Error kinds: the session.error types the brain reports them as.
const (
	KindConnection     = "mcp_connection_failed_error"
	KindAuthentication = "mcp_authentication_failed_error"
)

// Error is a failure to use an MCP server. Message never holds a credential.
type Error struct {
	Kind    string // KindConnection or KindAuthentication
	Server  string // the server's name in the agent's mcp_servers
	Message string
}

func (e *Error) Error() string { return "mcp server " + e.Server + ": " + e.Message }

// AsError returns err's *Error, or a connection Error for server wrapping err's text.
func AsError(err error, server string) *Error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return &Error{Kind: KindConnection, Server: server, Message: err.Error()}
}
