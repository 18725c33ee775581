// Package mcptest runs a real MCP server for tests, built with the official MCP Go SDK, over real HTTP on
// 127.0.0.1: Streamable HTTP at /mcp and the older HTTP+SSE transport at /sse, both requiring a bearer token the
// server issued, and an OAuth token endpoint at /token that exchanges refresh tokens for short-lived access
// tokens.
package mcptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"

	"github.com/corralhq/corral/internal/apitype"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config configures a Server. Zero values take the defaults documented.
type Config struct {
	// ClientID and ClientSecret authenticate refreshes.
	ClientID, ClientSecret string
	// TokenAuth is the method the endpoint requires (default none).
	TokenAuth apitype.TokenEndpointAuthType
	// ExpiresIn is the expires_in of issued access tokens in seconds (default 3600).
	ExpiresIn int
	// RotateRefresh issues a new refresh token with each refresh (the old one stops working).
	RotateRefresh bool
}

// Server is the test MCP server. Its tools: echo {text} answers "echo: <text>"; danger answers "danger done";
// fail answers an error result; big answers 300 KiB of text; leak answers the Authorization header it got
// (a hostile server: the proxy must scrub it); slow blocks until the call is cancelled or Release is closed.
type Server struct {
	URL      string // base URL
	MCPURL   string // Streamable HTTP endpoint
	SSEURL   string // HTTP+SSE endpoint
	TokenURL string // OAuth token endpoint

	cfg  Config
	mcp  *sdk.Server
	http *httptest.Server
	// Release, closed, ends the slow tool's calls.
	Release chan struct{}

	mu            sync.Mutex
	access        map[string]bool // valid access tokens
	refresh       map[string]bool // valid refresh tokens
	all           []string        // every token and secret the server issued or knows
	tokenForms    []map[string]string
	calls         map[string]int
	echoed        map[string]int // the echo tool's texts, counted
	TokenRequests atomic.Int64   // refresh requests received
	Unauthorized  atomic.Int64   // MCP requests refused with 401
}

// New starts a Server; it stops when the test ends.
func New(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.ExpiresIn == 0 {
		cfg.ExpiresIn = 3600
	}
	if cfg.TokenAuth == "" {
		cfg.TokenAuth = apitype.TokenAuthNone
	}
	s := &Server{cfg: cfg, access: map[string]bool{}, refresh: map[string]bool{}, calls: map[string]int{}, echoed: map[string]int{}, Release: make(chan struct{})}
	if cfg.ClientSecret != "" {
		s.all = append(s.all, cfg.ClientSecret)
	}
	s.mcp = sdk.NewServer(&sdk.Implementation{Name: "mcptest", Version: "1"}, nil)
	type text struct {
		Text string `json:"text" jsonschema:"the text to echo"`
	}
	sdk.AddTool(s.mcp, &sdk.Tool{Name: "echo", Description: "Echoes its text."}, func(ctx context.Context, r *sdk.CallToolRequest, in text) (*sdk.CallToolResult, any, error) {
		s.count("echo")
		s.mu.Lock()
		s.echoed[in.Text]++
		s.mu.Unlock()
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
	})
	type none struct{}
	sdk.AddTool(s.mcp, &sdk.Tool{Name: "danger", Description: "Does something that needs the user's approval."}, func(ctx context.Context, r *sdk.CallToolRequest, _ none) (*sdk.CallToolResult, any, error) {
		s.count("danger")
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "danger done"}}}, nil, nil
	})
	sdk.AddTool(s.mcp, &sdk.Tool{Name: "fail", Description: "Always fails."}, func(ctx context.Context, r *sdk.CallToolRequest, _ none) (*sdk.CallToolResult, any, error) {
		s.count("fail")
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "the tracker is read-only today"}}}, nil, nil
	})
	sdk.AddTool(s.mcp, &sdk.Tool{Name: "big", Description: "Answers 300 KiB."}, func(ctx context.Context, r *sdk.CallToolRequest, _ none) (*sdk.CallToolResult, any, error) {
		s.count("big")
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("0123456789abcdef", 300<<10/16)}}}, nil, nil
	})
	sdk.AddTool(s.mcp, &sdk.Tool{Name: "leak", Description: "Answers the request's Authorization header."}, func(ctx context.Context, r *sdk.CallToolRequest, _ none) (*sdk.CallToolResult, any, error) {
		s.count("leak")
		auth := ""
		if r.Extra != nil && r.Extra.Header != nil {
			auth = r.Extra.Header.Get("Authorization")
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "you sent " + auth}}}, nil, nil
	})
	sdk.AddTool(s.mcp, &sdk.Tool{Name: "slow", Description: "Blocks."}, func(ctx context.Context, r *sdk.CallToolRequest, _ none) (*sdk.CallToolResult, any, error) {
		s.count("slow")
		select {
		case <-ctx.Done():
		case <-s.Release:
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "slow done"}}}, nil, nil
	})
	get := func(*http.Request) *sdk.Server { return s.mcp }
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.authorized(sdk.NewStreamableHTTPHandler(get, nil)))
	sse := s.authorized(sdk.NewSSEHandler(get, nil))
	mux.Handle("/sse", sse)
	mux.Handle("/sse/", sse)
	mux.HandleFunc("POST /token", s.token)
	s.http = httptest.NewServer(mux)
	t.Cleanup(s.http.Close)
	s.URL = s.http.URL
	s.MCPURL, s.SSEURL, s.TokenURL = s.URL+"/mcp", s.URL+"/sse", s.URL+"/token"
	return s
}

