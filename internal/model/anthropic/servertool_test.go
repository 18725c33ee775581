package anthropic_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// Scripted server tool blocks, as the Messages API answers a web search.
const (
	srvUse    = `{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"corral agents"}}`
	srvResult = `{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://docs.example.com/a","title":"Docs A","encrypted_content":"enc-1","page_age":null}]}`
)

// TestServerTool: a server tool definition is sent as given (before the client tools, whose last keeps the
// cache mark), the answer's server_tool_use (its input streamed) and web_search_tool_result blocks come back
// whole with the usage's web search count, and sent back in the next request they reach the API unchanged.
func TestServerTool(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	s.Script(
		modeltest.Turn{ServerBlocks: []string{srvUse, srvResult}, Text: "Found it.",
			Usage: modeltest.Usage{InputTokens: 10, OutputTokens: 5, WebSearchRequests: 1}},
		modeltest.Turn{Text: "ok"},
	)
	server := json.RawMessage(`{"type":"web_search_20250305","name":"web_search","blocked_domains":["spam.test"],"max_uses":5}`)
	req := &model.Request{Model: "claude-test", MaxTokens: 100, CacheBreakpoints: true, Messages: []model.Message{userText("search")},
		Tools: []model.ToolSpec{{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}, {Name: "web_search", Server: server}}}
	resp, err := m.Call(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Requests()[0]
	if len(r.Tools) != 2 || r.Tools[0].Type != "web_search_20250305" || r.Tools[0].Name != "web_search" || r.Tools[1].Name != "echo" || r.Tools[1].CacheControl == nil {
		t.Fatalf("tools sent %+v", r.Tools)
	}
	if !strings.Contains(string(r.Body), `"blocked_domains":["spam.test"]`) || !strings.Contains(string(r.Body), `"max_uses":5`) {
		t.Fatalf("server tool not sent as given: %s", r.Body)
	}
	if resp.ServerToolUse.WebSearchRequests != 1 || len(resp.Content) != 3 {
		t.Fatalf("response %+v", resp)
	}
	use, res := resp.Content[0], resp.Content[1]
	if use.Type != model.BlockServerToolUse || !strings.Contains(string(use.Raw), `"query":"corral agents"`) ||
		res.Type != model.BlockWebSearchToolResult || !strings.Contains(string(res.Raw), `"encrypted_content":"enc-1"`) {
		t.Fatalf("server blocks %s / %s", use.Raw, res.Raw)
	}

	req.Messages = append(req.Messages, model.Message{Role: "assistant", Content: resp.Content}, userText("thanks"))
	if _, err := m.Call(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	hist := s.Requests()[1].Messages[1].Content
	if len(hist) != 3 || hist[0].Type != "server_tool_use" || hist[1].Type != "web_search_tool_result" {
		t.Fatalf("history %+v", hist)
	}
	for i, want := range []string{srvUse, srvResult} {
		var got, exp any
		_ = json.Unmarshal(hist[i].Raw, &got)
		_ = json.Unmarshal([]byte(want), &exp)
		g, _ := json.Marshal(got)
		e, _ := json.Marshal(exp)
		if string(g) != string(e) {
			t.Errorf("block %d sent back as %s, want %s", i, g, e)
		}
	}
}
