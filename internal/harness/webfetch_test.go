package harness_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/webfetch/httpfetch"
)

const webPage = `<!doctype html><html><head><title>Pasture report</title></head><body><nav>Menu</nav><article>
<h1>Pasture report</h1><p>The herd grazed the <strong>north</strong> field today, and the fences held through the storm,
which is more than anyone expected after the last one, when two posts went down and a calf got out onto the road.</p>
<p>Tomorrow the herd moves south, weather permitting, and the water troughs get cleaned, checked, and filled again.
The numbers are in <a href="/report.pdf">the report</a>.</p>
</article></body></html>`

const webPDF = "%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"

// webServer is a real HTTPS page server on 127.0.0.1, and a fetcher that reaches it only because the operator's
// --egress-allow-internal list names it (its CA given as the operator's extra root); internal is an internal
// address the list does not name.
type webServer struct {
	*httptest.Server
	internal string
	fetcher  *httpfetch.Fetcher
}

func newWebServer(t *testing.T) *webServer {
	t.Helper()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("secret")) }))
	t.Cleanup(other.Close)
	ws := &webServer{internal: other.Listener.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("/report", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(webPage))
	})
	mux.HandleFunc("/report.pdf", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		_, _ = w.Write([]byte(webPDF))
	})
	mux.HandleFunc("/huge.txt", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(hugeBody()))
	})
	mux.HandleFunc("/tarball", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write([]byte{0x1f, 0x8b})
	})
	mux.HandleFunc("/to-internal", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+ws.internal+"/latest/meta-data", http.StatusFound)
	})
	ws.Server = httptest.NewTLSServer(mux)
	t.Cleanup(ws.Close)
	roots := x509.NewCertPool()
	roots.AddCert(ws.Certificate())
	ws.fetcher = httpfetch.New(httpfetch.Config{AllowInternal: []string{ws.Listener.Addr().String()}, RootCAs: roots})
	return ws
}

