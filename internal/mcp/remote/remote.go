// Package remote carries the MCP port over HTTP, for brains on other machines than the MCP proxy (`corral proxy`,
// PostgreSQL deployments): Handler serves an mcp.Client (the proxy) to callers holding the shared token, and
// Client is the mcp.Client a brain uses to reach it. Only session ids, server names and URLs, tool inputs and
// results cross it: the credentials stay in the proxy's process.
package remote

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
)

// MaxBody bounds a request's and an answer's body.
const MaxBody = 16 << 20

// Paths of the two calls.
const (
	PathListTools = "/v1/mcp/list_tools"
	PathCallTool  = "/v1/mcp/call_tool"
)

type request struct {
	SessionID string            `json:"session_id"`
	Server    apitype.MCPServer `json:"server"`
	Name      string            `json:"name,omitempty"`
	Input     json.RawMessage   `json:"input,omitempty"`
}

type wireTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type wireError struct {
	Kind    string `json:"kind"`
	Server  string `json:"server"`
	Message string `json:"message"`
}

type response struct {
	Tools   []wireTool             `json:"tools,omitempty"`
	Content []apitype.ContentBlock `json:"content,omitempty"`
	IsError bool                   `json:"is_error,omitempty"`
	Error   *wireError             `json:"error,omitempty"`
}

// Handler serves c to requests carrying "Authorization: Bearer <token>"; token must not be empty.
func Handler(c mcp.Client, token string) http.Handler {
	want := []byte("Bearer " + token)
	mux := http.NewServeMux()
	serve := func(call func(ctx context.Context, req *request) (*response, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			var req request
			if err := json.NewDecoder(io.LimitReader(r.Body, MaxBody)).Decode(&req); err != nil || req.SessionID == "" || req.Server.URL == "" {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			resp, err := call(r.Context(), &req)
			if err != nil {
				e := mcp.AsError(err, req.Server.Name)
				if _, ok := errors.AsType[*mcp.Error](err); !ok {
					e.Message = "the MCP proxy failed" // an internal error (the store): its text stays in the proxy
				}
				resp = &response{Error: &wireError{Kind: e.Kind, Server: e.Server, Message: e.Message}}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(resp)
		}
	}
	mux.Handle("POST "+PathListTools, serve(func(ctx context.Context, req *request) (*response, error) {
		tools, err := c.ListTools(ctx, req.SessionID, req.Server)
		if err != nil {
			return nil, err
		}
		out := &response{Tools: make([]wireTool, len(tools))}
		for i, t := range tools {
			out.Tools[i] = wireTool(t)
		}
		return out, nil
	}))
	mux.Handle("POST "+PathCallTool, serve(func(ctx context.Context, req *request) (*response, error) {
		res, err := c.CallTool(ctx, req.SessionID, req.Server, req.Name, req.Input)
		if err != nil {
			return nil, err
		}
		return &response{Content: res.Content, IsError: res.IsError}, nil
	}))
	return mux
}

// Client reaches a Handler: the mcp.Client of a brain whose MCP proxy runs in another process.
type Client struct {
	URL   string // the proxy's base URL
	Token string
	HTTP  *http.Client // default http.DefaultClient
}

var _ mcp.Client = (*Client)(nil)

// ListTools implements mcp.Client.
func (c *Client) ListTools(ctx context.Context, sessionID string, server apitype.MCPServer) ([]mcp.Tool, error) {
	resp, err := c.do(ctx, PathListTools, &request{SessionID: sessionID, Server: server})
	if err != nil {
		return nil, err
	}
	out := make([]mcp.Tool, len(resp.Tools))
	for i, t := range resp.Tools {
		out[i] = mcp.Tool(t)
	}
	return out, nil
}

// CallTool implements mcp.Client.
func (c *Client) CallTool(ctx context.Context, sessionID string, server apitype.MCPServer, name string, input json.RawMessage) (*mcp.Result, error) {
	resp, err := c.do(ctx, PathCallTool, &request{SessionID: sessionID, Server: server, Name: name, Input: input})
	if err != nil {
		return nil, err
	}
	return &mcp.Result{Content: resp.Content, IsError: resp.IsError}, nil
}

func (c *Client) do(ctx context.Context, path string, req *request) (*response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	fail := func(msg string) error {
		return &mcp.Error{Kind: mcp.KindConnection, Server: req.Server.Name, Message: "the MCP proxy: " + msg}
	}
	r, err := hc.Do(hr)
	if err != nil {
		return nil, fail(fmt.Sprintf("unreachable: %v", err))
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return nil, fail(fmt.Sprintf("answered %s", r.Status))
	}
	var resp response
	if err := json.NewDecoder(io.LimitReader(r.Body, MaxBody)).Decode(&resp); err != nil {
		return nil, fail("malformed answer")
	}
	if e := resp.Error; e != nil {
		return nil, &mcp.Error{Kind: e.Kind, Server: e.Server, Message: e.Message}
	}
	return &resp, nil
}
