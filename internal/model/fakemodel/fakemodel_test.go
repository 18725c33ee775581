package fakemodel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/model/fakemodel"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	Type string
	Data string
}

// readSSE parses a text/event-stream body.
func readSSE(t testing.TB, body io.Reader) []sseEvent {
	t.Helper()
	var events []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if cur.Data != "" || cur.Type != "" {
				events = append(events, cur)
			}
			cur = sseEvent{}
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			cur.Type = value
		case "data":
			cur.Data += value
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read stream: %v", err)
	}
	return events
}

func post(t testing.TB, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", "test-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// streamedText reassembles the text deltas of a Messages API stream.
func streamedText(t testing.TB, events []sseEvent) (text, stop string) {
	t.Helper()
	var sb strings.Builder
	for _, e := range events {
		var d struct {
			Type  string `json:"type"`
			Delta struct {
				Type       string `json:"type"`
				Text       string `json:"text"`
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(e.Data), &d); err != nil {
			t.Fatalf("event %s: %v", e.Type, err)
		}
		if d.Type != e.Type {
			t.Fatalf("event %q carries type %q", e.Type, d.Type)
		}
		if d.Delta.Type == "text_delta" {
			sb.WriteString(d.Delta.Text)
		}
		if d.Type == "message_delta" {
			stop = d.Delta.StopReason
		}
	}
	return sb.String(), stop
}

func TestMessagesStreamSequence(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.Script(fakemodel.Turn{
		Thinking: "let me think", Text: "hello there world",
		ToolUses: []fakemodel.ToolUse{{ID: "toolu_1", Name: "bash", Input: `{"command":"ls -la /tmp"}`}},
	})
	resp := post(t, s.URL+"/v1/messages", `{"model":"m","max_tokens":10,"stream":true,"system":"be brief",
		"messages":[{"role":"user","content":"hi"}]}`)
	if ct := resp.Header.Get("content-type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q", ct)
	}
	events := readSSE(t, resp.Body)
	var types []string
	for _, e := range events {
		if len(types) == 0 || types[len(types)-1] != e.Type {
			types = append(types, e.Type)
		}
	}
	want := "message_start ping content_block_start content_block_delta content_block_stop content_block_start " +
		"content_block_delta content_block_stop content_block_start content_block_delta content_block_stop " +
		"message_delta message_stop"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("event sequence:\n got %s\nwant %s", got, want)
	}
	text, stop := streamedText(t, events)
	if text != "hello there world" || stop != "tool_use" {
		t.Fatalf("text %q stop %q", text, stop)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].System != "be brief" || reqs[0].Messages[0].Content[0].Text != "hi" ||
		reqs[0].Header.Get("x-api-key") != "test-key" {
		t.Fatalf("recorded request %+v", reqs)
	}
}

