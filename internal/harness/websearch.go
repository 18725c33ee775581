package harness

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/websearch"
	"go.opentelemetry.io/otel/trace"
)

// toolWebSearch is agent_toolset_20260401's web search tool, which the brain runs itself through the search
// provider the operator configured (Config.WebSearch), outside the sandbox.
const toolWebSearch = "web_search"

// webSearchSpec is the definition the model is offered, after Anthropic's web search tool.
var webSearchSpec = model.ToolSpec{
	Name: toolWebSearch,
	Description: "Search the web for up-to-date information: current events, documentation, facts past your " +
		"training data. Returns up to 10 results, each with its title, URL and a snippet of the page; cite the " +
		"URLs you rely on. Write a concise query as you would type it into a search engine.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"The search query."}},"required":["query"],"additionalProperties":false}`),
}

// msgNoSearch is why web_search is not offered on a server without a search provider.
const msgNoSearch = "the tool web_search is not available on this server: its operator configured no search provider " +
	"(corral serve --web-search searxng=URL)"

// addWebSearch routes web_search under the agent's agent_toolset_20260401 config: offered with its resolved
// permission policy when the server has a search provider, refused saying why when it has none (and left out
// of the model's tools). An agent without the toolset, or with web_search disabled, keeps the route addToolset
// gave it.
func (t *thread) addWebSearch(ts *toolset) {
	cfg, ok := toolsetConfig(t.agent.Tools, toolWebSearch)
	if !ok || !cfg.Enabled {
		return
	}
	tc, pol := &cfg, cfg.PermissionPolicy.Type
	if t.b.cfg.WebSearch == nil && t.b.cfg.WebSearchServer && !strings.Contains(t.agent.Model.ID, "/") {
		// Anthropic's server tool: the model calls it and the provider runs it; a call to it as a client tool
		// (which the model is not offered) is refused.
		if pol != apitype.PolicyAlwaysAllow {
			ts.refuse(toolWebSearch, "the tool web_search is not available: its permission policy asks for confirmation, "+
				"which Anthropic's server-side web search (this server's --web-search anthropic) cannot wait for")
			return
		}
		ts.specs = append(ts.specs, model.ToolSpec{Name: toolWebSearch, Server: serverWebSearch(tc)})
		ts.refuse(toolWebSearch, "web_search runs on the model provider's side")
		return
	}
	if t.b.cfg.WebSearch == nil {
		ts.refuse(toolWebSearch, msgNoSearch)
		return
	}
	ts.offer(webSearchSpec, toolRoute{by: execSearch, policy: pol, web: tc})
}

// searchExec is web_search's executor: an agent.tool_use under the tool's permission policy, closed by an
// agent.tool_result, run by the brain. A search has no effect, so a call a crash cut short is run again
// (settle).
type searchExec struct{ builtinExec }

func (searchExec) name() string { return "search" }

func (searchExec) settle(t *thread, open []*toolUse) (bool, error) {
	return rerunOpen(t, open, (*thread).webSearch)
}

func (searchExec) run(t *thread, u *toolUse) (bool, error) { return true, t.webSearch(u) }

// webSearch runs an approved web_search call through the search provider and appends its result: the results
// that pass the tool's domain rules, as text. A provider that fails gives the model an error result it can act
// on.
func (t *thread) webSearch(u *toolUse) error {
	delete(t.fresh, u.ev.ID)
	if len(u.data.ServerBlock) > 0 {
		// A search the provider ran but left without its result (an answer cut at pause_turn): closed, and
		// left out of the conversation (transcript).
		_, err := t.append("", nil, toolResult(u.ev.ID, true, "The model provider did not finish this web search."))
		return err
	}
	rt := t.tools.route(u.data.Name)
	if t.b.cfg.WebSearch == nil || rt.by != execSearch {
		_, err := t.append("", nil, failedResult(u.ev.ID, source(apitype.ComponentBrain, "", apitype.ReasonUnavailable), msgNoSearch))
		return err
	}
	var in struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(u.data.Input, &in); err != nil || strings.TrimSpace(in.Query) == "" {
		_, err := t.append("", nil, toolResult(u.ev.ID, true, `web_search needs {"query": "<search terms>"}`))
		return err
	}
	q := searchQuery(in.Query, rt.web)
	if err := q.Check(); err != nil {
		_, err := t.append("", nil, toolResult(u.ev.ID, true, "web_search: "+err.Error()))
		return err
	}
	ctx, done := t.watchInterrupts()
	_, span := t.startToolSpan(u.data.Name, u.ev.ID, "search")
	began := time.Now()
	res, err := t.b.cfg.WebSearch.Search(trace.ContextWithSpan(ctx, span), q)
	t.b.cfg.Metrics.ToolCall(u.data.Name, "search", time.Since(began), err != nil)
	interrupted := done()
	var src *apitype.FailureSource
	if err != nil && !interrupted {
		reason := apitype.ReasonConnectionFailed
		if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "did not answer within") {
			reason = apitype.ReasonTimeout
		}
		src = source(apitype.ComponentProxy, t.b.cfg.WebSearch.Name(), reason)
	}
	endToolSpan(span, src, err, false)
	var ev apitype.NewEvent
	switch {
	case interrupted:
		ev = toolResult(u.ev.ID, true, msgInterrupted)
	case t.ctx.Err() != nil:
		return context.Cause(t.ctx)
	case err != nil:
		t.b.cfg.Logger.Warn("web search failed", "session", t.sess.ID, "provider", t.b.cfg.WebSearch.Name(), "err", err)
		ev = failedResult(u.ev.ID, src, "The web search failed: "+err.Error())
	default:
		ev = toolResult(u.ev.ID, false, websearch.Format(in.Query, res))
	}
	_, err = t.append("", nil, ev)
	return err
}

