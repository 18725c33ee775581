package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/model"
)

// BenchmarkParamsHistory is the request's build and encoding as a session's history grows: turns of an
// assistant's text and bash call, answered by a 2 KiB tool result, then the user's next message.
func BenchmarkParamsHistory(b *testing.B) {
	for _, turns := range []int{1, 10, 50, 200} {
		req := historyRequest(turns)
		b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) { benchParams(b, req) })
	}
}

// historyRequest is a request after turns turns of an assistant's text and bash call, each answered by a 2 KiB
// tool result.
func historyRequest(turns int) *model.Request {
	result := strings.Repeat("drwxr-xr-x 2 root root 4096 Dec  6 12:00 dir\n", 2048/45)
	req := &model.Request{Model: "claude-sonnet-4-6", MaxTokens: 4096, System: "You are a helpful agent.",
		CacheBreakpoints: true, Tools: builtinTools()}
	req.Messages = append(req.Messages, model.Message{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: "Look around."}}})
	for i := range turns {
		id := fmt.Sprintf("toolu_%024d", i)
		req.Messages = append(req.Messages,
			model.Message{Role: "assistant", Content: []model.Block{
				{Type: model.BlockText, Text: "Let me list the directory again to see what changed."},
				{Type: model.BlockToolUse, ID: id, Name: "bash", Input: json.RawMessage(`{"command":"ls -la /workspace"}`)},
			}},
			model.Message{Role: "user", Content: []model.Block{
				{Type: model.BlockToolResult, ToolUseID: id, Content: []model.Block{{Type: model.BlockText, Text: result}}},
			}})
	}
	return req
}

// BenchmarkParams is what the adapter does before the SDK sends a first turn's request: the params built and
// encoded, for an agent with the built-in toolset, a short system prompt and one user message.
func BenchmarkParams(b *testing.B) {
	benchParams(b, &model.Request{Model: "claude-sonnet-4-6", MaxTokens: 4096, System: "You are a helpful agent. Be brief.",
		CacheBreakpoints: true, Tools: builtinTools(), Messages: []model.Message{
			{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: "bench s0-1 sesn_011CabcdefABCDEFabcdefABCD"}}},
		}})
}

// benchParams builds and encodes req's params, as Call does before the SDK sends them, on a Model whose tool
// cache is warm after the first.
func benchParams(b *testing.B, req *model.Request) {
	m := New(Config{APIKey: "k"})
	b.ReportAllocs()
	for b.Loop() {
		_, body, err := m.params(req)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(body)))
	}
}
