// Package modeltest is the test kit of the model port: the scripted fake model API of fakemodel with test
// helpers (NewServer closes the server when the test ends), and Run, the conformance suite every model adapter
// passes against that fake.
//
// The types and constructors are fakemodel's, re-exported here so that a test needs one import. Code that ships
// (corral bench) uses fakemodel directly: this package imports testing.
package modeltest

import (
	"testing"
	"time"

	"github.com/corralhq/corral/internal/model/fakemodel"
)

// The fake server and its scripting vocabulary; see package fakemodel.
type (
	// Server is a running fake model API.
	Server = fakemodel.Server
	// Option configures a Server.
	Option = fakemodel.Option
	// Timing is when the server received one request and when it finished answering it.
	Timing = fakemodel.Timing
	// Turn is one scripted reply.
	Turn = fakemodel.Turn
	// ToolUse is one tool_use block of a scripted reply.
	ToolUse = fakemodel.ToolUse
	// ErrorReply is a scripted HTTP error, sent in the provider's error envelope.
	ErrorReply = fakemodel.ErrorReply
	// Usage is the token usage a scripted reply reports.
	Usage = fakemodel.Usage
	// Request is one request the server received, decoded.
	Request = fakemodel.Request
	// Message is one message of a Messages API request.
	Message = fakemodel.Message
	// Block is one content block of a Messages API message.
	Block = fakemodel.Block
	// Tool is one tool definition of a request.
	Tool = fakemodel.Tool
	// Thinking is a Messages API request's thinking setting.
	Thinking = fakemodel.Thinking
	// CacheControl is a Messages API cache_control mark.
	CacheControl = fakemodel.CacheControl
	// ChatMessage is one message of a chat completions request.
	ChatMessage = fakemodel.ChatMessage
	// ChatToolCall is one tool call of a chat completions assistant message.
	ChatToolCall = fakemodel.ChatToolCall
)

// NewServer starts a fake server that t.Cleanup closes.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := fakemodel.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Start starts a fake server that the caller closes (fakemodel.Start), for fuzz targets and examples.
func Start(opts ...Option) (*Server, error) { return fakemodel.Start(opts...) }

// WithObserver calls observe after each request is answered (fakemodel.WithObserver).
func WithObserver(observe func(Timing)) Option { return fakemodel.WithObserver(observe) }

// WithResponder answers the requests no scripted turn matches with respond's turn, recording none of them
// (fakemodel.WithResponder).
func WithResponder(respond func(*Request) Turn) Option { return fakemodel.WithResponder(respond) }

// WithLatency makes replies take time (fakemodel.WithLatency).
func WithLatency(ttft, perToken, jitter time.Duration) Option {
	return fakemodel.WithLatency(ttft, perToken, jitter)
}

// Overloaded is a 529 overloaded_error.
func Overloaded() *ErrorReply { return fakemodel.Overloaded() }

// RateLimited is a 429 rate_limit_error with a retry-after.
func RateLimited(retryAfter time.Duration) *ErrorReply { return fakemodel.RateLimited(retryAfter) }

// ServerError is a 500 api_error.
func ServerError() *ErrorReply { return fakemodel.ServerError() }

// Invalid is a 400 invalid_request_error with the message.
func Invalid(message string) *ErrorReply { return fakemodel.Invalid(message) }

// PromptTooLong is the 400 invalid_request_error the API answers when the prompt exceeds the context window.
func PromptTooLong() *ErrorReply { return fakemodel.PromptTooLong() }
