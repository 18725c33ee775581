// Package openai is the model.Model adapter for OpenAI chat completions, and so for any OpenAI-compatible
// endpoint (vLLM, Ollama, LiteLLM, OpenRouter, ...), through the official openai-go SDK. It streams every call.
//
// Mapping from model.Request:
//
//   - System: a leading "system" message.
//   - User text and image blocks: one "user" message whose content parts are text parts and image_url parts
//     (base64 images as data: URLs; a file image, which has no URL, becomes a text note).
//   - Assistant text and tool_use blocks: one "assistant" message, its text blocks joined as the content and each
//     tool_use a function tool call (id, function name, arguments = the input JSON).
//   - tool_result blocks: one "tool" message per result, tool_call_id = tool_use_id, content its text blocks
//     joined with newlines, each image noted as "[image omitted]", prefixed "Error: " when is_error. They come
//     before any other content of the same user turn, right after the assistant's tool calls, as OpenAI requires.
//   - thinking and redacted_thinking blocks are dropped; ThinkingBudget and CacheBreakpoints are ignored (OpenAI
//     caches prefixes on its own).
//   - Tools: function tools, the input schema as parameters.
//   - MaxTokens: max_completion_tokens (max_tokens with Config.LegacyMaxTokens), omitted when 0.
//
// Mapping of the response:
//
//   - content: one text block (index 0); tool calls: tool_use blocks, in index order, input = the arguments
//     (empty arguments become {}; arguments that are not JSON fail the call with a retryable ErrServer).
//   - finish_reason: stop -> end_turn, tool_calls (and function_call) -> tool_use, length -> max_tokens (a tool
//     call cut off mid-arguments is dropped), content_filter -> refusal; any other finish with tool calls is
//     tool_use.
//   - usage (requested with stream_options.include_usage): input = prompt_tokens - cached_tokens, cache read =
//     prompt_tokens_details.cached_tokens, output = completion_tokens.
//
// Errors map to model.Error kinds: 429 -> ErrRateLimited (retry-after honoured), except insufficient_quota ->
// ErrAuth; 529 -> ErrOverloaded; 5xx and connection errors -> ErrServer; 400 with code context_length_exceeded
// (or a message about the context length) -> ErrContextTooLong; other 4xx -> ErrInvalid; 401/403 -> ErrAuth.
package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/corralhq/corral/internal/model"
)

// Config configures a Model.
type Config struct {
	// APIKey is sent as a bearer token; without one, every call fails with model.ErrNoCredentials (servers that
	// need no key accept any). The adapter reads no environment variable: the command does (OPENAI_API_KEY).
	APIKey string
	// BaseURL of the API, including /v1 (e.g. http://localhost:11434/v1); default OpenAI's.
	BaseURL string
	// Organization and Project, if set, are sent as the OpenAI-Organization and OpenAI-Project headers.
	Organization, Project string
	// HTTPClient makes the requests; default model.DefaultHTTPClient (like the SDK's, its transport waits at
	// most model.ResponseHeaderTimeout for the response headers).
	HTTPClient *http.Client
	// MaxRetries is the SDK's retry count; default 0, because the brain owns retries.
	MaxRetries int
	// LegacyMaxTokens sends max_tokens instead of max_completion_tokens, for servers that know only the former.
	LegacyMaxTokens bool
}

// Model calls a chat completions endpoint.
type Model struct {
	chat    openai.ChatCompletionService
	legacy  bool
	noCreds bool
}

var _ model.Model = (*Model)(nil)