// hugeBody is a plain text page of about 190,000 characters.
func hugeBody() string {
	var sb strings.Builder
	for i := range 5000 {
		sb.WriteString(strings.Repeat("grass ", 5) + "line " + itoa(i) + "\n")
	}
	sb.WriteString("THE END\n")
	return sb.String()
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// webSession creates a session whose agent has the tools, in an environment with the networking.
func (f *fixture) webSession(n *apitype.Networking, tools ...apitype.Tool) string {
	f.t.Helper()
	ctx := context.Background()
	id := f.session(tools...)
	sess, err := f.store.SessionGet(ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.store.EnvironmentUpdate(ctx, sess.EnvironmentID, func(e *apitype.Environment) error {
		e.Config.Networking = n
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// webTools is a toolset with web_fetch configured by cfg (nil: the defaults).
func webTools(cfg *apitype.ToolConfig) apitype.Tool {
	t := apitype.Tool{Type: apitype.ToolTypeAgentToolset}
	if cfg != nil {
		cfg.Name = "web_fetch"
		if !cfg.Enabled {
			cfg.Enabled = true
		}
		t.Configs = []apitype.ToolConfig{*cfg}
	}
	return t
}

func fetchUse(id, url string) modeltest.ToolUse {
	in, _ := json.Marshal(map[string]string{"url": url})
	return modeltest.ToolUse{ID: id, Name: "web_fetch", Input: string(in)}
}

// toolResults are a model request's tool_result blocks by tool_use_id.
func toolResults(req modeltest.Request) map[string]modeltest.Block {
	out := map[string]modeltest.Block{}
	for _, m := range req.Messages {
		for _, b := range m.Content {
			if b.Type == "tool_result" {
				out[b.ToolUseID] = b
			}
		}
	}
	return out
}

// TestWebFetchPage: the model is offered web_fetch, its call runs in the brain (no hands are called), an HTML
// page comes back as Markdown and a PDF as a document block, in the results and in the next model request.
func TestWebFetchPage(t *testing.T) {
	t.Parallel()
	ws := newWebServer(t)
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{fetchUse("toolu_html", ws.URL+"/report"), fetchUse("toolu_pdf", ws.URL+"/report.pdf")}},
		modeltest.Turn{Text: "The herd is fine."},
	)
	cfg := f.config()
	cfg.WebFetch = ws.fetcher
	f.start(cfg)
	id := f.webSession(nil, webTools(nil))
	f.say(id, "how is the herd? See "+ws.URL+"/report and "+ws.URL+"/report.pdf.")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, toolUse, end, usage, toolResult, toolResult, start, agentMsg, end, usage, idle)
	if use := decode[apitype.AgentToolUse](t, evs[3]); use.Name != "web_fetch" || use.EvaluatedPermission != apitype.PermissionAllow {
		t.Errorf("tool use = %+v", use)
	}
	if f.hands.count() != 0 {
		t.Errorf("the hands ran %d calls: web_fetch runs outside the sandbox", f.hands.count())
	}
	// The fetches count in the session's usage, as the hosted service's server tool use does.
	if u := decode[apitype.SessionUsageEvent](t, evs[12]); u.Usage.ServerToolUse.WebFetchRequests != 2 {
		t.Errorf("usage after the fetches = %+v", u.Usage)
	}
	if first := decode[apitype.SessionUsageEvent](t, evs[6]); first.Usage.ServerToolUse.WebFetchRequests != 0 {
		t.Errorf("usage before the fetches = %+v", first.Usage)
	}
	reqs := f.srv.Requests()
	var offered *modeltest.Tool
	for i, tl := range reqs[0].Tools {
		if tl.Name == "web_fetch" {
			offered = &reqs[0].Tools[i]
		}
	}
	if offered == nil || !strings.Contains(string(offered.InputSchema), `"url"`) || offered.Description == "" {
		t.Fatalf("web_fetch offered as %+v", offered)
	}
	html := decode[apitype.AgentToolResult](t, evs[7])
	if html.IsError || !strings.Contains(resultText(html), "# Pasture report") || !strings.Contains(resultText(html), "the **north** field") ||
		strings.Contains(resultText(html), "Menu") {
		t.Errorf("html result = %+v", html)
	}
	pdf := decode[apitype.AgentToolResult](t, evs[8])
	if pdf.IsError || len(pdf.Content) != 2 || pdf.Content[1].Type != apitype.ContentDocument {
		t.Fatalf("pdf result = %+v", pdf)
	}
	res := toolResults(reqs[1])
	if b := res["toolu_html"]; b.IsError || !strings.Contains(blockText(b), "the **north** field today") {
		t.Errorf("model saw %+v", b)
	}
	b := res["toolu_pdf"]
	if b.IsError || len(b.Content) != 2 || b.Content[1].Type != "document" {
		t.Fatalf("model saw %+v", b)
	}
	var src apitype.ImageSource
	if err := json.Unmarshal(b.Content[1].Source, &src); err != nil {
		t.Fatal(err)
	}
	if data, _ := base64.StdEncoding.DecodeString(src.Data); src.Type != "base64" || src.MediaType != "application/pdf" || string(data) != webPDF {
		t.Errorf("document source = %+v", src)
	}
}

// TestWebFetchRefusals: each refusal is an error result the model sees, with its reason.
func TestWebFetchRefusals(t *testing.T) {
	t.Parallel()
	ws := newWebServer(t)
	host := ws.Listener.Addr().String()
	for _, c := range []struct {
		name string
		net  *apitype.Networking
		cfg  *apitype.ToolConfig
		url  string
		want string
	}{
		{"redirect to an internal address", nil, nil, ws.URL + "/to-internal",
			ws.internal + " resolves to an internal address (an operator who trusts it allows it with --egress-allow-internal " + ws.internal + ")"},
		{"blocked domain", nil, &apitype.ToolConfig{BlockedDomains: []string{"example.org"}}, "https://news.example.org/today",
			"the domain news.example.org is in this tool's blocked_domains (example.org)"},
		{"not an allowed host under limited networking", &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: []string{"api.example.com"}},
			nil, ws.URL + "/report", host + " is not in the environment's allowed_hosts"},
		{"unsupported type", nil, nil, ws.URL + "/tarball", "application/gzip, which web_fetch cannot read"},
		{"bad scheme", nil, nil, "ftp://example.com/file", "only http and https URLs can be fetched"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.srv.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{fetchUse("toolu_1", c.url)}}, modeltest.Turn{Text: "I see."})
			cfg := f.config()
			cfg.WebFetch = ws.fetcher
			f.start(cfg)
			id := f.webSession(c.net, webTools(c.cfg))
			f.say(id, "fetch "+c.url)
			evs := f.waitIdle(id, 1)
			assertTypes(t, evs, userMsg, running, start, toolUse, end, usage, toolResult, start, agentMsg, end, usage, idle)
			if r := decode[apitype.AgentToolResult](t, evs[6]); !r.IsError || !strings.Contains(resultText(r), c.want) {
				t.Errorf("result = %+v, want an error with %q", r, c.want)
			}
			if b := lastToolResult(t, f.srv.Requests()[1]); !b.IsError || !strings.Contains(blockText(b), c.want) {
				t.Errorf("model saw %+v", b)
			}
		})
	}
}

