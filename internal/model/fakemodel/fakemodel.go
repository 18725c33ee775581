// Package fakemodel is a scripted fake of the Anthropic Messages API (and of OpenAI chat completions) on a
// local HTTP server. It speaks the real wire format, streaming and not, so the real SDK client code runs against
// it: script the replies with Server.Script, point an adapter at Server.URL, then assert on Server.Requests.
//
// It imports neither testing nor net/http/httptest, so that the shipped binary can link it (corral bench drives
// the real brain against it). Tests use it through modeltest, which adds the test-kit helpers.
package fakemodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Server is a running fake model API. Its zero value is not usable; use Start (in tests, modeltest.NewServer).
type Server struct {
	// URL is the base URL, e.g. http://127.0.0.1:port, for an SDK's base URL option.
	URL string

	cfg      config
	srv      *http.Server
	handlers sync.WaitGroup // requests being answered
	served   chan struct{}  // closed when srv.Serve has returned
	done     chan struct{}  // closed by Close: releases held and sleeping handlers
	once     sync.Once

	mu       sync.Mutex
	closing  bool // Close has begun
	turns    []Turn
	requests []Request
	arrived  chan struct{} // closed and replaced on every request
	nextID   int
}

// Option configures a Server.
type Option func(*config)

type config struct {
	ttft, perToken, jitter time.Duration
	observe                func(Timing)
	respond                func(*Request) Turn // also: keep no record of the requests
}

// WithResponder answers every request no scripted turn matches with respond's turn (instead of the default
// "ok"), and keeps no record of the requests (Requests is empty): a model for long runs whose answers follow
// from the conversation. respond runs under the server's lock: it must not call the Server's methods.
func WithResponder(respond func(*Request) Turn) Option {
	return func(c *config) { c.respond = respond }
}

// Timing is when the server received one request and when it finished answering it: the fake model's own share
// of a call's latency.
type Timing struct {
	Request  *Request
	Received time.Time // the handler started (request headers read)
	Done     time.Time // the handler returned (last byte written and flushed)
}

// WithObserver calls observe after each request is answered (or abandoned), from the request's goroutine. For
// benchmarks that subtract the fake model's own time from an end-to-end latency.
func WithObserver(observe func(Timing)) Option {
	return func(c *config) { c.observe = observe }
}

// observed reports a request's timing to the observer, if any.
func (s *Server) observed(req *Request, received time.Time) {
	if s.cfg.observe != nil && req != nil {
		s.cfg.observe(Timing{Request: req, Received: received, Done: time.Now()})
	}
}

// WithLatency makes streamed replies wait ttft before the first content delta and perToken before each later
// one, each wait varied by up to +-jitter. Non-streaming replies wait ttft plus perToken per token.
func WithLatency(ttft, perToken, jitter time.Duration) Option {
	return func(c *config) { c.ttft, c.perToken, c.jitter = ttft, perToken, jitter }
}

// Turn is one scripted reply.
type Turn struct {
	Text     string // streamed in several deltas (split after spaces)
	Thinking string // a thinking block first, with Signature
	// Signature of the thinking block; default: derived from Thinking.
	Signature string
	ToolUses  []ToolUse // tool_use blocks after the text
	// ServerBlocks are server tool blocks (server_tool_use, web_search_tool_result), complete JSON objects,
	// sent after the thinking and before the text; a server_tool_use's input is streamed as input_json_delta.
	ServerBlocks []string
	// StopReason is end_turn by default, or tool_use when ToolUses is set.
	StopReason string
	// Usage is reported as is; when zero, input tokens are estimated from the request size (bytes/4) and
	// output tokens are the number of streamed deltas.
	Usage Usage
	Err   *ErrorReply // answer with this HTTP error instead (after Hold, if set)
	// Hold, after the first text delta, blocks until closed or until the client goes away: for interrupt and
	// crash tests. A turn without text holds after its first delta of any kind, or before the end of the
	// stream when it has none; a non-streaming reply holds before answering.
	Hold <-chan struct{}
	// StreamErr, when set on a streamed reply, sends an error event where Hold applies (after it) and ends the
	// stream, the way the API reports errors (overloaded_error) that happen mid-stream.
	StreamErr *ErrorReply
	// Disconnect drops the connection where Hold applies (after it), without ending the stream.
	Disconnect bool
	// Match, if set, makes only matching requests pop this turn; the others pass it by. It runs under the
	// server's lock: it must not call the Server's methods.
	Match func(r *Request) bool
}