func TestMessagesNonStreaming(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.Script(fakemodel.Turn{Text: "done", Usage: fakemodel.Usage{InputTokens: 7, OutputTokens: 2}})
	resp := post(t, s.URL+"/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	var msg struct {
		Type    string `json:"type"`
		Content []struct{ Type, Text string }
		Usage   struct {
			InputTokens int64 `json:"input_tokens"`
		}
		StopReason string `json:"stop_reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || len(msg.Content) != 1 || msg.Content[0].Text != "done" || msg.Usage.InputTokens != 7 ||
		msg.StopReason != "end_turn" {
		t.Fatalf("message %+v", msg)
	}
}

func TestErrorEnvelope(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.Script(fakemodel.Turn{Err: fakemodel.RateLimited(1500 * time.Millisecond)})
	resp := post(t, s.URL+"/v1/messages", `{"model":"m","max_tokens":1,"messages":[]}`)
	var env struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 429 || env.Type != "error" || env.Error.Type != "rate_limit_error" ||
		resp.Header.Get("retry-after") != "2" || resp.Header.Get("retry-after-ms") != "1500" {
		t.Fatalf("status %d headers %v body %+v", resp.StatusCode, resp.Header, env)
	}
}

func TestMatchAndDefault(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.Script(fakemodel.Turn{Text: "for b", Match: func(r *fakemodel.Request) bool { return r.LastUserText() == "b" }})
	ask := func(user string) string {
		resp := post(t, s.URL+"/v1/messages", `{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"`+user+`"}]}`)
		text, _ := streamedText(t, readSSE(t, resp.Body))
		return text
	}
	if got := ask("a"); got != "ok" {
		t.Fatalf("unmatched request got %q, want the default", got)
	}
	if got := ask("b"); got != "for b" {
		t.Fatalf("matching request got %q", got)
	}
	if s.Pending() != 0 {
		t.Fatalf("%d turns pending", s.Pending())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.WaitRequests(ctx, 2); err != nil {
		t.Fatal(err)
	}
}

func TestHoldReleasedByClose(t *testing.T) {
	t.Parallel()
	s, err := fakemodel.Start()
	if err != nil {
		t.Fatal(err)
	}
	s.Script(fakemodel.Turn{Text: "a b c", Hold: make(chan struct{})})
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(s.URL+"/v1/messages", "application/json",
			strings.NewReader(`{"model":"m","max_tokens":1,"stream":true,"messages":[]}`))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		errc <- err
	}()
	if err := s.WaitRequests(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	s.Close() // must not hang on the held reply
	<-errc
}

func TestChatStream(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.Script(fakemodel.Turn{Text: "hi you", ToolUses: []fakemodel.ToolUse{{ID: "call_1", Name: "f", Input: `{"x":1}`}},
		Usage: fakemodel.Usage{InputTokens: 3, OutputTokens: 4}})
	resp := post(t, s.URL+"/v1/chat/completions", `{"model":"gpt","stream":true,"stream_options":{"include_usage":true},
		"messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"q"}]}]}`)
	events := readSSE(t, resp.Body)
	if last := events[len(events)-1].Data; last != "[DONE]" {
		t.Fatalf("last event %q", last)
	}
	var text, args, finish string
	var usage int64
	for _, e := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string
					ToolCalls []struct{ Function struct{ Arguments string } } `json:"tool_calls"`
				}
				FinishReason string `json:"finish_reason"`
			}
			Usage *struct {
				TotalTokens int64 `json:"total_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(e.Data), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			text += ch.Delta.Content
			for _, tc := range ch.Delta.ToolCalls {
				args += tc.Function.Arguments
			}
			finish += ch.FinishReason
		}
		if c.Usage != nil {
			usage = c.Usage.TotalTokens
		}
	}
	if text != "hi you" || args != `{"x":1}` || finish != "tool_calls" || usage != 7 {
		t.Fatalf("text %q args %q finish %q usage %d", text, args, finish, usage)
	}
	r := s.Requests()[0]
	if r.System != "sys" || r.LastUserText() != "q" || !r.IncludeUsage {
		t.Fatalf("request %+v", r)
	}
}

// FuzzStreamedText checks that any text survives the split into deltas and the SSE framing.
func FuzzStreamedText(f *testing.F) {
	for _, seed := range []string{"", "ok", "a  b ", "line\nbreak\r\n", "data: x\n\nevent: y", "\u00e9 \u65e5\u672c"} {
		f.Add(seed)
	}
	s, err := fakemodel.Start()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	f.Fuzz(func(t *testing.T, text string) {
		want := strings.ToValidUTF8(text, "")
		if want == "" {
			want = "ok" // an empty turn streams no text; the default reply does
		}
		s.Script(fakemodel.Turn{Text: want})
		resp := post(t, s.URL+"/v1/messages", `{"model":"m","max_tokens":1,"stream":true,"messages":[]}`)
		got, _ := streamedText(t, readSSE(t, resp.Body))
		if got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
}

// FuzzDecodeRequest checks that any body is either decoded or answered with a 400, never a crash.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`)
	f.Add(`{"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"x"}]}`)
	f.Add(`{"messages":[{"content":7}]}`)
	s, err := fakemodel.Start()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	f.Fuzz(func(t *testing.T, body string) {
		resp := post(t, s.URL+"/v1/messages", body)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func TestLatency(t *testing.T) {
	t.Parallel()
	s := newServer(t, fakemodel.WithLatency(60*time.Millisecond, 10*time.Millisecond, 5*time.Millisecond))
	s.Script(fakemodel.Turn{Text: "one two three four"})
	start := time.Now()
	resp := post(t, s.URL+"/v1/messages", `{"model":"m","max_tokens":1,"stream":true,"messages":[]}`)
	events := readSSE(t, resp.Body)
	total := time.Since(start)
	text, _ := streamedText(t, events)
	// Four deltas: the first after 60ms+-5ms, the other three after 10ms+-5ms each.
	if text != "one two three four" || total < 70*time.Millisecond {
		t.Fatalf("text %q in %v, want at least 70ms", text, total)
	}
}

func TestLatencyRejectsNegative(t *testing.T) {
	t.Parallel()
	if _, err := fakemodel.Start(fakemodel.WithLatency(-time.Second, 0, 0)); err == nil {
		t.Fatal("Start accepted a negative latency")
	}
}

// newServer starts a fake server that the test's cleanup closes.
func newServer(t testing.TB, opts ...fakemodel.Option) *fakemodel.Server {
	t.Helper()
	s, err := fakemodel.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestResponder: WithResponder answers what no scripted turn matches from the request, a matching scripted turn
// still comes first, and no request is recorded.
func TestResponder(t *testing.T) {
	t.Parallel()
	s := newServer(t, fakemodel.WithResponder(func(r *fakemodel.Request) fakemodel.Turn {
		return fakemodel.Turn{Text: "re " + r.LastUserText()}
	}))
	s.Script(fakemodel.Turn{Text: "scripted", Match: func(r *fakemodel.Request) bool { return r.LastUserText() == "b" }})
	ask := func(user string) string {
		resp := post(t, s.URL+"/v1/messages", `{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"`+user+`"}]}`)
		text, _ := streamedText(t, readSSE(t, resp.Body))
		return text
	}
	for user, want := range map[string]string{"a": "re a", "b": "scripted", "c": "re c"} {
		if got := ask(user); got != want {
			t.Errorf("%q got %q, want %q", user, got, want)
		}
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests recorded, want none", n)
	}
}
