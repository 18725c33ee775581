package fakemodel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/fakemodel"
)

// A test scripts the model's replies, runs the real adapter against the fake, and asserts on what was sent.
func Example() {
	s, err := fakemodel.Start() // in a test: newServer(t)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	s.Script(
		fakemodel.Turn{Text: "Let me look.", ToolUses: []fakemodel.ToolUse{{ID: "toolu_1", Name: "bash", Input: `{"command":"ls"}`}}},
		fakemodel.Turn{Text: "There are two files."},
	)

	m := anthropic.New(anthropic.Config{APIKey: "test", BaseURL: s.URL})
	req := &model.Request{Model: "claude-test", MaxTokens: 1024, Messages: []model.Message{
		{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: "What is here?"}}},
	}}
	resp, err := m.Call(context.Background(), req, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StopReason, resp.Content[1].Name, string(resp.Content[1].Input))

	req.Messages = append(req.Messages,
		model.Message{Role: "assistant", Content: resp.Content},
		model.Message{Role: "user", Content: []model.Block{{Type: model.BlockToolResult, ToolUseID: "toolu_1",
			Content: []model.Block{{Type: model.BlockText, Text: "a.txt\nb.txt"}}}}})
	resp, err = m.Call(context.Background(), req, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StopReason, resp.Content[0].Text)
	fmt.Println(len(s.Requests()), "requests; the last ends with a", s.Requests()[1].Messages[2].Content[0].Type)
	// Output:
	// tool_use bash {"command":"ls"}
	// end_turn There are two files.
	// 2 requests; the last ends with a tool_result
}