// TestWebFetchAsks: under always_ask, web_fetch waits for the user's confirmation before it fetches; a disabled
// web_fetch is not offered, and a brain without a fetcher does not offer it.
func TestWebFetchAsks(t *testing.T) {
	t.Parallel()
	ws := newWebServer(t)
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{fetchUse("toolu_1", ws.URL+"/report")}}, modeltest.Turn{Text: "Read."})
	cfg := f.config()
	cfg.WebFetch = ws.fetcher
	f.start(cfg)
	id := f.webSession(nil, webTools(&apitype.ToolConfig{PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAsk}}))
	f.say(id, "fetch "+ws.URL+"/report")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage, idle)
	if use := decode[apitype.AgentToolUse](t, evs[3]); use.EvaluatedPermission != apitype.PermissionAsk {
		t.Fatalf("tool use = %+v", use)
	}
	if r := stopReason(t, evs[6]); r.Type != apitype.StopRequiresAction {
		t.Fatalf("stop reason = %+v", r)
	}
	f.send(id, confirm, apitype.UserToolConfirmation{ToolUseID: evs[3].ID, Result: "allow"})
	evs = f.waitIdle(id, 2)
	assertTypes(t, evs[7:], confirm, running, toolResult, start, agentMsg, end, usage, idle)
	if r := decode[apitype.AgentToolResult](t, evs[9]); r.IsError || !strings.Contains(resultText(r), "Pasture report") {
		t.Errorf("result = %+v", r)
	}

	for _, c := range []struct {
		name    string
		fetcher bool
		tools   apitype.Tool
	}{
		{"disabled", true, apitype.Tool{Type: apitype.ToolTypeAgentToolset, Configs: []apitype.ToolConfig{{Name: "web_fetch", Enabled: false}}}},
		{"no fetcher", false, webTools(nil)},
	} {
		f := newFixture(t)
		f.srv.Script(modeltest.Turn{Text: "Hi."})
		cfg := f.config()
		if c.fetcher {
			cfg.WebFetch = ws.fetcher
		}
		f.start(cfg)
		id := f.webSession(nil, c.tools)
		f.say(id, "hi")
		f.waitIdle(id, 1)
		for _, tl := range f.srv.Requests()[0].Tools {
			if tl.Name == "web_fetch" {
				t.Errorf("%s: web_fetch offered", c.name)
			}
		}
	}
}

