// Package anthropic is the model.Model adapter for the Anthropic Messages API, through the official SDK. It
// streams every call, passes content blocks through unchanged (thinking signatures included), marks prompt-cache
// breakpoints and maps API errors to model.Error kinds. It makes no retries by default: the brain owns them.
package anthropic

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/model"
)

// DefaultMaxTokens is the max_tokens of a request that sets none, when Config.DefaultMaxTokens is 0.
const DefaultMaxTokens = 8192

// Config configures a Model.
type Config struct {
	// APIKey authenticates the requests. With neither it nor AuthToken, every call fails with
	// model.ErrNoCredentials. The adapter reads no environment variable: the command does (ANTHROPIC_API_KEY).
	APIKey string
	// AuthToken is an OAuth bearer token, used when APIKey is empty.
	AuthToken string
	// BaseURL of the API; default the SDK's production URL.
	BaseURL string
	// HTTPClient makes the requests; default model.DefaultHTTPClient (like the SDK's, its transport waits at
	// most model.ResponseHeaderTimeout for the response headers).
	HTTPClient *http.Client
	// MaxRetries is the SDK's retry count; default 0, because the brain owns retries.
	MaxRetries int
	// DefaultMaxTokens is the max_tokens of a request that sets none; default DefaultMaxTokens.
	DefaultMaxTokens int
}

// Model calls the Messages API.
type Model struct {
	client    anthropic.Client
	maxTokens int
	noCreds   bool
	tools     toolCache
}

var _ model.Model = (*Model)(nil)

// New returns a Model. Credentials and endpoint come from cfg only: the SDK reads neither the environment
// (ANTHROPIC_*) nor profiles and federation files on disk, so a server never picks up a developer's login by
// accident.
func New(cfg Config) *Model {
	apiKey, token := cfg.APIKey, cfg.AuthToken
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithMaxRetries(max(cfg.MaxRetries, 0))}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	opts = append(opts, option.WithHTTPClient(cmp.Or(cfg.HTTPClient, model.DefaultHTTPClient())))
	switch {
	case apiKey != "":
		opts = append(opts, option.WithAPIKey(apiKey))
	case token != "":
		opts = append(opts, option.WithAuthToken(token))
	}
	return &Model{
		client:    anthropic.NewClient(opts...),
		maxTokens: cmp.Or(cfg.DefaultMaxTokens, DefaultMaxTokens),
		noCreds:   apiKey == "" && token == "",
	}
}

// Call streams one Messages API request and returns the accumulated message.
func (m *Model) Call(ctx context.Context, req *model.Request, onDelta func(model.Delta)) (*model.Response, error) {
	if m.noCreds {
		return nil, &model.Error{Kind: model.ErrAuth, Err: model.ErrNoCredentials}
	}
	params, body, err := m.params(req)
	if err != nil {
		return nil, &model.Error{Kind: model.ErrInvalid, Err: fmt.Errorf("anthropic: %w", err)}
	}
	// The SDK sends body (with "stream": true, which it sets), not its encoding of params.
	stream := m.client.Messages.NewStreaming(ctx, params, option.WithRequestBody("application/json", body))
	defer stream.Close()

	var msg anthropic.Message
	stopped := false
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, &model.Error{Kind: model.ErrServer, Err: fmt.Errorf("anthropic: malformed stream: %w", err)}
		}
		switch ev.Type {
		case "content_block_start":
			if onDelta != nil && (ev.ContentBlock.Type == model.BlockText || ev.ContentBlock.Type == model.BlockThinking) {
				onDelta(model.Delta{Index: int(ev.Index), Type: ev.ContentBlock.Type, Started: true})
			}
		case "content_block_delta":
			if onDelta == nil {
				continue
			}
			switch ev.Delta.Type {
			case "text_delta":
				onDelta(model.Delta{Index: int(ev.Index), Type: model.BlockText, Text: ev.Delta.Text})
			case "thinking_delta":
				onDelta(model.Delta{Index: int(ev.Index), Type: model.BlockThinking, Text: ev.Delta.Thinking})
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return nil, mapError(ctx, err)
	}
	if !stopped {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("anthropic: %w", ctx.Err())
		}
		return nil, &model.Error{Kind: model.ErrServer, Err: errors.New("anthropic: stream ended before message_stop")}
	}
	return response(&msg)
}

// response maps an accumulated message to a model.Response.
func response(msg *anthropic.Message) (*model.Response, error) {
	resp := &model.Response{
		StopReason: string(msg.StopReason),
		Content:    make([]model.Block, 0, len(msg.Content)),
	}
	resp.Usage.InputTokens = msg.Usage.InputTokens
	resp.Usage.OutputTokens = msg.Usage.OutputTokens
	resp.Usage.CacheCreationInputTokens = msg.Usage.CacheCreationInputTokens
	resp.Usage.CacheReadInputTokens = msg.Usage.CacheReadInputTokens
	resp.CacheCreation1h = msg.Usage.CacheCreation.Ephemeral1hInputTokens
	resp.ServerToolUse.WebSearchRequests = msg.Usage.ServerToolUse.WebSearchRequests
	resp.ServerToolUse.WebFetchRequests = msg.Usage.ServerToolUse.WebFetchRequests
	for _, c := range msg.Content {
		switch c.Type {
		case model.BlockText:
			resp.Content = append(resp.Content, model.Block{Type: c.Type, Text: c.Text})
		case model.BlockThinking:
			resp.Content = append(resp.Content, model.Block{Type: c.Type, Thinking: c.Thinking, Signature: c.Signature})
		case model.BlockRedactedThinking:
			resp.Content = append(resp.Content, model.Block{Type: c.Type, Data: c.Data})
		case model.BlockToolUse:
			input := json.RawMessage(c.Input)
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			if !json.Valid(input) {
				return nil, &model.Error{Kind: model.ErrServer, Err: fmt.Errorf("anthropic: tool_use %s: invalid input JSON", c.ID)}
			}
			resp.Content = append(resp.Content, model.Block{Type: c.Type, ID: c.ID, Name: c.Name, Input: input})
		case model.BlockServerToolUse, model.BlockWebSearchToolResult:
			// Kept as sent (with the accumulated input), for the log and the next requests.
			resp.Content = append(resp.Content, model.Block{Type: c.Type, Raw: json.RawMessage(c.RawJSON())})
		default:
			// Other types Corral does not request are dropped.
		}
	}
	return resp, nil
}
