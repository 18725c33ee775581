package harness

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/webfetch"
	"go.opentelemetry.io/otel/trace"
)

// The web_fetch tool of agent_toolset_20260401: the brain runs it in its own process, outside every sandbox,
// through Config.WebFetch (the webfetch port), under the session's environment networking and the tool's
// allowed_domains xor blocked_domains. A page longer than webFetchInline characters is written into the
// session's sandbox (through the hands, as a write call) and the model gets where and its start.
const (
	toolWebFetch = "web_fetch"
	// webFetchInline is the longest text a web_fetch result carries whole.
	webFetchInline = 100_000
	// webFetchHead is how much of a page saved to a file the result shows.
	webFetchHead = 8_000
	// webFetchDir is where pages too long for a result are saved in the sandbox: relative to the workspace
	// (the tools' working directory, /workspace in an isolating backend), so that every backend puts it there.
	webFetchDir = ".web_fetch"
)

var webFetchSpec = model.ToolSpec{
	Name: toolWebFetch,
	Description: "Fetch the content of a web page or PDF document at a URL. HTML pages come back as Markdown (their " +
		"readable part), plain text and JSON as they are, PDFs as documents. Only http and https URLs are fetched, " +
		"and only URLs given to you: in the user's messages, in a custom tool's result, or on a page fetched before " +
		"(its links); never a URL you make up. Some hosts and domains may be refused by this agent's configuration. A page too long for one result is " +
		"saved to a file in your sandbox, and the result says where.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","description":"The URL to fetch (http or https)."}},"required":["url"]}`),
}

// webExec is the executor of web_fetch: the brain runs the calls. A fetch has no effect the session keeps but
// its result, so a call a crash cut short is run again (settle).
type webExec struct{ builtinExec }

func (webExec) name() string { return "web" }

func (webExec) settle(t *thread, open []*toolUse) (bool, error) {
	return rerunOpen(t, open, (*thread).webFetch)
}

func (webExec) run(t *thread, u *toolUse) (bool, error) { return true, t.webFetch(u) }

// toolsetConfig is the configuration of the toolset's tool name in an agent's agent_toolset_20260401 (as the API
// resolved it), with the toolset's defaults (its default_config, else enabled with always_allow); ok is false
// when the agent has no toolset.
func toolsetConfig(tools []apitype.Tool, name string) (cfg apitype.ToolConfig, ok bool) {
	for _, t := range tools {
		if t.Type != apitype.ToolTypeAgentToolset {
			continue
		}
		cfg = apitype.ToolConfig{Name: name, Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}}
		if t.DefaultConfig != nil {
			cfg.Enabled = t.DefaultConfig.Enabled
			if t.DefaultConfig.PermissionPolicy.Type != "" {
				cfg.PermissionPolicy = t.DefaultConfig.PermissionPolicy
			}
		}
		for _, c := range t.Configs {
			if c.Name != name && string(c.Type) != name {
				continue
			}
			pol := cfg.PermissionPolicy
			cfg = c
			if cfg.PermissionPolicy.Type == "" {
				cfg.PermissionPolicy = pol
			}
		}
		return cfg, true
	}
	return cfg, false
}

// addWebFetch offers web_fetch when the agent's toolset enables it and the brain has a fetcher; without one, the
// call stays refused as a tool this server does not serve.
func (t *thread) addWebFetch(ts *toolset) {
	cfg, ok := toolsetConfig(t.agent.Tools, toolWebFetch)
	switch {
	case !ok || t.b.cfg.WebFetch == nil:
	case !cfg.Enabled:
		ts.refuse(toolWebFetch, "the tool "+toolWebFetch+" is disabled for this agent")
	default:
		ts.offer(webFetchSpec, toolRoute{by: execWeb, policy: cfg.PermissionPolicy.Type})
	}
}

// webFetch runs an approved web_fetch call and appends its result.
func (t *thread) webFetch(u *toolUse) error {
	delete(t.fresh, u.ev.ID)
	_, span := t.startToolSpan(u.data.Name, u.ev.ID, "web")
	ctx, done := t.watchInterrupts()
	began := time.Now()
	content, failure := t.fetchPage(trace.ContextWithSpan(ctx, span), u)
	interrupted := done()
	t.b.cfg.Metrics.ToolCall(u.data.Name, "web", time.Since(began), failure != "")
	endToolSpan(span, nil, nil, failure != "")
	var ev apitype.NewEvent
	var usage *apitype.SessionUsage
	switch {
	case interrupted:
		ev = toolResult(u.ev.ID, true, msgInterrupted)
	case t.ctx.Err() != nil:
		return context.Cause(t.ctx)
	case failure != "":
		ev = toolResult(u.ev.ID, true, failure)
	default:
		ev = mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{ToolUseID: u.ev.ID, Content: content})
		// A page fetched counts in the session's usage as the hosted service counts its own fetches
		// (server_tool_use.web_fetch_requests); the next session.usage reports it.
		usage, _ = t.addUsage(&model.Response{ServerToolUse: apitype.ServerToolUse{WebFetchRequests: 1}})
	}
	_, err := t.append("", usage, ev)
	return err
}

// fetchPage fetches the call's URL and makes its result's content, or says why it failed.
func (t *thread) fetchPage(ctx context.Context, u *toolUse) ([]apitype.ContentBlock, string) {
	if t.b.cfg.WebFetch == nil {
		return nil, "the tool " + toolWebFetch + " is not available on this server"
	}
	var in struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(u.data.Input, &in); err != nil || strings.TrimSpace(in.URL) == "" {
		return nil, `web_fetch needs its input as {"url": "https://..."}`
	}
	cfg, _ := toolsetConfig(t.agent.Tools, toolWebFetch)
	if ok, why := t.urlGiven(in.URL, cfg.URLSources); !ok {
		return nil, why
	}
	req := &webfetch.Request{URL: in.URL, AllowedDomains: cfg.AllowedDomains, BlockedDomains: cfg.BlockedDomains}
	if n := t.env.Networking; n != nil && n.Type == apitype.NetworkingLimited {
		req.Limited, req.AllowedHosts = true, n.AllowedHosts
	}
	page, err := t.b.cfg.WebFetch.Fetch(ctx, req)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, msgInterrupted
		}
		return nil, "web_fetch failed: " + err.Error()
	}
	head := "Fetched " + page.URL + " (" + page.ContentType + ")"
	if page.Title != "" {
		head += ", titled " + page.Title
	}
	if page.PDF != nil {
		src, _ := json.Marshal(apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "application/pdf",
			Data: base64.StdEncoding.EncodeToString(page.PDF)})
		return []apitype.ContentBlock{apitype.TextBlock(head + ": the PDF document follows."),
			{Type: apitype.ContentDocument, Source: src}}, ""
	}
	text := page.Text
	if cfg.MaxContentTokens != nil && len(text) > *cfg.MaxContentTokens*4 {
		// Tokens counted as about 4 characters each.
		text = cutRunes(text, *cfg.MaxContentTokens*4) + fmt.Sprintf("\n\n[Truncated: the page is longer than this tool's max_content_tokens (%d).]", *cfg.MaxContentTokens)
	}
	if len(text) <= webFetchInline {
		return []apitype.ContentBlock{apitype.TextBlock(head + "\n\n" + text)}, ""
	}
	return []apitype.ContentBlock{apitype.TextBlock(t.savePage(ctx, u, head, text))}, ""
}

// savePage writes a page too long for a result into the session's sandbox (a write call through the hands) and
// returns the result's text: where it is, and its start. Without hands the brain can reach (none, or a
// self_hosted environment's worker), the page is cut instead, and the result says so.
func (t *thread) savePage(ctx context.Context, u *toolUse, head, text string) string {
	start := cutRunes(text, webFetchHead)
	cut := func(why string) string {
		return fmt.Sprintf("%s\n\n%s\n\n[Truncated: the page is %d characters; only the first %d are shown, as %s.]",
			head, cutRunes(text, webFetchInline), len(text), webFetchInline, why)
	}
	if t.b.cfg.Hands == nil || t.builtin() != execHands {
		return cut("this session has no sandbox to save the whole page in")
	}
	path := webFetchDir + "/" + fileSafe(cmp.Or(u.data.ModelToolUseID, u.ev.ID)) + ".md"
	input, _ := json.Marshal(map[string]string{"file_path": path, "content": text})
	res, err := t.b.cfg.Hands.Execute(ctx, &sandbox.Call{Recipe: t.recipe(), Shell: t.id, Name: "write", Input: input,
		OnProvision: t.provisionReporter(ctx)})
	if err != nil || res.IsError {
		why := "saving it in the sandbox failed"
		if err != nil {
			why += " (" + err.Error() + ")"
		}
		return cut(why)
	}
	return fmt.Sprintf("%s\n\nThe page is %d characters, too long for one result: it was saved whole to %s in your working directory "+
		"(read it in parts with the read tool, or search it with grep). Its first %d characters:\n\n%s",
		head, len(text), path, len(start), start)
}

// cutRunes returns at most n bytes of s, cut at a rune boundary.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// fileSafe keeps the characters of a file name that need no quoting.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}
