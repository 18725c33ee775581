package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// API is a wire protocol the fake server speaks.
type API int

const (
	// Messages is the Anthropic Messages API (POST /v1/messages).
	Messages API = iota + 1
	// Chat is OpenAI chat completions (POST /v1/chat/completions).
	Chat
)

// path is the API's request path on the fake server.
func (a API) path() string {
	if a == Chat {
		return "/v1/chat/completions"
	}
	return "/v1/messages"
}

// Adapter is a model adapter under test.
type Adapter struct {
	// API is the wire protocol the adapter speaks.
	API API
	// New returns the adapter calling the server at baseURL (a fake server's URL, or a closed port's) with apiKey;
	// an empty apiKey means no credentials.
	New func(baseURL, apiKey string) model.Model
	// Errors are more cases for the error mapping, specific to the adapter's provider.
	Errors []ErrorCase
}

// ErrorCase is a scripted failure and the model.Error it must map to.
type ErrorCase struct {
	Name       string
	Turn       Turn
	Kind       model.ErrorKind
	Status     int           // the HTTP status; 0 for failures after the stream started
	RetryAfter time.Duration // the retry-after the adapter reports
}

// Run is the conformance suite of model adapters: each runs it against the fake server, and keeps in its own
// tests only what is specific to its provider (the mapping of a request to the wire, options of its own).
func Run(t *testing.T, a Adapter) {
	t.Helper()
	if a.API != Messages && a.API != Chat || a.New == nil {
		t.Fatalf("modeltest: Adapter needs an API and New")
	}
	tests := []struct {
		name string
		run  func(*testing.T, Adapter)
	}{
		{"TextTurn", testTextTurn},
		{"ToolUse", testToolUse},
		{"StopReasons", testStopReasons},
		{"Errors", testErrors},
		{"ConnectionRefused", testConnectionRefused},
		{"CancelMidStream", testCancelMidStream},
		{"NoCredentials", testNoCredentials},
		{"InvalidRequest", testInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, a)
		})
	}
}

// FuzzToolInput checks that any JSON tool input, streamed in fragments, comes back equal.
func FuzzToolInput(f *testing.F, a Adapter) {
	for _, seed := range []string{`{}`, `{"a":1}`, `{"s":"\u65e5\u672c\u8a9e \u00e9\u00e8"}`, `{"n":[1,2,{"x":null}],"b":true}`, `{"q":"\"\\\n"}`} {
		f.Add(seed)
	}
	s := NewServer(f)
	m := a.New(s.URL, "k")
	f.Fuzz(func(t *testing.T, input string) {
		var v map[string]any
		if json.Unmarshal([]byte(input), &v) != nil {
			t.Skip("not a JSON object")
		}
		s.Script(Turn{ToolUses: []ToolUse{{ID: "t", Name: "f", Input: input}}})
		resp, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Content) != 1 || !JSONEqual(t, resp.Content[0].Input, input) {
			t.Fatalf("got %+v, want input %s", resp.Content, input)
		}
	})
}

func userText(text string) model.Message {
	return model.Message{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: text}}}
}

// testTextTurn: a streamed text answer, its deltas arriving while the server still holds the rest, its usage
// and stop reason, and the request's basic fields.
func testTextTurn(t *testing.T, a Adapter) {
	s := NewServer(t)
	m := a.New(s.URL, "sk-test")
	usage := Usage{InputTokens: 12, OutputTokens: 5, CacheReadInputTokens: 3}
	if a.API == Messages {
		usage.CacheCreationInputTokens = 4 // chat completions report no cache writes
	}
	hold := make(chan struct{})
	s.Script(Turn{Text: "Hello there, world.", Usage: usage, Hold: hold})
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
		Model: "model-test", System: "Be brief.", MaxTokens: 100, Messages: []model.Message{userText("hi")},
	}, onDelta)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 1 || resp.Content[0].Type != model.BlockText || resp.Content[0].Text != "Hello there, world." {
		t.Fatalf("content %+v", resp.Content)
	}
	want := apitype.SpanUsage{InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens,
		CacheReadInputTokens: usage.CacheReadInputTokens, CacheCreationInputTokens: usage.CacheCreationInputTokens}
	if resp.StopReason != "end_turn" || resp.Usage != want {
		t.Fatalf("stop %q usage %+v, want end_turn %+v", resp.StopReason, resp.Usage, want)
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
	if r.Path != a.API.path() || r.Model != "model-test" || r.System != "Be brief." || r.MaxTokens != 100 || !r.Stream ||
		r.Header.Get("authorization") != "Bearer sk-test" || r.LastUserText() != "hi" {
		t.Fatalf("request %+v", r)
	}
}

