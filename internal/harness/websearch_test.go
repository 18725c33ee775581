package harness_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/price"
	"github.com/corralhq/corral/internal/websearch/searxng"
)

// searxngServer is a local HTTPS server speaking SearXNG's documented JSON format; it records the queries.
func searxngServer(t *testing.T, results []map[string]string) (base string, hostPort string, roots *x509.CertPool, sent func() []url.Values) {
	t.Helper()
	var mu sync.Mutex
	var qs []url.Values
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		qs = append(qs, r.URL.Query())
		mu.Unlock()
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "results": results})
	}))
	t.Cleanup(srv.Close)
	roots = x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	u, _ := url.Parse(srv.URL)
	return srv.URL, u.Host, roots, func() []url.Values {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(qs)
	}
}

// webSearchTool is an agent toolset whose web_search asks first, blocks spam.test and locates the user in
// Germany.
func webSearchTool(policy apitype.PermissionPolicyType) apitype.Tool {
	return apitype.Tool{Type: apitype.ToolTypeAgentToolset, Configs: []apitype.ToolConfig{{
		Name: "web_search", Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: policy},
		BlockedDomains: []string{"spam.test"}, UserLocation: json.RawMessage(`{"type":"approximate","country":"DE"}`),
	}}}
}

// TestWebSearchThroughProvider: the model is offered web_search, its always_ask call waits for the user's
// confirmation, then the brain searches through a SearXNG server on 127.0.0.1 (trusted as the operator's
// --egress-allow-internal does) and the next request carries the results, the blocked domain's removed.
func TestWebSearchThroughProvider(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base, hostPort, roots, sent := searxngServer(t, []map[string]string{
		{"url": "https://docs.example.com/corral", "title": "Corral docs", "content": "Self-hostable agents."},
		{"url": "https://www.spam.test/win", "title": "You won", "content": "Click here."},
		{"url": "https://blog.example.org/post", "title": "A post", "content": "About agents."},
	})
	sx, err := searxng.New(searxng.Config{BaseURL: base, AllowInternal: []string{hostPort}, RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_search", Name: "web_search", Input: `{"query":"corral agents"}`}}},
		modeltest.Turn{Text: "Found it."},
	)
	cfg := f.config()
	cfg.WebSearch = sx
	f.start(cfg)
	id := f.session(webSearchTool(apitype.PolicyAlwaysAsk))
	f.say(id, "Search the web.")

	evs := f.waitIdle(id, 1)
	reason := stopReason(t, evs[len(evs)-1])
	if reason.Type != apitype.StopRequiresAction || len(reason.EventIDs) != 1 {
		t.Fatalf("idle %+v; log %v", reason, types(evs))
	}
	if n := len(sent()); n != 0 {
		t.Fatalf("the always_ask search ran before it was confirmed (%d queries)", n)
	}
	ask := slices.IndexFunc(evs, func(e apitype.Event) bool { return e.ID == reason.EventIDs[0] })
	use := decode[apitype.AgentToolUse](t, evs[ask])
	if evs[ask].Type != toolUse || use.Name != "web_search" || use.EvaluatedPermission != apitype.PermissionAsk {
		t.Fatalf("pending %s %+v", evs[ask].Type, use)
	}
	f.send(id, confirm, apitype.UserToolConfirmation{ToolUseID: evs[ask].ID, Result: apitype.ConfirmAllow})
	evs = f.waitFor(id, "the end of the turn", func(evs []apitype.Event) bool {
		return evs[len(evs)-1].Type == idle && stopReason(t, evs[len(evs)-1]).Type == apitype.StopEndTurn
	})

	reqs := f.srv.Requests()
	if !slices.ContainsFunc(reqs[0].Tools, func(tl modeltest.Tool) bool {
		return tl.Name == "web_search" && strings.Contains(string(tl.InputSchema), `"query"`)
	}) {
		t.Fatalf("web_search not offered: %+v", reqs[0].Tools)
	}
	q := sent()
	if len(q) != 1 || q[0].Get("q") != "corral agents -site:spam.test" || q[0].Get("language") != "de-DE" {
		t.Fatalf("provider got %v", q)
	}
	// The next request carries the tool result: the results, the blocked domain's left out.
	last := reqs[len(reqs)-1]
	msg := last.Messages[len(last.Messages)-1]
	var text string
	for _, b := range msg.Content {
		if b.Type == "tool_result" && b.ToolUseID == "toolu_search" && !b.IsError {
			for _, c := range b.Content {
				text += c.Text
			}
		}
	}
	if !strings.Contains(text, "https://docs.example.com/corral") || !strings.Contains(text, "Corral docs") ||
		!strings.Contains(text, "Self-hostable agents.") || !strings.Contains(text, "https://blog.example.org/post") {
		t.Fatalf("tool result %q (message %+v)", text, msg)
	}
	if strings.Contains(text, "spam.test") {
		t.Fatalf("the blocked domain's result reached the model: %q", text)
	}
	// The log holds the call and its result.
	results := toolResultsOf(t, evs)["web_search"]
	if len(results) != 1 || results[0].IsError {
		t.Fatalf("results %+v", results)
	}
}

// TestWebSearchNoProvider: without a search provider, web_search is left out of the model's tools, and a call
// to it anyway gets an error result saying why; a provider the egress rules refuse gives an error result.
func TestWebSearchNoProvider(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		trusted bool // a provider configured but not trusted (no --egress-allow-internal)
		want    string
	}{{"none", false, "configured no search provider"}, {"untrusted", true, "could not be reached"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			cfg := f.config()
			var sent func() []url.Values
			if c.trusted {
				var base string
				var roots *x509.CertPool
				base, _, roots, sent = searxngServer(t, nil)
				sx, err := searxng.New(searxng.Config{BaseURL: base, RootCAs: roots})
				if err != nil {
					t.Fatal(err)
				}
				cfg.WebSearch = sx
			}
			f.srv.Script(
				modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_search", Name: "web_search", Input: `{"query":"q"}`}}},
				modeltest.Turn{Text: "ok"},
			)
			f.start(cfg)
			id := f.session(webSearchTool(apitype.PolicyAlwaysAllow))
			f.say(id, "Search.")
			evs := f.waitIdle(id, 1)
			offered := slices.ContainsFunc(f.srv.Requests()[0].Tools, func(tl modeltest.Tool) bool { return tl.Name == "web_search" })
			if offered != c.trusted {
				t.Fatalf("web_search offered: %v", offered)
			}
			results := toolResultsOf(t, evs)["web_search"]
			if len(results) != 1 || !results[0].IsError || !strings.Contains(results[0].Content[0].Text, c.want) {
				t.Fatalf("results %+v", results)
			}
			if sent != nil && len(sent()) != 0 {
				t.Fatal("the untrusted provider was reached")
			}
		})
	}
}

