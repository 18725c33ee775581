package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/modeltest"
)

func newModel(t *testing.T) (*anthropic.Model, *modeltest.Server) {
	t.Helper()
	s := modeltest.NewServer(t)
	return anthropic.New(anthropic.Config{APIKey: "sk-test", BaseURL: s.URL}), s
}

func userText(text string) model.Message {
	return model.Message{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: text}}}
}

func TestTextTurn(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	hold := make(chan struct{})
	s.Script(modeltest.Turn{
		Text:  "Hello there, world.",
		Usage: modeltest.Usage{InputTokens: 12, OutputTokens: 5, CacheReadInputTokens: 3, CacheCreationInputTokens: 4},
		Hold:  hold,
	})
	var mu sync.Mutex
	var deltas []model.Delta
	onDelta := func(d model.Delta) {
		mu.Lock()
		defer mu.Unlock()
		deltas = append(deltas, d)
		if len(deltas) == 2 {
			close(hold) // the first text arrived while the server still holds the rest
		}
	}
	resp, err := m.Call(context.Background(), &model.Request{
		Model: "claude-test", System: "Be brief.", MaxTokens: 100, Messages: []model.Message{userText("hi")},
	}, onDelta)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 1 || resp.Content[0].Type != model.BlockText || resp.Content[0].Text != "Hello there, world." {
		t.Fatalf("content %+v", resp.Content)
	}
	want := apitype.SpanUsage{InputTokens: 12, OutputTokens: 5, CacheReadInputTokens: 3, CacheCreationInputTokens: 4}
	if resp.StopReason != "end_turn" || resp.Usage != want {
		t.Fatalf("stop %q usage %+v", resp.StopReason, resp.Usage)
	}
	if !deltas[0].Started || deltas[0].Type != model.BlockText {
		t.Fatalf("first delta %+v, want the block start", deltas[0])
	}
	var text strings.Builder
	for _, d := range deltas[1:] {
		text.WriteString(d.Text)
	}
	if text.String() != "Hello there, world." || len(deltas) < 4 {
		t.Fatalf("deltas %+v", deltas)
	}

	r := s.Requests()[0]
	if r.Model != "claude-test" || r.System != "Be brief." || r.MaxTokens != 100 || !r.Stream ||
		r.Header.Get("authorization") != "Bearer sk-test" || r.Thinking != nil || r.CacheMarks() != 0 {
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

func TestToolUseRoundTrip(t *testing.T) {
	t.Parallel()
	m, s := newModel(t)
	input := `{"command":"ls -la","timeout":30,"env":{"A":"b"}}`
	s.Script(modeltest.Turn{Text: "Listing.", ToolUses: []modeltest.ToolUse{{ID: "toolu_01", Name: "bash", Input: input}}})
	schema := json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"],"additionalProperties":false}`)
	req := &model.Request{
		Model: "c", MaxTokens: 100, Messages: []model.Message{userText("list files")},
		Tools: []model.ToolSpec{{Name: "bash", Description: "Run a command.", InputSchema: schema}},
	}
	resp, err := m.Call(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "tool_use" || len(resp.Content) != 2 {
		t.Fatalf("stop %q content %+v", resp.StopReason, resp.Content)
	}
	tu := resp.Content[1]
	if tu.Type != model.BlockToolUse || tu.ID != "toolu_01" || tu.Name != "bash" || string(tu.Input) != input {
		t.Fatalf("tool use %+v input %s", tu, tu.Input)
	}
	tool := s.Requests()[0].Tools[0]
	var gotSchema, wantSchema any
	if err := json.Unmarshal(tool.InputSchema, &gotSchema); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(schema, &wantSchema)
	if tool.Name != "bash" || tool.Description != "Run a command." || !jsonEqual(gotSchema, wantSchema) {
		t.Fatalf("tool %+v schema %s", tool, tool.InputSchema)
	}

	img := &apitype.ImageSource{Type: "base64", MediaType: "image/png", Data: "iVBORw0KGgo="}
	req.Messages = append(req.Messages, model.Message{Role: "assistant", Content: resp.Content}, model.Message{Role: "user", Content: []model.Block{
		{Type: model.BlockToolResult, ToolUseID: "toolu_01", IsError: true, Content: []model.Block{
			{Type: model.BlockText, Text: "exit status 1"}, {Type: model.BlockImage, Image: img},
		}},
	}})
	if _, err := m.Call(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	msgs := s.Requests()[1].Messages
	if got := msgs[1].Content[1]; got.Type != "tool_use" || got.ID != "toolu_01" || !jsonEqualRaw(t, got.Input, input) {
		t.Fatalf("tool_use sent back %+v", got)
	}
	res := msgs[2].Content[0]
	if res.Type != "tool_result" || res.ToolUseID != "toolu_01" || !res.IsError || len(res.Content) != 2 ||
		res.Content[0].Text != "exit status 1" || res.Content[1].Type != "image" ||
		!jsonEqualRaw(t, res.Content[1].Source, `{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}`) {
		t.Fatalf("tool_result sent %+v", res)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func jsonEqualRaw(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	return jsonEqual(g, w)
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
		{"rate limited", modeltest.Turn{Err: modeltest.RateLimited(1500 * time.Millisecond)}, model.ErrRateLimited, 429, 1500 * time.Millisecond},
		{"rate limited seconds", modeltest.Turn{Err: &modeltest.ErrorReply{Status: 429, RetryAfter: 0}}, model.ErrRateLimited, 429, 0},
		{"server", modeltest.Turn{Err: modeltest.ServerError()}, model.ErrServer, 500, 0},
		{"bad gateway", modeltest.Turn{Err: &modeltest.ErrorReply{Status: 502}}, model.ErrServer, 502, 0},
		{"prompt too long", modeltest.Turn{Err: modeltest.PromptTooLong()}, model.ErrContextTooLong, 400, 0},
		{"invalid", modeltest.Turn{Err: modeltest.Invalid("messages: roles must alternate")}, model.ErrInvalid, 400, 0},
		{"unauthorized", modeltest.Turn{Err: &modeltest.ErrorReply{Status: 401}}, model.ErrAuth, 401, 0},
		{"forbidden", modeltest.Turn{Err: &modeltest.ErrorReply{Status: 403}}, model.ErrAuth, 403, 0},
		{"overloaded mid-stream", modeltest.Turn{Text: "a b c", StreamErr: modeltest.Overloaded()}, model.ErrOverloaded, 0, 0},
		{"connection drop mid-stream", modeltest.Turn{Text: "a b c", Disconnect: true}, model.ErrServer, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, s := newModel(t)
			s.Script(c.turn)
			resp, err := m.Call(context.Background(), &model.Request{Model: "c", MaxTokens: 10, Messages: []model.Message{userText("x")}}, nil)
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("got %v, %v; want a *model.Error", resp, err)
			}
			if me.Kind != c.kind || me.Status != c.status || me.RetryAfter != c.retryAfter {
				t.Fatalf("got kind %d status %d retry-after %v (%v); want %d %d %v", me.Kind, me.Status, me.RetryAfter, err, c.kind, c.status, c.retryAfter)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: "http://" + addr})
	_, err = m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrServer || !me.Retryable() {
		t.Fatalf("got %v, want a retryable ErrServer", err)
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
	_, err := m.Call(ctx, &model.Request{Model: "c", MaxTokens: 10, Messages: []model.Message{userText("x")}}, func(d model.Delta) {
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
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "")
	s := modeltest.NewServer(t)
	m := anthropic.New(anthropic.Config{BaseURL: s.URL})
	_, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrAuth || !errors.Is(err, model.ErrNoCredentials) {
		t.Fatalf("got %v, want ErrAuth wrapping ErrNoCredentials", err)
	}
	if n := len(s.Requests()); n != 0 {
		t.Fatalf("%d requests sent without credentials", n)
	}
}

// TestIgnoresEnvironment: the adapter takes its credentials and endpoint from its Config alone; the command
// reads the environment.
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

func TestInvalidRequest(t *testing.T) {
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

// FuzzToolInput checks that any JSON tool input streamed in input_json_delta fragments comes back equal.
func FuzzToolInput(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":1}`, `{"s":"\u65e5\u672c\u8a9e \u00e9\u00e8"}`, `{"n":[1,2,{"x":null}],"b":true}`, `{"q":"\"\\\n"}`} {
		f.Add(seed)
	}
	s, err := modeltest.Start()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	m := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: s.URL})
	f.Fuzz(func(t *testing.T, input string) {
		var v map[string]any
		if json.Unmarshal([]byte(input), &v) != nil {
			t.Skip("not a JSON object")
		}
		s.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "t", Name: "f", Input: input}}})
		resp, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Content) != 1 || !jsonEqualRaw(t, resp.Content[0].Input, input) {
			t.Fatalf("got %+v, want input %s", resp.Content, input)
		}
	})
}