// testToolUse: tool calls come back as tool_use blocks with their input as sent, and tools go out with their
// definitions.
func testToolUse(t *testing.T, a Adapter) {
	s := NewServer(t)
	m := a.New(s.URL, "sk-test")
	input := `{"command":"ls -la","timeout":30,"env":{"A":"b"}}`
	s.Script(Turn{Text: "Listing.", ToolUses: []ToolUse{
		{ID: "toolu_01", Name: "bash", Input: input}, {ID: "toolu_02", Name: "read", Input: `{"path":"/a"}`},
	}})
	schema := json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"],"additionalProperties":false}`)
	req := &model.Request{
		Model: "c", MaxTokens: 100, Messages: []model.Message{userText("list files")},
		Tools: []model.ToolSpec{{Name: "bash", Description: "Run a command.", InputSchema: schema}},
	}
	resp, err := m.Call(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "tool_use" || len(resp.Content) != 3 || resp.Content[0].Type != model.BlockText ||
		resp.Content[0].Text != "Listing." {
		t.Fatalf("stop %q content %+v", resp.StopReason, resp.Content)
	}
	if tu := resp.Content[1]; tu.Type != model.BlockToolUse || tu.ID != "toolu_01" || tu.Name != "bash" || string(tu.Input) != input {
		t.Fatalf("tool use %+v input %s", tu, tu.Input)
	}
	if tu := resp.Content[2]; tu.Type != model.BlockToolUse || tu.ID != "toolu_02" || tu.Name != "read" || string(tu.Input) != `{"path":"/a"}` {
		t.Fatalf("tool use %+v input %s", tu, tu.Input)
	}
	tools := s.Requests()[0].Tools
	if len(tools) != 1 || tools[0].Name != "bash" || tools[0].Description != "Run a command." || !JSONEqual(t, tools[0].InputSchema, string(schema)) {
		t.Fatalf("tools %+v", tools)
	}
}

// testStopReasons: each stop reason of the port comes through (the fake maps them to the wire's own).
func testStopReasons(t *testing.T, a Adapter) {
	s := NewServer(t)
	m := a.New(s.URL, "sk-test")
	for _, stop := range []string{"end_turn", "max_tokens", "refusal"} {
		s.Script(Turn{Text: "cut", StopReason: stop})
		resp, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil)
		if err != nil {
			t.Fatalf("%s: %v", stop, err)
		}
		if resp.StopReason != stop || len(resp.Content) != 1 || resp.Content[0].Text != "cut" {
			t.Fatalf("%s: response %+v", stop, resp)
		}
	}
}

