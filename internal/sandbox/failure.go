package sandbox

import (
	"context"
	"errors"

	"github.com/corralhq/corral/internal/apitype"
)

// HandsFailure attributes a built-in tool call that failed in the hands of backend: err from Hands.Execute (or
// Pool.Execute), or a result whose Failure names a timeout or a limit. It is nil when neither says the hands
// failed (the tool reported an error the model caused, or none). The brain (internal/harness) and the
// self-hosted worker (internal/worker) both attribute their calls with it, so a session.error, an error result
// and a failed span name the same component and reason wherever the call ran.
func HandsFailure(backend string, res Result, err error) *apitype.FailureSource {
	reason := apitype.FailureReason("")
	switch {
	case errors.Is(err, ErrLimit):
		reason = apitype.ReasonLimitHit
	case errors.Is(err, ErrSandboxDead):
		reason = apitype.ReasonSandboxDied
	case errors.Is(err, ErrUnavailable):
		reason = apitype.ReasonUnavailable
	case errors.Is(err, ErrProvision):
		reason = apitype.ReasonProvisionFailed
	case errors.Is(err, context.DeadlineExceeded):
		reason = apitype.ReasonTimeout
	case err != nil:
		reason = apitype.ReasonInternal
	case res.IsError && res.Failure == FailureTimeout:
		reason = apitype.ReasonTimeout
	case res.IsError && res.Failure == FailureLimit:
		reason = apitype.ReasonLimitHit
	default:
		return nil
	}
	return &apitype.FailureSource{Component: apitype.ComponentHands, Backend: backend, Reason: reason}
}