// bwrapPool is a Pool over the bwrap backend, stopped at the test's end.
func bwrapPool(t *testing.T) *sandbox.Pool {
	t.Helper()
	sandboxtest.Require(t, "bwrap", bwrap.Available(""))
	agentPath, err := sandboxtest.BuildAgent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	provider, err := bwrap.New(bwrap.Config{AgentPath: agentPath})
	if err != nil {
		sandboxtest.Require(t, "bwrap", err)
	}
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: provider, WorkspaceRoot: sandboxtest.WorkspaceRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pool.Stop()
		_ = provider.Close()
	})
	return pool
}

// TestWebFetchHugePage: a page over 100,000 characters is saved whole into the session's sandbox (real bwrap
// hands), the result says where and shows its start, and a bash call in the sandbox reads it back; with
// max_content_tokens, the page is cut to it instead.
func TestWebFetchHugePage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sandbox agent")
	}
	t.Parallel()
	ws := newWebServer(t)
	f := newFixture(t)
	const path = ".web_fetch/toolu_big.md"
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{fetchUse("toolu_big", ws.URL+"/huge.txt")}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_sh", Name: "bash", Input: `{"command":"wc -c < ` + path + ` && tail -n 1 ` + path + `"}`}}},
		modeltest.Turn{Text: "Long page."},
	)
	cfg := f.config()
	cfg.Hands = bwrapPool(t)
	cfg.WebFetch = ws.fetcher
	f.start(cfg)
	id := f.webSession(nil, webTools(nil))
	f.say(id, "fetch the long page at "+ws.URL+"/huge.txt")
	evs := f.waitIdle(id, 1)
	var results []apitype.AgentToolResult
	backend := ""
	for _, e := range evs {
		switch e.Type {
		case toolResult:
			results = append(results, decode[apitype.AgentToolResult](t, e))
		case apitype.EventSpanSandboxProvisionEnd:
			backend = decode[apitype.SandboxProvisionEnd](t, e).Backend
		}
	}
	if backend != "bwrap" {
		t.Errorf("the sandbox's backend is %q", backend)
	}
	if len(results) != 2 {
		t.Fatalf("events %v", types(evs))
	}
	text := resultText(results[0])
	size := len(hugeBody())
	if results[0].IsError || !strings.Contains(text, "saved whole to "+path) || !strings.Contains(text, "grass grass grass grass grass line 0\n") ||
		len(text) > 10_000 || strings.Contains(text, "THE END") {
		t.Errorf("web_fetch result (%d chars) = %.600s", len(text), text)
	}
	if got := strings.TrimSpace(resultText(results[1])); results[1].IsError || got != itoa(size)+"\nTHE END" {
		t.Errorf("bash read back %q, want %d bytes ending THE END", got, size)
	}
	if b := toolResults(f.srv.Requests()[1])["toolu_big"]; !strings.Contains(blockText(b), path) {
		t.Errorf("model saw %.300s", blockText(b))
	}
}

// TestWebFetchMaxContentTokens: max_content_tokens cuts the page (about 4 characters a token) and says so.
func TestWebFetchMaxContentTokens(t *testing.T) {
	t.Parallel()
	ws := newWebServer(t)
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{fetchUse("toolu_1", ws.URL+"/huge.txt")}}, modeltest.Turn{Text: "OK."})
	cfg := f.config()
	cfg.WebFetch = ws.fetcher
	cfg.Hands = nil
	f.start(cfg)
	n := 100
	id := f.webSession(nil, webTools(&apitype.ToolConfig{MaxContentTokens: &n}))
	f.say(id, "fetch <"+ws.URL+"/huge.txt>")
	evs := f.waitIdle(id, 1)
	var r apitype.AgentToolResult
	for _, e := range evs {
		if e.Type == toolResult {
			r = decode[apitype.AgentToolResult](t, e)
		}
	}
	text := resultText(r)
	if r.IsError || !strings.Contains(text, "[Truncated: the page is longer than this tool's max_content_tokens (100).]") || len(text) > 700 {
		t.Errorf("result = %q", text)
	}
}