// TestWebSearchAnthropicServerTool: with --web-search anthropic and no provider, a Claude model is offered
// Anthropic's web_search_20250305 server tool under the agent's config; the answer's server_tool_use and
// web_search_tool_result blocks are logged as an allowed agent.tool_use and its agent.tool_result, sent back
// unchanged in the next request's history, and usage.server_tool_use counts the search.
func TestWebSearchAnthropicServerTool(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const (
		use    = `{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"corral agents"}}`
		result = `{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://docs.example.com/corral","title":"Corral docs","encrypted_content":"enc-1","page_age":"2 days"}]}`
	)
	f.srv.Script(
		modeltest.Turn{ServerBlocks: []string{use, result}, Text: "Corral is self-hostable.",
			Usage: modeltest.Usage{InputTokens: 100, OutputTokens: 20, WebSearchRequests: 1}},
		modeltest.Turn{Text: "You are welcome."},
	)
	cfg := f.config()
	cfg.WebSearchServer = true
	f.start(cfg)
	id := f.session(webSearchTool(apitype.PolicyAlwaysAllow))
	f.say(id, "What is Corral?")
	f.waitIdle(id, 1)
	f.say(id, "Thanks.")
	evs := f.waitIdle(id, 2)

	reqs := f.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	var server *modeltest.Tool
	for i, tl := range reqs[0].Tools {
		if tl.Name == "web_search" {
			server = &reqs[0].Tools[i]
		}
	}
	if server == nil || server.Type != "web_search_20250305" || len(server.InputSchema) != 0 {
		t.Fatalf("tools %+v", reqs[0].Tools)
	}
	body := string(reqs[0].Body)
	for _, want := range []string{`"blocked_domains":["spam.test"]`, `"country":"DE"`, `"max_uses":10`} {
		if !strings.Contains(body, want) {
			t.Errorf("server tool lacks %s: %s", want, body)
		}
	}
	// The log: an allowed agent.tool_use closed by its agent.tool_result, no confirmation asked.
	results := toolResultsOf(t, evs)["web_search"]
	if len(results) != 1 || results[0].IsError || !strings.Contains(results[0].Content[0].Text, "https://docs.example.com/corral") {
		t.Fatalf("results %+v", results)
	}
	for _, e := range evs {
		if e.Type == toolUse {
			if u := decode[apitype.AgentToolUse](t, e); u.Name == "web_search" && u.EvaluatedPermission != apitype.PermissionAllow {
				t.Fatalf("server call %+v", u)
			}
		}
	}
	// The next request's history holds the provider's blocks unchanged, in the assistant turn, and no
	// tool_result for them.
	var asst *modeltest.Message
	for i, m := range reqs[1].Messages {
		if m.Role == "assistant" {
			asst = &reqs[1].Messages[i]
		}
		for _, b := range m.Content {
			if b.Type == "tool_result" {
				t.Fatalf("a tool_result for the server call: %+v", m)
			}
		}
	}
	if asst == nil || len(asst.Content) != 3 || asst.Content[0].Type != "server_tool_use" || asst.Content[1].Type != "web_search_tool_result" ||
		asst.Content[2].Text != "Corral is self-hostable." {
		t.Fatalf("assistant turn %+v", asst)
	}
	if !strings.Contains(string(asst.Content[1].Raw), `"encrypted_content":"enc-1"`) || !strings.Contains(string(asst.Content[0].Raw), `"query":"corral agents"`) {
		t.Fatalf("blocks sent back: %s %s", asst.Content[0].Raw, asst.Content[1].Raw)
	}
	sess, err := f.store.SessionGet(context.Background(), id)
	if err != nil || sess.Usage.ServerToolUse.WebSearchRequests != 1 {
		t.Fatalf("usage %+v, %v", sess.Usage, err)
	}
	// The list cost has the search's cent on top of the tokens' (well under a cent here).
	if c := price.Pico(sess.Usage.ListCostPicodollars); c <= price.PicoPerCent || c >= 2*price.PicoPerCent {
		t.Fatalf("list cost %d picodollars, want a cent and the tokens", c)
	}

	// An always_ask web_search cannot be the server tool: it is not offered.
	f.srv.Script(modeltest.Turn{Text: "no search"})
	asked := f.session(webSearchTool(apitype.PolicyAlwaysAsk))
	f.say(asked, "Search.")
	f.waitIdle(asked, 1)
	reqs = f.srv.Requests()
	if slices.ContainsFunc(reqs[len(reqs)-1].Tools, func(tl modeltest.Tool) bool { return tl.Name == "web_search" }) {
		t.Fatal("an always_ask web_search was offered as the server tool")
	}
}