// ToolUse is one tool_use block of a scripted reply.
type ToolUse struct {
	ID    string // default: toolu_<n>
	Name  string
	Input string // JSON; default {}
}

// ErrorReply is a scripted HTTP error, sent in the provider's error envelope.
type ErrorReply struct {
	Status int // HTTP status; default 500
	// Type is the Anthropic error type; default from Status (overloaded_error for 529, rate_limit_error for
	// 429, api_error for 5xx, invalid_request_error for 400, authentication_error for 401, ...).
	Type    string
	Message string // default: a message like the API's
	// RetryAfter, if set, is sent as retry-after (whole seconds, rounded up) and retry-after-ms.
	RetryAfter time.Duration
}

// Usage is the token usage a scripted reply reports.
type Usage struct {
	InputTokens, OutputTokens, CacheCreationInputTokens, CacheReadInputTokens int64
	// WebSearchRequests is reported as usage.server_tool_use.web_search_requests (Messages API) when set.
	WebSearchRequests int64
}

// Overloaded is a 529 overloaded_error.
func Overloaded() *ErrorReply { return &ErrorReply{Status: 529} }

// RateLimited is a 429 rate_limit_error with a retry-after.
func RateLimited(retryAfter time.Duration) *ErrorReply {
	return &ErrorReply{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}
}

// ServerError is a 500 api_error.
func ServerError() *ErrorReply { return &ErrorReply{Status: http.StatusInternalServerError} }

// Invalid is a 400 invalid_request_error with the message.
func Invalid(message string) *ErrorReply {
	return &ErrorReply{Status: http.StatusBadRequest, Message: message}
}

// PromptTooLong is the 400 invalid_request_error the API answers when the prompt exceeds the context window.
func PromptTooLong() *ErrorReply {
	return Invalid("prompt is too long: 215000 tokens > 200000 maximum")
}

// Start starts a fake server on a free port of 127.0.0.1; Close stops it.
func Start(opts ...Option) (*Server, error) {
	s := &Server{done: make(chan struct{}), served: make(chan struct{}), arrived: make(chan struct{})}
	for _, o := range opts {
		o(&s.cfg)
	}
	if s.cfg.ttft < 0 || s.cfg.perToken < 0 || s.cfg.jitter < 0 {
		return nil, errors.New("fakemodel: negative latency")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakemodel: %w", err)
	}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			if s.closing {
				s.mu.Unlock()
				panic(http.ErrAbortHandler)
			}
			s.handlers.Add(1)
			s.mu.Unlock()
			defer s.handlers.Done()
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	s.URL = "http://" + ln.Addr().String()
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln) // ErrServerClosed once Close runs
	}()
	return s, nil
}

// Close stops the server, releasing held replies first, and returns once every request has been answered or
// abandoned. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		s.mu.Lock()
		s.closing = true // no handler starts after this
		s.mu.Unlock()
		close(s.done)
		_ = s.srv.Close() // closes the listener and every connection, which ends the handlers' contexts
		<-s.served
		s.handlers.Wait()
	})
}

// Script queues replies; each request pops the next one (see Turn.Match). When none is left, the server answers
// "ok".
func (s *Server) Script(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns = append(s.turns, turns...)
}

// Pending returns how many scripted turns no request has popped yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.turns)
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// DropRequests forgets the requests received so far (Requests then returns only later ones), so that a long
// benchmark does not hold every request body.
func (s *Server) DropRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
}

// WaitRequests blocks until n requests have arrived or ctx is done.
func (s *Server) WaitRequests(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, arrived := len(s.requests), s.arrived
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return fmt.Errorf("fakemodel: %d of %d requests arrived: %w", got, n, ctx.Err())
		}
	}
}

