package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/model/openai"
)

func newModel(t *testing.T) (*openai.Model, *modeltest.Server) {
	t.Helper()
	s := modeltest.NewServer(t)
	return openai.New(openai.Config{APIKey: "sk-test", BaseURL: s.URL + "/v1"}), s
}

func userText(text string) model.Message {
	return model.Message{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: text}}}
}

func TestTextTurn(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	hold := make(chan struct{})
	s.Script(modeltest.Turn{
		Thinking: "hidden reasoning", Text: "Hello there, world.", Hold: hold,
		Usage: modeltest.Usage{InputTokens: 10, CacheReadInputTokens: 6, OutputTokens: 5},
	})
	var mu sync.Mutex
	var deltas []model.Delta
	resp, err := m.Call(context.Background(), &model.Request{
		Model: "gpt-test", System: "Be brief.", MaxTokens: 100, Messages: []model.Message{userText("hi")},
	}, func(d model.Delta) {
		mu.Lock()
		defer mu.Unlock()
		deltas = append(deltas, d)
		if len(deltas) == 2 {
			close(hold) // the first text arrived while the server still holds the rest
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 1 || resp.Content[0].Text != "Hello there, world." || resp.StopReason != "end_turn" {
		t.Fatalf("response %+v", resp)
	}
	if want := (apitype.SpanUsage{InputTokens: 10, CacheReadInputTokens: 6, OutputTokens: 5}); resp.Usage != want {
		t.Fatalf("usage %+v, want %+v", resp.Usage, want)
	}
	var text strings.Builder
	for _, d := range deltas[1:] {
		text.WriteString(d.Text)
	}
	if !deltas[0].Started || text.String() != "Hello there, world." || len(deltas) < 4 {
		t.Fatalf("deltas %+v", deltas)
	}
	r := s.Requests()[0]
	if r.Path != "/v1/chat/completions" || r.Model != "gpt-test" || r.System != "Be brief." || r.MaxTokens != 100 ||
		!r.Stream || !r.IncludeUsage || r.Header.Get("authorization") != "Bearer sk-test" {
		t.Fatalf("request %+v", r)
	}
	if len(r.ChatMessages) != 2 || r.ChatMessages[0].Role != "system" || r.ChatMessages[1].Role != "user" || r.LastUserText() != "hi" {
		t.Fatalf("messages %+v", r.ChatMessages)
	}
}

func TestToolRoundTrip(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	input := `{"command":"ls -la","env":{"A":"b"}}`
	s.Script(modeltest.Turn{Text: "Listing.", ToolUses: []modeltest.ToolUse{
		{ID: "call_1", Name: "bash", Input: input}, {ID: "call_2", Name: "read", Input: `{"path":"/a"}`},
	}})
	schema := json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)
	req := &model.Request{
		Model: "gpt", MaxTokens: 50, Messages: []model.Message{userText("list")},
		Tools: []model.ToolSpec{{Name: "bash", Description: "Run.", InputSchema: schema}},
	}
	resp, err := m.Call(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "tool_use" || len(resp.Content) != 3 || resp.Content[0].Text != "Listing." {
		t.Fatalf("response %+v", resp)
	}
	if tu := resp.Content[1]; tu.Type != model.BlockToolUse || tu.ID != "call_1" || tu.Name != "bash" || string(tu.Input) != input {
		t.Fatalf("tool use %+v (%s)", tu, tu.Input)
	}
	if tu := resp.Content[2]; tu.ID != "call_2" || tu.Name != "read" || string(tu.Input) != `{"path":"/a"}` {
		t.Fatalf("tool use %+v (%s)", tu, tu.Input)
	}
	tool := s.Requests()[0].Tools[0]
	if tool.Name != "bash" || tool.Description != "Run." || !strings.Contains(string(tool.InputSchema), `"required":["command"]`) {
		t.Fatalf("tool %+v %s", tool, tool.InputSchema)
	}

	img := &apitype.ImageSource{Type: "base64", MediaType: "image/png", Data: "iVBO"}
	req.Messages = append(req.Messages,
		model.Message{Role: "assistant", Content: append([]model.Block{{Type: model.BlockThinking, Thinking: "x", Signature: "s"}}, resp.Content...)},
		model.Message{Role: "user", Content: []model.Block{
			{Type: model.BlockToolResult, ToolUseID: "call_1", Content: []model.Block{{Type: model.BlockText, Text: "a"}, {Type: model.BlockText, Text: "b"}}},
			{Type: model.BlockToolResult, ToolUseID: "call_2", IsError: true, Content: []model.Block{{Type: model.BlockImage, Image: img}}},
			{Type: model.BlockText, Text: "look"}, {Type: model.BlockImage, Image: img},
		}})
	if _, err := m.Call(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	msgs := s.Requests()[1].ChatMessages
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

func TestErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		turn       modeltest.Turn
		kind       model.ErrorKind
		status     int
		retryAfter time.Duration
	}{
		{"overloaded", modeltest.Turn{Err: modeltest.Overloaded()}, model.ErrOverloaded, 529, 0},
		{"rate limited", modeltest.Turn{Err: modeltest.RateLimited(2 * time.Second)}, model.ErrRateLimited, 429, 2 * time.Second},
		{"quota", modeltest.Turn{Err: &modeltest.ErrorReply{Status: 429, Type: "insufficient_quota"}}, model.ErrAuth, 429, 0},
		{"server", modeltest.Turn{Err: modeltest.ServerError()}, model.ErrServer, 500, 0},
		{"context too long", modeltest.Turn{Err: modeltest.PromptTooLong()}, model.ErrContextTooLong, 400, 0},
		{"invalid", modeltest.Turn{Err: modeltest.Invalid("bad")}, model.ErrInvalid, 400, 0},
		{"unauthorized", modeltest.Turn{Err: &modeltest.ErrorReply{Status: 401}}, model.ErrAuth, 401, 0},
		{"error mid-stream", modeltest.Turn{Text: "a b", StreamErr: modeltest.ServerError()}, model.ErrServer, 0, 0},
		{"drop mid-stream", modeltest.Turn{Text: "a b", Disconnect: true}, model.ErrServer, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, s := newModel(t)
			s.Script(c.turn)
			_, err := m.Call(context.Background(), &model.Request{Model: "g", Messages: []model.Message{userText("x")}}, nil)
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("got %v, want a *model.Error", err)
			}
			if me.Kind != c.kind || me.Status != c.status || me.RetryAfter != c.retryAfter {
				t.Fatalf("got kind %d status %d retry-after %v (%v); want %d %d %v", me.Kind, me.Status, me.RetryAfter, err, c.kind, c.status, c.retryAfter)
			}
		})
	}
}

func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	s.Script(modeltest.Turn{Text: "never finished", Hold: make(chan struct{})})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	var cancelled time.Time
	_, err := m.Call(ctx, &model.Request{Model: "g", Messages: []model.Message{userText("x")}}, func(d model.Delta) {
		if d.Text != "" {
			once.Do(func() { cancelled = time.Now(); cancel() })
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if el := time.Since(cancelled); cancelled.IsZero() || el > time.Second {
		t.Fatalf("returned %v after the cancel", el)
	}
}

func TestNoCredentials(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	s := modeltest.NewServer(t)
	m := openai.New(openai.Config{BaseURL: s.URL + "/v1"})
	_, err := m.Call(context.Background(), &model.Request{Model: "g", Messages: []model.Message{userText("x")}}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrAuth || !errors.Is(err, model.ErrNoCredentials) {
		t.Fatalf("got %v, want ErrAuth wrapping ErrNoCredentials", err)
	}
	if len(s.Requests()) != 0 {
		t.Fatal("a request was sent without credentials")
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