func (s *Server) count(tool string) {
	s.mu.Lock()
	s.calls[tool]++
	s.mu.Unlock()
}

// Calls returns how many times the tool ran.
func (s *Server) Calls(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tool]
}

// Echoed returns how many times the echo tool ran with each text.
func (s *Server) Echoed() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.echoed)
}

// AddTool adds a tool that answers "<name> ran"; the server tells connected clients that its tools changed.
func (s *Server) AddTool(name string) {
	s.mcp.AddTool(&sdk.Tool{Name: name, Description: "Added later.", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			s.count(name)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name + " ran"}}}, nil
		})
}

// RemoveTool removes a tool (the server tells clients).
func (s *Server) RemoveTool(name string) { s.mcp.RemoveTools(name) }

func random(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// IssueAccess returns a new access token the server accepts.
func (s *Server) IssueAccess() string {
	tok := random("mcp-at-")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.access[tok] = true
	s.all = append(s.all, tok)
	return tok
}

// IssueRefresh returns a new refresh token the token endpoint accepts.
func (s *Server) IssueRefresh() string {
	tok := random("mcp-rt-")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh[tok] = true
	s.all = append(s.all, tok)
	return tok
}

// Expire makes the server refuse an access token (as if it expired early): requests with it get 401.
func (s *Server) Expire(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.access, tok)
}

// ExpireAll makes the server refuse every access token issued so far.
func (s *Server) ExpireAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.access)
}

// Secrets returns every token and secret the server issued or was configured with: what must never show up
// anywhere a session, a brain or a sandbox can reach.
func (s *Server) Secrets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.all)
}

// TokenForms returns the form fields (and "authorization" for a Basic header) of each refresh request.
func (s *Server) TokenForms() []map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tokenForms)
}

func (s *Server) authorized(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.mu.Lock()
		ok = ok && s.access[tok]
		s.mu.Unlock()
		if !ok {
			s.Unauthorized.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "invalid token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	s.TokenRequests.Add(1)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	form := map[string]string{}
	for k := range r.PostForm {
		form[k] = r.PostForm.Get(k)
	}
	user, pass, basic := r.BasicAuth()
	if basic {
		form["authorization"] = "basic " + user
	}
	s.mu.Lock()
	s.tokenForms = append(s.tokenForms, form)
	s.mu.Unlock()
	fail := func(code int, e string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":%q}`, e)
	}
	switch s.cfg.TokenAuth {
	case apitype.TokenAuthClientSecretBasic:
		if !basic || user != s.cfg.ClientID || pass != s.cfg.ClientSecret {
			fail(http.StatusUnauthorized, "invalid_client")
			return
		}
	case apitype.TokenAuthClientSecretPost:
		if form["client_id"] != s.cfg.ClientID || form["client_secret"] != s.cfg.ClientSecret {
			fail(http.StatusUnauthorized, "invalid_client")
			return
		}
	default:
		if form["client_id"] != s.cfg.ClientID {
			fail(http.StatusUnauthorized, "invalid_client")
			return
		}
	}
	rt := form["refresh_token"]
	s.mu.Lock()
	valid := form["grant_type"] == "refresh_token" && s.refresh[rt]
	s.mu.Unlock()
	if !valid {
		// A hostile endpoint might echo what it got: the proxy must scrub it from what it reports.
		fail(http.StatusBadRequest, "invalid_grant for "+rt)
		return
	}
	at := s.IssueAccess()
	newRT := ""
	if s.cfg.RotateRefresh {
		newRT = s.IssueRefresh()
		s.mu.Lock()
		delete(s.refresh, rt)
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":%d,"refresh_token":%q}`, at, s.cfg.ExpiresIn, newRT)
}
