package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model"
)

// mapError maps an SDK or transport error to a model.Error, or to the context's error when ctx is done.
func mapError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("anthropic: %w", ctx.Err())
	}
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		// Connection refused or reset, an unexpected EOF mid-stream, a malformed event: all worth a retry.
		return &model.Error{Kind: model.ErrServer, Err: fmt.Errorf("anthropic: %w", err)}
	}
	e := &model.Error{Kind: kind(apiErr.StatusCode, string(apiErr.Type()), apiErr.Message), Err: err}
	if apiErr.StatusCode != http.StatusOK { // an error event mid-stream arrives on a 200 response
		e.Status = apiErr.StatusCode
	}
	if apiErr.Response != nil {
		e.RetryAfter = model.RetryAfter(apiErr.Response.Header, time.Now())
	}
	return e
}

// kind classifies an Anthropic error by its type, else its HTTP status. A 400 whose message says the prompt is
// too long, and a 413, are ErrContextTooLong: compaction is the way out of both.
func kind(status int, errType, message string) model.ErrorKind {
	switch errType {
	case "overloaded_error":
		return model.ErrOverloaded
	case "rate_limit_error":
		return model.ErrRateLimited
	case "api_error", "timeout_error":
		return model.ErrServer
	case "billing_error":
		return model.ErrBilling
	case "authentication_error", "permission_error":
		return model.ErrAuth
	case "request_too_large":
		return model.ErrContextTooLong
	case "invalid_request_error":
		if strings.Contains(strings.ToLower(message), "prompt is too long") {
			return model.ErrContextTooLong
		}
		return model.ErrInvalid
	}
	if status == http.StatusBadRequest && strings.Contains(strings.ToLower(message), "prompt is too long") {
		return model.ErrContextTooLong
	}
	return model.StatusKind(status)
}
