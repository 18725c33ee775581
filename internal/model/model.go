// Package model is the port to language models: one streamed call that takes a provider-neutral request and
// returns the model's content blocks. Adapters: anthropic (the official SDK) and openai (any OpenAI-compatible
// chat completions endpoint, through the official openai-go SDK). fakemodel is a scripted fake of both APIs on
// a local HTTP server; modeltest is the conformance suite both adapters run.
package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// ResponseHeaderTimeout bounds an adapter's wait for response headers with DefaultHTTPClient, as the official
// SDKs' own default does; a stream's body is not bounded (the caller's context is).
const ResponseHeaderTimeout = 10 * time.Minute

// DefaultHTTPClient is the HTTP client of an adapter given none: a clone of the default transport that waits
// at most ResponseHeaderTimeout for the response headers.
func DefaultHTTPClient() *http.Client {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return &http.Client{Transport: http.DefaultTransport}
	}
	t = t.Clone()
	t.ResponseHeaderTimeout = ResponseHeaderTimeout
	return &http.Client{Transport: t}
}

// Model calls a language model.
type Model interface {
	// Call sends the request, streams the answer (onDelta, if set, sees text and thinking as they arrive) and
	// returns the complete response. Errors are *Error when the provider answered with one.
	Call(ctx context.Context, req *Request, onDelta func(Delta)) (*Response, error)
}

// Request is a provider-neutral model request.
type Request struct {
	Model     string
	System    string
	Messages  []Message
	Tools     []ToolSpec
	MaxTokens int
	// ThinkingBudget enables extended thinking with this many tokens (0 = off).
	ThinkingBudget int
	// CacheBreakpoints asks the adapter to mark the stable prefix for prompt caching (providers without
	// caching ignore it).
	CacheBreakpoints bool
}

// Message is one turn of the conversation.
type Message struct {
	Role    string // user | assistant
	Content []Block
}

// Block types.
const (
	BlockText             = "text"
	BlockImage            = "image"
	BlockDocument         = "document"
	BlockThinking         = "thinking"
	BlockRedactedThinking = "redacted_thinking"
	BlockToolUse          = "tool_use"
	BlockToolResult       = "tool_result"
	// A server tool's call and result, which the provider ran itself (Anthropic's web search): kept as the
	// provider sent them (Raw) and sent back as is in the assistant turn.
	BlockServerToolUse       = "server_tool_use"
	BlockWebSearchToolResult = "web_search_tool_result"
)

// Block is one content block of a message.
type Block struct {
	Type string

	Text string // text

	Image *apitype.ImageSource // image
	// Document is a document block's source: a base64 PDF (type "base64", media_type "application/pdf"),
	// which the model reads as text and page images.
	Document *apitype.ImageSource

	Thinking  string // thinking
	Signature string // thinking
	Data      string // redacted_thinking

	ID    string          // tool_use
	Name  string          // tool_use
	Input json.RawMessage // tool_use

	ToolUseID string  // tool_result
	IsError   bool    // tool_result
	Content   []Block // tool_result: text, image and document blocks

	Raw json.RawMessage // server_tool_use, web_search_tool_result: the block as the provider sent it
}

// ToolSpec describes a tool the model may call.
type ToolSpec struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	// Server, when set, is the definition of a tool the provider runs itself (Anthropic's
	// {"type":"web_search_20250305","name":"web_search",...}), sent as is; Description and InputSchema are unused.
	// An adapter whose provider has no server tools leaves it out.
	Server json.RawMessage
}

// Response is a complete model answer.
type Response struct {
	Content    []Block
	StopReason string // end_turn | tool_use | max_tokens | refusal | stop_sequence | pause_turn
	Usage      apitype.SpanUsage
	// CacheCreation1h is the part of Usage.CacheCreationInputTokens written with the 1-hour lifetime (priced
	// apart); the rest had the default 5 minutes.
	CacheCreation1h int64
	// ServerToolUse counts the server-executed tools the provider ran during the request.
	ServerToolUse apitype.ServerToolUse
}

// Delta is a fragment of streamed output.
type Delta struct {
	Index   int    // content block index
	Type    string // text | thinking
	Text    string
	Started bool // the block at Index started (Text empty)
}

// ErrorKind classifies a model error so the brain knows whether to retry.
type ErrorKind int

// Error kinds.
const (
	ErrUnknown        ErrorKind = iota
	ErrOverloaded               // 529, overloaded_error: retry
	ErrRateLimited              // 429: retry after RetryAfter
	ErrServer                   // 5xx, connection reset: retry
	ErrInvalid                  // 400: the request is wrong; do not retry
	ErrAuth                     // 401/403, or no credentials: do not retry
	ErrContextTooLong           // the prompt is too long: compact, then retry
	ErrBilling                  // 402, billing_error, insufficient_quota: the account cannot pay; terminal
)

// Error is a failed model call.
type Error struct {
	Kind       ErrorKind
	Status     int           // HTTP status, 0 if none
	RetryAfter time.Duration // from the provider, 0 if none
	Err        error
}

func (e *Error) Error() string { return fmt.Sprintf("model: %v", e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the call may succeed if made again.
func (e *Error) Retryable() bool {
	return e.Kind == ErrOverloaded || e.Kind == ErrRateLimited || e.Kind == ErrServer
}

// StatusKind classifies a model provider's HTTP error status: the rule every adapter falls back on when the
// error's body does not say more (an adapter reads its provider's error type first).
func StatusKind(status int) ErrorKind {
	switch {
	case status == 529:
		return ErrOverloaded
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status == http.StatusRequestTimeout || status >= 500:
		return ErrServer
	case status == http.StatusPaymentRequired:
		return ErrBilling
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ErrAuth
	case status == http.StatusRequestEntityTooLarge:
		return ErrContextTooLong
	case status >= 400 && status < 500:
		return ErrInvalid
	}
	return ErrUnknown
}

// ErrNoCredentials is returned (in an *Error of kind ErrAuth) when no provider credentials are configured.
var ErrNoCredentials = errors.New("no model credentials configured (set ANTHROPIC_API_KEY, or OPENAI_API_KEY for openai/ models)")
