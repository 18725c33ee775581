package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestWebSearchThroughSDK: `corral serve --web-search searxng=https://127.0.0.1:PORT` with that address trusted
// (--egress-allow-internal) and its CA (--egress-ca-file): an agent created through the official SDK with
// web_search alone (blocked_domains, user_location) searches through a local HTTPS server speaking SearXNG's JSON
// API; the session's events (listed through the SDK) and the next model request carry the results, the blocked
// domain's left out.
func TestWebSearchThroughSDK(t *testing.T) {
	var mu sync.Mutex
	var queries []url.Values
	searx := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.Query())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "results": []map[string]string{
			{"url": "https://go.dev/doc/", "title": "Go documentation", "content": "The Go programming language."},
			{"url": "https://ads.spam.test/go", "title": "Buy Go", "content": "Cheap."},
		}})
	}))
	defer searx.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: searx.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(searx.URL)

	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_ws", Name: "web_search", Input: `{"query":"go docs"}`}}},
		modeltest.Turn{Text: "Go's documentation is at go.dev."},
	)
	s := startServer(t, t.TempDir(), model, "--web-search", "searxng="+searx.URL, "--egress-allow-internal", u.Host, "--egress-ca-file", caFile)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	events, raw := sendAndWait(ctx, t, c, webSearchSession(ctx, t, c, anthropic.BetaManagedAgentsWebSearchToolConfigParams{
		Enabled: anthropic.Bool(true), BlockedDomains: []string{"spam.test"},
		UserLocation: anthropic.BetaManagedAgentsUserLocationParam{Country: anthropic.String("FR")},
	}), "Where are Go's docs?")
	results := toolResults(events)
	if len(results) != 1 || results[0].isError || !strings.Contains(results[0].text, "https://go.dev/doc/") || strings.Contains(results[0].text, "spam.test") {
		t.Fatalf("tool results %+v; events %s", results, raw)
	}
	reqs := model.Requests()
	var offered []string
	for _, tl := range reqs[0].Tools {
		offered = append(offered, tl.Name)
	}
	if strings.Join(offered, ",") != "web_search" {
		t.Fatalf("offered %v", offered)
	}
	last := reqs[len(reqs)-1].Messages
	if b := last[len(last)-1].Content[0]; b.Type != "tool_result" || b.ToolUseID != "toolu_ws" || !strings.Contains(b.Content[0].Text, "Go documentation") ||
		strings.Contains(b.Content[0].Text, "spam.test") {
		t.Fatalf("the model got %+v", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(queries) != 1 || queries[0].Get("q") != "go docs -site:spam.test" || queries[0].Get("language") != "fr-FR" {
		t.Fatalf("SearXNG got %v", queries)
	}
}

// TestWebSearchAnthropicThroughSDK: `corral serve --web-search anthropic`: the Messages API request carries
// Anthropic's server tool, the answer's server blocks show as agent.tool_use/agent.tool_result through the SDK,
// and the session's usage (read through the SDK) counts the search.
func TestWebSearchAnthropicThroughSDK(t *testing.T) {
	model := modeltest.NewServer(t)
	model.Script(modeltest.Turn{
		ServerBlocks: []string{`{"type":"server_tool_use","id":"srvtoolu_9","name":"web_search","input":{"query":"go docs"}}`,
			`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_9","content":[{"type":"web_search_result","url":"https://go.dev/doc/","title":"Go documentation","encrypted_content":"e"}]}`},
		Text: "At go.dev.", Usage: modeltest.Usage{InputTokens: 50, OutputTokens: 5, WebSearchRequests: 1}})
	s := startServer(t, t.TempDir(), model, "--web-search", "anthropic")
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sessID := webSearchSession(ctx, t, c, anthropic.BetaManagedAgentsWebSearchToolConfigParams{
		Enabled: anthropic.Bool(true), AllowedDomains: []string{"go.dev"}})
	events, raw := sendAndWait(ctx, t, c, sessID, "Where are Go's docs?")
	if body := string(model.Requests()[0].Body); !strings.Contains(body, `"type":"web_search_20250305"`) || !strings.Contains(body, `"allowed_domains":["go.dev"]`) {
		t.Fatalf("request %s", body)
	}
	results := toolResults(events)
	if len(results) != 1 || results[0].isError || !strings.Contains(results[0].text, "https://go.dev/doc/") {
		t.Fatalf("tool results %+v; events %s", results, raw)
	}
	got, err := c.Beta.Sessions.Get(ctx, sessID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Usage.ServerToolUse.WebSearchRequests; n != 1 {
		t.Fatalf("usage %s", got.Usage.RawJSON())
	}
}

// webSearchSession is a session of a new agent whose toolset enables web_search only, configured as ws, in a new
// environment.
func webSearchSession(ctx context.Context, t *testing.T, c anthropic.Client, ws anthropic.BetaManagedAgentsWebSearchToolConfigParams) string {
	t.Helper()
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "searcher", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
			DefaultConfig: anthropic.BetaManagedAgentsAgentToolsetDefaultConfigParams{Enabled: anthropic.Bool(false)},
			Configs:       []anthropic.BetaManagedAgentsAgentToolConfigParamsUnion{{OfWebSearch: &ws}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "searcher"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID
}
