package harness

import (
	"encoding/json"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/webfetch"
)

// web_fetch fetches only URLs given to it, never URLs the model writes itself (which could carry what it read
// out of the session): a URL must appear in a source that the tool's url_sources allow, as with the hosted
// service. The sources are the text of the user's messages (user_input), the results of the agent's custom tools
// (client_tool_results, by tool name) and of earlier web_fetch calls (server_tool_results): the pages fetched and
// the links on them. The thread's log since its last compaction is read, and the URLs its compactions carried
// from the events they replaced (in this brain's memory: a brain that resumes the session after a restart has
// only the log since the last compaction, and refuses what it cannot find there).

// urlFilter is one source's filter: {"type":"all"|"none"} or {"type":"only"|"except","tools":[{"name"}]};
// null (unset) is all.
type urlFilter struct {
	Type  string `json:"type"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// allows reports whether the filter lets the results of tool (or, for user_input, "") contribute URLs.
func (f urlFilter) allows(tool string) bool {
	in := slices.ContainsFunc(f.Tools, func(t struct {
		Name string `json:"name"`
	}) bool {
		return t.Name == tool
	})
	switch f.Type {
	case "none":
		return false
	case "only":
		return in
	case "except":
		return !in
	}
	return true
}

func parseFilter(raw json.RawMessage) urlFilter {
	var f urlFilter
	if len(raw) == 0 || string(raw) == "null" {
		return urlFilter{Type: "all"}
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return urlFilter{Type: s}
		}
		return urlFilter{Type: "none"}
	}
	return f
}

// source kinds: what gave a URL.
const (
	sourceUser   = iota // the user's messages
	sourceClient        // a custom tool's result (tool: its name)
	sourceServer        // an earlier web_fetch result
	// sourceThread: a message from another thread of the session (a thread's task included). Another thread's
	// model wrote it, so a URL in it is given only if the user gave it too (userGave), under user_input's
	// filter: the URLs the user gave the coordinator reach the threads it starts, and a URL a thread makes up,
	// carrying what it read, does not reach another that would fetch it.
	sourceThread
)

// sourceURL is a URL a source gave.
type sourceURL struct {
	kind int
	tool string // sourceClient: the custom tool's name
	url  string // normalised (webfetch.NormURL)
}

// maxCarriedURLs bounds the URLs a thread carries across its compactions.
const maxCarriedURLs = 4096

// sourceURLs are the URLs the events gave, by source (before any filter).
func sourceURLs(events []apitype.Event) []sourceURL {
	var out []sourceURL
	add := func(kind int, tool, text string) {
		for _, u := range webfetch.URLsIn(text) {
			out = append(out, sourceURL{kind: kind, tool: tool, url: u})
		}
	}
	names := map[string]string{} // tool use event id -> tool name
	for _, e := range events {
		switch e.Type {
		case apitype.EventUserMessage:
			var m apitype.UserMessage
			if e.DecodeData(&m) == nil {
				add(sourceUser, "", contentText(m.Content))
			}
		case apitype.EventUserDefineOutcome:
			var d apitype.DefineOutcome
			if e.DecodeData(&d) == nil {
				add(sourceUser, "", outcomeTask(d))
			}
		case apitype.EventAgentThreadMessageReceived:
			var m apitype.ThreadMessageReceived
			if e.DecodeData(&m) == nil {
				add(sourceThread, "", contentText(m.Content))
			}
		case apitype.EventAgentCustomToolUse, apitype.EventAgentToolUse:
			var u apitype.AgentToolUse
			if e.DecodeData(&u) == nil {
				names[e.ID] = u.Name
			}
		case apitype.EventUserCustomToolResult:
			var r apitype.UserCustomToolResult
			if e.DecodeData(&r) == nil {
				add(sourceClient, names[r.CustomToolUseID], contentText(r.Content))
			}
		case apitype.EventAgentToolResult:
			var r apitype.AgentToolResult
			if e.DecodeData(&r) == nil && names[r.ToolUseID] == toolWebFetch && !r.IsError {
				add(sourceServer, "", contentText(r.Content))
			}
		}
	}
	return out
}

// urlGiven reports whether the URL appears in a source the tool's url_sources allow; if not, it says why. The
// sources are the thread's tail and what its compactions carried of the events they replaced (never the
// summary's text, which the model wrote).
func (t *thread) urlGiven(raw string, src *apitype.WebURLSources) (bool, string) {
	want := webfetch.NormURL(raw)
	if want == "" {
		return true, "" // not an http(s) URL: the fetcher says why
	}
	if src == nil {
		src = &apitype.WebURLSources{}
	}
	user := parseFilter(src.UserInput)
	filters := [...]urlFilter{sourceUser: user, sourceClient: parseFilter(src.ClientToolResults),
		sourceServer: parseFilter(src.ServerToolResults), sourceThread: user}
	fromThread := false
	allowed := func(u sourceURL) bool {
		tool := u.tool
		if u.kind == sourceServer {
			tool = toolWebFetch
		}
		if u.url != want || !filters[u.kind].allows(tool) {
			return false
		}
		if u.kind == sourceThread {
			fromThread = true
			return false
		}
		return true
	}
	if t.tail != nil && (slices.ContainsFunc(t.tail.carriedURLs, allowed) || slices.ContainsFunc(sourceURLs(t.tail.events), allowed)) {
		return true, ""
	}
	if fromThread {
		gave, err := t.userGave(want)
		if err != nil {
			return false, "web_fetch could not check where " + raw + " came from: " + err.Error()
		}
		if gave {
			return true, ""
		}
		return false, "web_fetch fetches only URLs given to it, and " + raw + " appears only in a message from " +
			"another thread of this session, not in the user's messages: it does not fetch URLs a model writes. " +
			"Ask the user for the URL, or fetch a page that links to it."
	}
	return false, "web_fetch fetches only URLs given to it, and " + raw + " does not appear in " +
		"the user's messages, a custom tool's result or an earlier web_fetch result (as this agent's url_sources allow): " +
		"it does not fetch URLs the model writes itself. Ask the user for the URL, or fetch a page that links to it."
}

// maxUserEventsRead bounds the user's events userGave reads, the newest first.
const maxUserEventsRead = 10000

// userGave reports whether the user's own messages to the session (the primary thread's user.message and
// user.define_outcome events, read from the log, compacted or not) hold the URL (normalised).
func (t *thread) userGave(want string) (bool, error) {
	var before int64
	for read := 0; read < maxUserEventsRead; {
		events, err := t.b.cfg.Store.EventList(t.ctx, &store.EventListParams{SessionID: t.sess.ID,
			Scope: store.ScopeThread, Types: []apitype.EventType{apitype.EventUserMessage, apitype.EventUserDefineOutcome},
			Desc: true, BeforeSeq: before, Limit: 200})
		if err != nil {
			return false, err
		}
		if slices.ContainsFunc(sourceURLs(events), func(u sourceURL) bool { return u.kind == sourceUser && u.url == want }) {
			return true, nil
		}
		if len(events) < 200 {
			return false, nil
		}
		read += len(events)
		before = events[len(events)-1].Seq
	}
	return false, nil
}