// receive decodes and records a request and pops its turn.
func (s *Server) receive(w http.ResponseWriter, r *http.Request, decode func([]byte, *Request) error) (*Request, Turn, int, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, Turn{}, 0, false
	}
	req := &Request{Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	if err := decode(body, req); err != nil {
		reply := Invalid(fmt.Sprintf("malformed request body: %v", err))
		if req.Path == chatPath {
			writeChatError(w, reply)
		} else {
			writeMessagesError(w, reply)
		}
		return nil, Turn{}, 0, false
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.respond == nil {
		s.requests = append(s.requests, *req)
	}
	close(s.arrived)
	s.arrived = make(chan struct{})
	s.nextID++
	for i, t := range s.turns {
		if t.Match == nil || t.Match(req) {
			s.turns = append(s.turns[:i:i], s.turns[i+1:]...)
			return req, t, s.nextID, true
		}
	}
	if s.cfg.respond != nil {
		return req, s.cfg.respond(req), s.nextID, true
	}
	return req, Turn{Text: "ok"}, s.nextID, true
}

// hold blocks until ch is closed (nil: no wait), the client goes away or the server closes.
func (s *Server) hold(ctx context.Context, ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

// sleep waits d varied by the jitter; false if the client or the server went away.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if j := s.cfg.jitter; j > 0 {
		d += time.Duration(rand.Int64N(int64(2*j)+1)) - j
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

// tokens splits text into streamed deltas: one per word, each keeping its trailing spaces.
func tokens(text string) []string {
	if text == "" {
		return nil
	}
	var out []string
	for part := range strings.SplitAfterSeq(text, " ") {
		if part == "" {
			continue
		}
		if n := len(out); n > 0 && strings.TrimSpace(part) == "" {
			out[n-1] += part
			continue
		}
		out = append(out, part)
	}
	return out
}

// jsonTokens splits a JSON text into chunks of about 8 bytes, the way input_json_delta arrives, never inside a
// UTF-8 sequence.
func jsonTokens(s string) []string {
	var out []string
	for len(s) > 8 {
		n := 8
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// usageFor fills a zero Usage with estimates.
func usageFor(t Turn, req *Request, deltas int) Usage {
	if t.Usage != (Usage{}) {
		return t.Usage
	}
	return Usage{InputTokens: max(1, int64(len(req.Body)/4)), OutputTokens: int64(max(1, deltas))}
}

// signature is the default thinking signature.
func signature(t Turn) string {
	if t.Signature != "" {
		return t.Signature
	}
	if t.Thinking == "" {
		return ""
	}
	return fmt.Sprintf("sig-%08x", hash(t.Thinking))
}

func hash(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// stopReason is the turn's Anthropic stop reason.
func stopReason(t Turn) string {
	switch {
	case t.StopReason != "":
		return t.StopReason
	case len(t.ToolUses) > 0:
		return "tool_use"
	default:
		return "end_turn"
	}
}

// toolInput is the tool input JSON, {} when empty.
func toolInput(u ToolUse) string {
	if strings.TrimSpace(u.Input) == "" {
		return "{}"
	}
	return u.Input
}

// toolID is the tool use ID, generated when empty.
func toolID(u ToolUse, reqID, i int) string {
	if u.ID != "" {
		return u.ID
	}
	return fmt.Sprintf("toolu_%03d_%d", reqID, i)
}

// normalize fills an ErrorReply's defaults.
func (e ErrorReply) normalize() ErrorReply {
	if e.Status == 0 {
		e.Status = http.StatusInternalServerError
	}
	if e.Type == "" {
		e.Type = errorType(e.Status)
	}
	if e.Message == "" {
		e.Message = errorMessage(e.Type)
	}
	return e
}

func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	default:
		return "api_error"
	}
}

func errorMessage(typ string) string {
	switch typ {
	case "overloaded_error":
		return "Overloaded"
	case "rate_limit_error":
		return "Number of request tokens has exceeded your per-minute rate limit"
	case "authentication_error":
		return "invalid x-api-key"
	case "invalid_request_error":
		return "invalid request"
	default:
		return "Internal server error"
	}
}

// setRetryAfter writes the retry-after headers.
func setRetryAfter(h http.Header, d time.Duration) {
	if d <= 0 {
		return
	}
	h.Set("retry-after", fmt.Sprint(int64((d+time.Second-1)/time.Second)))
	h.Set("retry-after-ms", fmt.Sprint(d.Milliseconds()))
}

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
