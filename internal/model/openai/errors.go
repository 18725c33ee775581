package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/corralhq/corral/internal/model"
)

// mapError maps an SDK or transport error to a model.Error, or to the context's error when ctx is done.
func mapError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("openai: %w", ctx.Err())
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		e := &model.Error{Kind: kind(apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Message), Status: apiErr.StatusCode, Err: err}
		if apiErr.Response != nil {
			e.RetryAfter = model.RetryAfter(apiErr.Response.Header, time.Now())
		}
		return e
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// An error the server sent mid-stream, as {"error": {...}}: classify by its type and code.
		var body struct {
			Error struct {
				Type, Message string
				Code          any
			} `json:"error"`
		}
		_ = json.Unmarshal(streamErr.Event.Data, &body)
		code, _ := body.Error.Code.(string)
		k := kind(0, body.Error.Type, code, body.Error.Message)
		if k == model.ErrUnknown {
			k = model.ErrServer
		}
		return &model.Error{Kind: k, Err: fmt.Errorf("openai: %w", err)}
	}
	// Connection refused or reset, an unexpected EOF mid-stream, a malformed chunk: all worth a retry.
	return &model.Error{Kind: model.ErrServer, Err: fmt.Errorf("openai: %w", err)}
}

// kind classifies an OpenAI-style error by its code and type, else its HTTP status.
func kind(status int, errType, code, message string) model.ErrorKind {
	msg := strings.ToLower(message)
	switch {
	case code == "context_length_exceeded" || strings.Contains(msg, "maximum context length") ||
		strings.Contains(msg, "prompt is too long"):
		return model.ErrContextTooLong
	case code == "insufficient_quota" || errType == "insufficient_quota":
		return model.ErrBilling
	case errType == "overloaded_error":
		return model.ErrOverloaded
	case errType == "rate_limit_error" || code == "rate_limit_exceeded":
		return model.ErrRateLimited
	case errType == "server_error" || errType == "api_error":
		return model.ErrServer
	}
	return model.StatusKind(status)
}