// TestWebSearchServerPauseTurn: an answer the provider paused (pause_turn) after a server search is sent back as
// the last, assistant, turn of the next request, and the turn goes on to its end.
func TestWebSearchServerPauseTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ServerBlocks: []string{
			`{"type":"server_tool_use","id":"srvtoolu_p","name":"web_search","input":{"query":"q"}}`,
			`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_p","content":[]}`,
		}, StopReason: "pause_turn", Usage: modeltest.Usage{InputTokens: 10, OutputTokens: 2, WebSearchRequests: 1}},
		modeltest.Turn{Text: "Nothing found."},
	)
	cfg := f.config()
	cfg.WebSearchServer = true
	f.start(cfg)
	id := f.session(webSearchTool(apitype.PolicyAlwaysAllow))
	f.say(id, "Search.")
	evs := f.waitIdle(id, 1)
	if r := stopReason(t, evs[len(evs)-1]); r.Type != apitype.StopEndTurn {
		t.Fatalf("idle %+v", r)
	}
	reqs := f.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests; log %v", len(reqs), types(evs))
	}
	msgs := reqs[1].Messages
	last := msgs[len(msgs)-1]
	if last.Role != "assistant" || len(last.Content) != 2 || last.Content[0].Type != "server_tool_use" || last.Content[1].Type != "web_search_tool_result" {
		t.Fatalf("the paused answer was not sent back last: %+v", last)
	}
}