// searchQuery is the provider's query for text under the tool's config tc (nil: none).
func searchQuery(text string, tc *apitype.ToolConfig) websearch.Query {
	q := websearch.Query{Query: strings.TrimSpace(text)}
	if tc == nil {
		return q
	}
	q.AllowedDomains, q.BlockedDomains = tc.AllowedDomains, tc.BlockedDomains
	if len(tc.UserLocation) > 0 {
		var loc struct {
			Country string `json:"country"`
		}
		if json.Unmarshal(tc.UserLocation, &loc) == nil {
			q.Country = strings.ToUpper(loc.Country)
		}
	}
	return q
}

// webSearchMaxUses bounds the searches Anthropic's server tool makes in one model request.
const webSearchMaxUses = 10

// serverWebSearch is the definition of Anthropic's web search server tool under the tool's config tc (nil:
// none): its domains and user location as the agent's config has them (the same shapes).
func serverWebSearch(tc *apitype.ToolConfig) json.RawMessage {
	def := map[string]any{"type": "web_search_20250305", "name": toolWebSearch, "max_uses": webSearchMaxUses}
	if tc != nil {
		if len(tc.AllowedDomains) > 0 {
			def["allowed_domains"] = tc.AllowedDomains
		}
		if len(tc.BlockedDomains) > 0 {
			def["blocked_domains"] = tc.BlockedDomains
		}
		if len(tc.UserLocation) > 0 {
			def["user_location"] = tc.UserLocation
		}
	}
	out, _ := json.Marshal(def)
	return out
}

// serverCalls turns the server tool blocks of one answer into events: a server_tool_use into an
// agent.tool_use (allowed: the provider ran it), its web_search_tool_result into the agent.tool_result that
// closes it, the results listed as text; each keeps its block (ServerBlock) for the next requests.
type serverCalls map[string]string // the provider's call id -> the agent.tool_use's event id

func (sc serverCalls) event(b model.Block) []apitype.NewEvent {
	var blk struct {
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
	}
	if json.Unmarshal(b.Raw, &blk) != nil {
		return nil
	}
	if b.Type == model.BlockServerToolUse {
		ev := mustEvent(apitype.EventAgentToolUse, apitype.AgentToolUse{Name: blk.Name, Input: blk.Input, ModelToolUseID: blk.ID,
			EvaluatedPermission: apitype.PermissionAllow, Evaluation: &apitype.ToolEvaluation{Type: apitype.PolicyAlwaysAllow},
			ServerBlock: b.Raw})
		ev.ID = apitype.NewID(apitype.PrefixEvent)
		sc[blk.ID] = ev.ID
		return []apitype.NewEvent{ev}
	}
	useID, ok := sc[blk.ToolUseID]
	if !ok {
		return nil // a result without its call in this answer: nothing to close
	}
	text, isErr := serverResultText(blk.Content)
	return []apitype.NewEvent{mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{ToolUseID: useID, IsError: isErr,
		Content: []apitype.ContentBlock{apitype.TextBlock(text)}, ServerBlock: b.Raw})}
}

// serverResultText lists a web_search_tool_result's content for clients: its results' titles and URLs, or its
// error code.
func serverResultText(content json.RawMessage) (string, bool) {
	var results []struct {
		Type  string `json:"type"`
		URL   string `json:"url"`
		Title string `json:"title"`
	}
	if json.Unmarshal(content, &results) == nil {
		rs := make([]websearch.Result, 0, len(results))
		for _, r := range results {
			if r.Type == "web_search_result" {
				rs = append(rs, websearch.Result{Title: r.Title, URL: r.URL})
			}
		}
		return websearch.Format("", rs), false
	}
	var e struct {
		ErrorCode string `json:"error_code"`
	}
	_ = json.Unmarshal(content, &e)
	return "The web search failed: " + cmp.Or(e.ErrorCode, "unknown error"), true
}

// serverResult is the provider's block an agent.tool_result keeps, if any.
func serverResult(e apitype.Event) json.RawMessage {
	if e.Type != apitype.EventAgentToolResult {
		return nil
	}
	var r apitype.AgentToolResult
	if e.DecodeData(&r) != nil {
		return nil
	}
	return r.ServerBlock
}
