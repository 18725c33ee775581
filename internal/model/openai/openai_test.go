package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/model/openai"
)

// adapter is the openai adapter for the model conformance suite.
var adapter = modeltest.Adapter{
	API: modeltest.Chat,
	New: func(baseURL, apiKey string) model.Model {
		return openai.New(openai.Config{APIKey: apiKey, BaseURL: baseURL + "/v1"})
	},
	Errors: []modeltest.ErrorCase{
		{Name: "quota", Turn: modeltest.Turn{Err: &modeltest.ErrorReply{Status: 429, Type: "insufficient_quota"}}, Kind: model.ErrBilling, Status: 429},
	},
}

func TestConformance(t *testing.T) { modeltest.Run(t, adapter) }

// FuzzToolInput checks that any JSON tool input streamed in argument fragments comes back equal.
func FuzzToolInput(f *testing.F) { modeltest.FuzzToolInput(f, adapter) }

func newModel(t *testing.T) (*openai.Model, *modeltest.Server) {
	t.Helper()
	s := modeltest.NewServer(t)
	return openai.New(openai.Config{APIKey: "sk-test", BaseURL: s.URL + "/v1"}), s
}

func userText(text string) model.Message {
	return model.Message{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: text}}}
}

// TestChatRequest: the system prompt goes as a leading system message, usage is asked for, and reasoning the
// server streams is dropped from the answer. (The text turn itself is in the conformance suite.)
func TestChatRequest(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	s.Script(modeltest.Turn{Thinking: "hidden reasoning", Text: "Hello there, world."})
	resp, err := m.Call(context.Background(), &model.Request{
		Model: "gpt-test", System: "Be brief.", MaxTokens: 100, Messages: []model.Message{userText("hi")},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 1 || resp.Content[0].Type != model.BlockText || resp.Content[0].Text != "Hello there, world." {
		t.Fatalf("response %+v", resp)
	}
	r := s.Requests()[0]
	if !r.IncludeUsage || len(r.ChatMessages) != 2 || r.ChatMessages[0].Role != "system" || r.ChatMessages[0].Content != "Be brief." ||
		r.ChatMessages[1].Role != "user" || r.LastUserText() != "hi" {
		t.Fatalf("request %+v, messages %+v", r, r.ChatMessages)
	}
}

// TestToolHistory: an assistant turn goes as one assistant message with function tool calls (thinking dropped),
// each tool result as a tool message right after it, and the rest of the user turn as a user message. (Tool
// calls coming back are in the conformance suite.)
func TestToolHistory(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	input := `{"command":"ls -la","env":{"A":"b"}}`
	img := &apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "image/png", Data: "iVBO"}
	req := &model.Request{Model: "gpt", MaxTokens: 50, Messages: []model.Message{
		userText("list"),
		{Role: "assistant", Content: []model.Block{
			{Type: model.BlockThinking, Thinking: "x", Signature: "s"},
			{Type: model.BlockText, Text: "Listing."},
			{Type: model.BlockToolUse, ID: "call_1", Name: "bash", Input: json.RawMessage(input)},
			{Type: model.BlockToolUse, ID: "call_2", Name: "read", Input: json.RawMessage(`{"path":"/a"}`)},
		}},
		{Role: "user", Content: []model.Block{
			{Type: model.BlockToolResult, ToolUseID: "call_1", Content: []model.Block{{Type: model.BlockText, Text: "a"}, {Type: model.BlockText, Text: "b"}}},
			{Type: model.BlockToolResult, ToolUseID: "call_2", IsError: true, Content: []model.Block{{Type: model.BlockImage, Image: img}}},
			{Type: model.BlockText, Text: "look"}, {Type: model.BlockImage, Image: img},
		}},
	}}
	if _, err := m.Call(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	msgs := s.Requests()[0].ChatMessages
	if len(msgs) != 5 {
		t.Fatalf("messages %+v", msgs)
	}
	asst := msgs[1]
	if asst.Role != "assistant" || asst.Content != "Listing." || len(asst.ToolCalls) != 2 || asst.ToolCalls[0].ID != "call_1" ||
		asst.ToolCalls[0].Function.Name != "bash" || asst.ToolCalls[0].Function.Arguments != input || asst.ToolCalls[0].Type != "function" {
		t.Fatalf("assistant %+v", asst)
	}
	if msgs[2].Role != "tool" || msgs[2].ToolCallID != "call_1" || msgs[2].Content != "a\nb" {
		t.Fatalf("first tool message %+v", msgs[2])
	}
	if msgs[3].Role != "tool" || msgs[3].ToolCallID != "call_2" || msgs[3].Content != "Error: [image omitted]" {
		t.Fatalf("second tool message %+v", msgs[3])
	}
	if msgs[4].Role != "user" || len(msgs[4].Parts) != 2 || !strings.Contains(string(msgs[4].Parts[1]), `"url":"data:image/png;base64,iVBO"`) {
		t.Fatalf("user message %+v", msgs[4])
	}
}

// TestMaxTokensStop: a tool call cut off mid-arguments by the length limit is dropped.
func TestMaxTokensStop(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	s.Script(modeltest.Turn{Text: "cut", StopReason: "max_tokens", ToolUses: []modeltest.ToolUse{{ID: "c", Name: "f", Input: `{"a":`}}})
	resp, err := m.Call(context.Background(), &model.Request{Model: "g", Messages: []model.Message{userText("x")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "max_tokens" || len(resp.Content) != 1 {
		t.Fatalf("response %+v", resp)
	}
}

func TestLegacyMaxTokens(t *testing.T) {
	t.Parallel()
	s := modeltest.NewServer(t)
	m := openai.New(openai.Config{APIKey: "k", BaseURL: s.URL + "/v1", LegacyMaxTokens: true})
	if _, err := m.Call(context.Background(), &model.Request{Model: "g", MaxTokens: 77, Messages: []model.Message{userText("x")}}, nil); err != nil {
		t.Fatal(err)
	}
	if body := string(s.Requests()[0].Body); !strings.Contains(body, `"max_tokens":77`) {
		t.Fatalf("body %s", body)
	}
}

// TestIgnoresEnvironment: the adapter takes its credentials and endpoint from its Config alone, although
// openai.NewClient reads OPENAI_*; the command reads the environment.
func TestIgnoresEnvironment(t *testing.T) {
	s, env := modeltest.NewServer(t), modeltest.NewServer(t)
	t.Setenv("OPENAI_API_KEY", "sk-env")
	t.Setenv("OPENAI_BASE_URL", env.URL+"/v1")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-env")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-From-Env: 1")
	m := openai.New(openai.Config{APIKey: "sk-cfg", BaseURL: s.URL + "/v1"})
	if _, err := m.Call(context.Background(), &model.Request{Model: "g", Messages: []model.Message{userText("x")}}, nil); err != nil {
		t.Fatal(err)
	}
	got := s.Requests()
	if len(got) != 1 || got[0].Header.Get("authorization") != "Bearer sk-cfg" || got[0].Header.Get("OpenAI-Organization") != "" ||
		got[0].Header.Get("OpenAI-Project") != "" || got[0].Header.Get("X-From-Env") != "" {
		t.Fatalf("requests %+v", got)
	}

	// Organization and project come from the Config.
	m = openai.New(openai.Config{APIKey: "sk-cfg", BaseURL: s.URL + "/v1", Organization: "org-cfg", Project: "proj-cfg"})
	if _, err := m.Call(context.Background(), &model.Request{Model: "g", Messages: []model.Message{userText("x")}}, nil); err != nil {
		t.Fatal(err)
	}
	if r := s.Requests()[1]; r.Header.Get("OpenAI-Organization") != "org-cfg" || r.Header.Get("OpenAI-Project") != "proj-cfg" {
		t.Fatalf("headers %v", r.Header)
	}

	// Without a key in the Config, OPENAI_API_KEY is not used.
	m = openai.New(openai.Config{BaseURL: s.URL + "/v1"})
	_, err := m.Call(context.Background(), &model.Request{Model: "g", Messages: []model.Message{userText("x")}}, nil)
	if !errors.Is(err, model.ErrNoCredentials) {
		t.Fatalf("got %v, want ErrNoCredentials", err)
	}

	// Without a base URL in the Config, the requests go to OpenAI's, not OPENAI_BASE_URL.
	var urls []string
	m = openai.New(openai.Config{APIKey: "sk-cfg", HTTPClient: &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		urls = append(urls, r.URL.String())
		return nil, errors.New("no network in tests")
	})}})
	if _, err := m.Call(context.Background(), &model.Request{Model: "g", Messages: []model.Message{userText("x")}}, nil); err == nil {
		t.Fatal("a call through a failing transport succeeded")
	}
	if len(urls) != 1 || urls[0] != "https://api.openai.com/v1/chat/completions" {
		t.Fatalf("requests went to %v, want OpenAI's API", urls)
	}
	if n := len(env.Requests()); n != 0 {
		t.Fatalf("%d requests went to OPENAI_BASE_URL", n)
	}
}

// roundTripper is an http.RoundTripper of a function.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