// New returns a Model. Credentials and endpoint come from cfg only. openai.NewClient would read OPENAI_* from
// the environment (key, base URL, organization, project, custom headers) and the SDK has no public option to
// stop it, so the adapter builds the one service it uses, which takes only the options given.
func New(cfg Config) *Model {
	opts := []option.RequestOption{
		option.WithEnvironmentProduction(), // the default base URL
		option.WithHTTPClient(cmp.Or(cfg.HTTPClient, model.DefaultHTTPClient())),
		option.WithMaxRetries(max(cfg.MaxRetries, 0)),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.Organization != "" {
		opts = append(opts, option.WithOrganization(cfg.Organization))
	}
	if cfg.Project != "" {
		opts = append(opts, option.WithProject(cfg.Project))
	}
	return &Model{chat: openai.NewChatCompletionService(opts...), legacy: cfg.LegacyMaxTokens, noCreds: cfg.APIKey == ""}
}

// toolCall is a tool call being streamed.
type toolCall struct {
	id, name string
	args     strings.Builder
}

// Call streams one chat completion and returns the accumulated answer.
func (m *Model) Call(ctx context.Context, req *model.Request, onDelta func(model.Delta)) (*model.Response, error) {
	if m.noCreds {
		return nil, &model.Error{Kind: model.ErrAuth, Err: model.ErrNoCredentials}
	}
	params, err := m.params(req)
	if err != nil {
		return nil, &model.Error{Kind: model.ErrInvalid, Err: fmt.Errorf("openai: %w", err)}
	}
	stream := m.chat.NewStreaming(ctx, params)
	defer stream.Close()

	var (
		text    strings.Builder
		started bool
		calls   = map[int64]*toolCall{}
		finish  string
		usage   openai.CompletionUsage
	)
	for stream.Next() {
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			usage = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			if c := ch.Delta.Content; c != "" {
				text.WriteString(c)
				if onDelta != nil {
					if !started {
						onDelta(model.Delta{Index: 0, Type: model.BlockText, Started: true})
					}
					onDelta(model.Delta{Index: 0, Type: model.BlockText, Text: c})
				}
				started = true
			}
			for _, tc := range ch.Delta.ToolCalls {
				call := calls[tc.Index]
				if call == nil {
					call = &toolCall{}
					calls[tc.Index] = call
				}
				call.id = cmp.Or(tc.ID, call.id)
				call.name = cmp.Or(tc.Function.Name, call.name)
				call.args.WriteString(tc.Function.Arguments)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, mapError(ctx, err)
	}
	if finish == "" {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("openai: %w", ctx.Err())
		}
		return nil, &model.Error{Kind: model.ErrServer, Err: errors.New("openai: stream ended without a finish_reason")}
	}
	return response(text.String(), calls, finish, usage)
}

// response builds the model.Response of a finished stream.
func response(text string, calls map[int64]*toolCall, finish string, usage openai.CompletionUsage) (*model.Response, error) {
	resp := &model.Response{StopReason: stopReason(finish, len(calls) > 0)}
	cached := usage.PromptTokensDetails.CachedTokens
	resp.Usage.InputTokens = usage.PromptTokens - cached
	resp.Usage.CacheReadInputTokens = cached
	resp.Usage.OutputTokens = usage.CompletionTokens
	if text != "" {
		resp.Content = append(resp.Content, model.Block{Type: model.BlockText, Text: text})
	}
	indexes := make([]int64, 0, len(calls))
	for i := range calls {
		indexes = append(indexes, i)
	}
	slices.Sort(indexes)
	for _, i := range indexes {
		c := calls[i]
		input := json.RawMessage(strings.TrimSpace(c.args.String()))
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		if !json.Valid(input) {
			if resp.StopReason == "max_tokens" {
				continue // cut off mid-arguments, as the stop reason says
			}
			return nil, &model.Error{Kind: model.ErrServer, Err: fmt.Errorf("openai: tool call %s (%s): arguments are not JSON", c.id, c.name)}
		}
		resp.Content = append(resp.Content, model.Block{Type: model.BlockToolUse, ID: c.id, Name: c.name, Input: input})
	}
	return resp, nil
}

// stopReason maps a finish_reason to a model stop reason.
func stopReason(finish string, toolCalls bool) string {
	switch {
	case finish == "length":
		return "max_tokens"
	case toolCalls || finish == "tool_calls" || finish == "function_call":
		return "tool_use"
	case finish == "content_filter":
		return "refusal"
	default:
		return "end_turn"
	}
}
