package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// adapter is the anthropic adapter for the model conformance suite.
var adapter = modeltest.Adapter{
	API: modeltest.Messages,
	New: func(baseURL, apiKey string) model.Model {
		return anthropic.New(anthropic.Config{APIKey: apiKey, BaseURL: baseURL})
	},
}

func TestConformance(t *testing.T) { modeltest.Run(t, adapter) }

// FuzzToolInput checks that any JSON tool input streamed in input_json_delta fragments comes back equal.
func FuzzToolInput(f *testing.F) { modeltest.FuzzToolInput(f, adapter) }

func newModel(t *testing.T) (*anthropic.Model, *modeltest.Server) {
	t.Helper()
	s := modeltest.NewServer(t)
	return anthropic.New(anthropic.Config{APIKey: "sk-test", BaseURL: s.URL}), s
}

func userText(text string) model.Message {
	return model.Message{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: text}}}
}

// TestRequestDefaults: a request without ThinkingBudget or CacheBreakpoints asks for no thinking and marks no
// cache breakpoint. (The text turn itself is in the conformance suite.)
func TestRequestDefaults(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	if _, err := m.Call(context.Background(), &model.Request{
		Model: "claude-test", System: "Be brief.", MaxTokens: 100, Messages: []model.Message{userText("hi")},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if r := s.Requests()[0]; r.Thinking != nil || r.CacheMarks() != 0 {
		t.Fatalf("request %+v", r)
	}
}

func TestDefaultMaxTokens(t *testing.T) {
	t.Parallel()
	s := modeltest.NewServer(t)
	m := anthropic.New(anthropic.Config{AuthToken: "tok", BaseURL: s.URL, DefaultMaxTokens: 321})
	if _, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil); err != nil {
		t.Fatal(err)
	}
	r := s.Requests()[0]
	if r.MaxTokens != 321 || r.Header.Get("authorization") != "Bearer tok" {
		t.Fatalf("max_tokens %d authorization %q", r.MaxTokens, r.Header.Get("authorization"))
	}
}

func TestThinkingPassthrough(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	s.Script(modeltest.Turn{Thinking: "Let me think about it.", Signature: "c2lnbmF0dXJl", Text: "42"})
	var mu sync.Mutex
	var thinking strings.Builder
	req := &model.Request{Model: "c", MaxTokens: 1000, ThinkingBudget: 2048, Messages: []model.Message{userText("q")}}
	resp, err := m.Call(context.Background(), req, func(d model.Delta) {
		mu.Lock()
		defer mu.Unlock()
		if d.Type == model.BlockThinking {
			thinking.WriteString(d.Text)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Block{
		{Type: model.BlockThinking, Thinking: "Let me think about it.", Signature: "c2lnbmF0dXJl"},
		{Type: model.BlockText, Text: "42"},
	}
	if len(resp.Content) != 2 || resp.Content[0].Thinking != want[0].Thinking || resp.Content[0].Signature != want[0].Signature ||
		resp.Content[1].Text != "42" {
		t.Fatalf("content %+v", resp.Content)
	}
	if thinking.String() != "Let me think about it." {
		t.Fatalf("thinking deltas %q", thinking.String())
	}
	r := s.Requests()[0]
	if r.Thinking == nil || r.Thinking.Type != "enabled" || r.Thinking.BudgetTokens != 2048 || r.MaxTokens <= 2048 {
		t.Fatalf("thinking %+v max_tokens %d", r.Thinking, r.MaxTokens)
	}

	// The next request carries the blocks back unchanged, redacted thinking included.
	req.Messages = append(req.Messages,
		model.Message{Role: "assistant", Content: append(resp.Content[:1:1], model.Block{Type: model.BlockRedactedThinking, Data: "b3BhcXVl"}, resp.Content[1])},
		userText("and?"))
	if _, err := m.Call(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	got := s.Requests()[1].Messages[1].Content
	if len(got) != 3 || got[0].Type != "thinking" || got[0].Thinking != want[0].Thinking || got[0].Signature != want[0].Signature ||
		got[1].Type != "redacted_thinking" || got[1].Data != "b3BhcXVl" || got[2].Text != "42" {
		t.Fatalf("assistant blocks sent back %+v", got)
	}
}

// TestToolHistory: tool_use blocks go back as sent and tool results as tool_result blocks, error flag, images and
// PDF documents included. (Tool calls coming back are in the conformance suite.)
func TestToolHistory(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	input := `{"command":"ls -la","timeout":30,"env":{"A":"b"}}`
	img := &apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "image/png", Data: "iVBORw0KGgo="}
	req := &model.Request{Model: "c", MaxTokens: 100, Messages: []model.Message{
		userText("list files"),
		{Role: "assistant", Content: []model.Block{
			{Type: model.BlockText, Text: "Listing."},
			{Type: model.BlockToolUse, ID: "toolu_01", Name: "bash", Input: json.RawMessage(input)},
		}},
		{Role: "user", Content: []model.Block{
			{Type: model.BlockToolResult, ToolUseID: "toolu_01", IsError: true, Content: []model.Block{
				{Type: model.BlockText, Text: "exit status 1"}, {Type: model.BlockImage, Image: img},
				{Type: model.BlockDocument, Document: &apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "application/pdf", Data: "JVBERi0="}},
			}},
		}},
	}}
	if _, err := m.Call(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	msgs := s.Requests()[0].Messages
	if got := msgs[1].Content[1]; got.Type != "tool_use" || got.ID != "toolu_01" || !modeltest.JSONEqual(t, got.Input, input) {
		t.Fatalf("tool_use sent back %+v", got)
	}
	res := msgs[2].Content[0]
	if res.Type != "tool_result" || res.ToolUseID != "toolu_01" || !res.IsError || len(res.Content) != 3 ||
		res.Content[0].Text != "exit status 1" || res.Content[1].Type != "image" ||
		!modeltest.JSONEqual(t, res.Content[1].Source, `{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}`) ||
		res.Content[2].Type != "document" ||
		!modeltest.JSONEqual(t, res.Content[2].Source, `{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}`) {
		t.Fatalf("tool_result sent %+v", res)
	}
}

func TestCacheBreakpoints(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	toolUse := model.Block{Type: model.BlockToolUse, ID: "t1", Name: "bash", Input: json.RawMessage(`{}`)}
	result := func(id string) model.Message {
		return model.Message{Role: "user", Content: []model.Block{{Type: model.BlockToolResult, ToolUseID: id, Content: []model.Block{{Type: model.BlockText, Text: "ok"}}}}}
	}
	req := &model.Request{
		Model: "c", MaxTokens: 10, System: "sys", CacheBreakpoints: true,
		Tools: []model.ToolSpec{{Name: "a", InputSchema: json.RawMessage(`{"type":"object"}`)}, {Name: "b"}},
		Messages: []model.Message{
			userText("first"),
			{Role: "assistant", Content: []model.Block{{Type: model.BlockThinking, Thinking: "t", Signature: "s"}, toolUse}},
			result("t1"),
			{Role: "assistant", Content: []model.Block{{Type: model.BlockText, Text: "more"}, toolUse}},
			result("t2"),
		},
	}
	if _, err := m.Call(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	r := s.Requests()[0]
	marked := func(cc *modeltest.CacheControl) bool { return cc != nil && cc.Type == "ephemeral" }
	if r.CacheMarks() != 4 || !marked(r.Tools[1].CacheControl) || !marked(r.SystemBlocks[0].CacheControl) ||
		!marked(r.Messages[4].Content[0].CacheControl) || !marked(r.Messages[2].Content[0].CacheControl) {
		t.Fatalf("cache marks: %d; tools %+v system %+v\nmessages %s", r.CacheMarks(), r.Tools, r.SystemBlocks, r.Body)
	}

	// A first turn without tools or system: one mark, on the last block.
	req = &model.Request{Model: "c", MaxTokens: 10, CacheBreakpoints: true, Messages: []model.Message{
		{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: "a"}, {Type: model.BlockText, Text: "b"}}},
	}}
	if _, err := m.Call(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	r = s.Requests()[1]
	if r.CacheMarks() != 1 || !marked(r.Messages[0].Content[1].CacheControl) {
		t.Fatalf("cache marks %d in %s", r.CacheMarks(), r.Body)
	}
}

func TestIgnoresEnvironment(t *testing.T) {
	s, env := modeltest.NewServer(t), modeltest.NewServer(t)
	t.Setenv("ANTHROPIC_API_KEY", "sk-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "tok-env")
	t.Setenv("ANTHROPIC_BASE_URL", env.URL)
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-From-Env: 1")
	m := anthropic.New(anthropic.Config{APIKey: "sk-cfg", BaseURL: s.URL})
	if _, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.Requests(); len(got) != 1 || got[0].Header.Get("authorization") != "Bearer sk-cfg" || got[0].Header.Get("X-From-Env") != "" {
		t.Fatalf("requests %+v", got)
	}

	// Without credentials in the Config, the ones in the environment are not used.
	m = anthropic.New(anthropic.Config{BaseURL: s.URL})
	_, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil)
	if !errors.Is(err, model.ErrNoCredentials) {
		t.Fatalf("got %v, want ErrNoCredentials", err)
	}

	// Without a base URL in the Config, the requests go to the production API, not ANTHROPIC_BASE_URL.
	var hosts []string
	m = anthropic.New(anthropic.Config{APIKey: "sk-cfg", HTTPClient: &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		hosts = append(hosts, r.URL.Host)
		return nil, errors.New("no network in tests")
	})}})
	if _, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil); err == nil {
		t.Fatal("a call through a failing transport succeeded")
	}
	if len(hosts) != 1 || hosts[0] != "api.anthropic.com" {
		t.Fatalf("requests went to %v, want api.anthropic.com", hosts)
	}
	if n := len(env.Requests()); n != 0 {
		t.Fatalf("%d requests went to ANTHROPIC_BASE_URL", n)
	}
}

// roundTripper is an http.RoundTripper of a function.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestInvalidToolInput: a tool_use block whose input is not JSON fails the call before anything is sent.
func TestInvalidToolInput(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	_, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{{Role: "user", Content: []model.Block{
		{Type: model.BlockToolUse, ID: "t", Name: "x", Input: json.RawMessage(`{bad`)},
	}}}}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrInvalid {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	if len(s.Requests()) != 0 {
		t.Fatal("an invalid request was sent")
	}
}