// errorCases are the failures every provider reports the same way.
var errorCases = []ErrorCase{
	{"overloaded", Turn{Err: Overloaded()}, model.ErrOverloaded, 529, 0},
	{"rate limited", Turn{Err: RateLimited(1500 * time.Millisecond)}, model.ErrRateLimited, 429, 1500 * time.Millisecond},
	{"rate limited seconds", Turn{Err: &ErrorReply{Status: 429, RetryAfter: 2 * time.Second}}, model.ErrRateLimited, 429, 2 * time.Second},
	{"rate limited without retry-after", Turn{Err: &ErrorReply{Status: 429}}, model.ErrRateLimited, 429, 0},
	{"server", Turn{Err: ServerError()}, model.ErrServer, 500, 0},
	{"bad gateway", Turn{Err: &ErrorReply{Status: 502}}, model.ErrServer, 502, 0},
	{"prompt too long", Turn{Err: PromptTooLong()}, model.ErrContextTooLong, 400, 0},
	{"invalid", Turn{Err: Invalid("messages: roles must alternate")}, model.ErrInvalid, 400, 0},
	{"unauthorized", Turn{Err: &ErrorReply{Status: 401}}, model.ErrAuth, 401, 0},
	{"forbidden", Turn{Err: &ErrorReply{Status: 403}}, model.ErrAuth, 403, 0},
	{"payment required", Turn{Err: &ErrorReply{Status: 402}}, model.ErrBilling, 402, 0},
	{"overloaded mid-stream", Turn{Text: "a b c", StreamErr: Overloaded()}, model.ErrOverloaded, 0, 0},
	{"error mid-stream", Turn{Text: "a b c", StreamErr: ServerError()}, model.ErrServer, 0, 0},
	{"connection drop mid-stream", Turn{Text: "a b c", Disconnect: true}, model.ErrServer, 0, 0},
}

// testErrors: API errors map to model.Error kinds, with the status and the retry-after.
func testErrors(t *testing.T, a Adapter) {
	for _, c := range append(errorCases[:len(errorCases):len(errorCases)], a.Errors...) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			s := NewServer(t)
			m := a.New(s.URL, "sk-test")
			s.Script(c.Turn)
			resp, err := m.Call(context.Background(), &model.Request{Model: "c", MaxTokens: 10, Messages: []model.Message{userText("x")}}, nil)
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("got %v, %v; want a *model.Error", resp, err)
			}
			if me.Kind != c.Kind || me.Status != c.Status || me.RetryAfter != c.RetryAfter {
				t.Fatalf("got kind %d status %d retry-after %v (%v); want %d %d %v", me.Kind, me.Status, me.RetryAfter, err, c.Kind, c.Status, c.RetryAfter)
			}
		})
	}
}

// testConnectionRefused: an unreachable server is a retryable ErrServer.
func testConnectionRefused(t *testing.T, a Adapter) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := a.New("http://"+addr, "k")
	_, err = m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrServer || !me.Retryable() {
		t.Fatalf("got %v, want a retryable ErrServer", err)
	}
}

// testCancelMidStream: cancelling the context ends a streaming call at once, with the context's error.
func testCancelMidStream(t *testing.T, a Adapter) {
	s := NewServer(t)
	m := a.New(s.URL, "sk-test")
	s.Script(Turn{Text: "never finished", Hold: make(chan struct{})})
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

// testNoCredentials: without credentials, a call fails with ErrAuth wrapping ErrNoCredentials, and nothing is
// sent.
func testNoCredentials(t *testing.T, a Adapter) {
	s := NewServer(t)
	m := a.New(s.URL, "")
	_, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")}}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrAuth || !errors.Is(err, model.ErrNoCredentials) {
		t.Fatalf("got %v, want ErrAuth wrapping ErrNoCredentials", err)
	}
	if n := len(s.Requests()); n != 0 {
		t.Fatalf("%d requests sent without credentials", n)
	}
}

// testInvalidRequest: a request the adapter cannot encode fails with ErrInvalid, and nothing is sent.
func testInvalidRequest(t *testing.T, a Adapter) {
	s := NewServer(t)
	m := a.New(s.URL, "sk-test")
	_, err := m.Call(context.Background(), &model.Request{Model: "c", Messages: []model.Message{userText("x")},
		Tools: []model.ToolSpec{{Name: "bad", InputSchema: json.RawMessage(`{bad`)}}}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrInvalid {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	if n := len(s.Requests()); n != 0 {
		t.Fatalf("%d invalid requests sent", n)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// JSONEqual reports whether got and want are the same JSON value; it fails the test if either is not JSON.
func JSONEqual(t testing.TB, got json.RawMessage, want string) bool {
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