// TestWebFetchURLSources: web_fetch fetches only URLs given to it: one the model wrote itself is refused, and so
// is one from the user's message when url_sources say user_input none; a link on a page fetched before is given.
func TestWebFetchURLSources(t *testing.T) {
	t.Parallel()
	ws := newWebServer(t)
	none := json.RawMessage(`{"type":"none"}`)
	for _, c := range []struct {
		name    string
		cfg     *apitype.ToolConfig
		say     string
		uses    []modeltest.ToolUse
		refused []bool
	}{
		{"made up by the model", nil, "how is the herd?", []modeltest.ToolUse{fetchUse("toolu_1", ws.URL+"/report")}, []bool{true}},
		{"user_input none", &apitype.ToolConfig{URLSources: &apitype.WebURLSources{UserInput: none}}, "read " + ws.URL + "/report",
			[]modeltest.ToolUse{fetchUse("toolu_1", ws.URL+"/report")}, []bool{true}},
		{"a link on a fetched page", nil, "read " + ws.URL + "/report#top",
			[]modeltest.ToolUse{fetchUse("toolu_1", ws.URL+"/report"), fetchUse("toolu_2", ws.URL+"/report.pdf")}, []bool{false, false}},
		{"a link on a fetched page, server_tool_results none", &apitype.ToolConfig{URLSources: &apitype.WebURLSources{ServerToolResults: none}},
			"read " + ws.URL + "/report", []modeltest.ToolUse{fetchUse("toolu_1", ws.URL+"/report"), fetchUse("toolu_2", ws.URL+"/report.pdf")}, []bool{false, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			var turns []modeltest.Turn
			for _, u := range c.uses {
				turns = append(turns, modeltest.Turn{ToolUses: []modeltest.ToolUse{u}})
			}
			f.srv.Script(append(turns, modeltest.Turn{Text: "Done."})...)
			cfg := f.config()
			cfg.WebFetch = ws.fetcher
			f.start(cfg)
			id := f.webSession(nil, webTools(c.cfg))
			f.say(id, c.say)
			evs := f.waitIdle(id, 1)
			var results []apitype.AgentToolResult
			for _, e := range evs {
				if e.Type == toolResult {
					results = append(results, decode[apitype.AgentToolResult](t, e))
				}
			}
			if len(results) != len(c.refused) {
				t.Fatalf("events %v", types(evs))
			}
			for i, r := range results {
				given := !strings.Contains(resultText(r), "does not appear in the user's messages")
				if r.IsError != c.refused[i] || given == c.refused[i] {
					t.Errorf("result %d = %.300s (is_error %v), want refused %v", i, resultText(r), r.IsError, c.refused[i])
				}
			}
		})
	}
}

// TestWebFetchInterrupted: a user.interrupt cancels a fetch in flight (the page server sees its request end) and
// closes the call as interrupted.
func TestWebFetchInterrupted(t *testing.T) {
	t.Parallel()
	started, cancelled := make(chan struct{}), make(chan struct{})
	slow := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(cancelled)
	}))
	defer slow.Close()
	roots := x509.NewCertPool()
	roots.AddCert(slow.Certificate())
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{fetchUse("toolu_1", slow.URL+"/slow")}})
	cfg := f.config()
	cfg.WebFetch = httpfetch.New(httpfetch.Config{AllowInternal: []string{slow.Listener.Addr().String()}, RootCAs: roots})
	f.start(cfg)
	id := f.webSession(nil, webTools(nil))
	f.say(id, "read "+slow.URL+"/slow")
	<-started
	f.send(id, interrupt, apitype.UserInterrupt{})
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage, interrupt, toolResult, idle)
	if res := decode[apitype.AgentToolResult](t, evs[7]); !res.IsError || res.ToolUseID != evs[3].ID || resultText(res) != "interrupted by the user" {
		t.Errorf("tool result = %+v", res)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the fetch was not cancelled")
	}
}
