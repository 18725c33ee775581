package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

func TestHandsFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		res  sandbox.Result
		err  error
		want apitype.FailureReason // "" = no failure of the hands
	}{
		{"limit beside death", sandbox.Result{}, fmt.Errorf("x: %w", errors.Join(sandbox.ErrSandboxDead, sandbox.ErrLimit)), apitype.ReasonLimitHit},
		{"died", sandbox.Result{}, fmt.Errorf("x: %w", sandbox.ErrSandboxDead), apitype.ReasonSandboxDied},
		{"unavailable", sandbox.Result{}, sandbox.ErrUnavailable, apitype.ReasonUnavailable},
		{"provision", sandbox.Result{}, fmt.Errorf("x: %w", sandbox.ErrProvision), apitype.ReasonProvisionFailed},
		{"deadline", sandbox.Result{}, context.DeadlineExceeded, apitype.ReasonTimeout},
		{"other error", sandbox.Result{}, errors.New("boom"), apitype.ReasonInternal},
		{"command timeout", sandbox.Result{IsError: true, Failure: sandbox.FailureTimeout}, nil, apitype.ReasonTimeout},
		{"memory limit", sandbox.Result{IsError: true, Failure: sandbox.FailureLimit}, nil, apitype.ReasonLimitHit},
		{"the tool's own error", sandbox.Result{IsError: true}, nil, ""},
		{"success", sandbox.Result{}, nil, ""},
	}
	for _, c := range cases {
		got := sandbox.HandsFailure("bwrap", c.res, c.err)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%s: got %+v, want none", c.name, got)
		case c.want != "" && (got == nil || got.Component != apitype.ComponentHands || got.Backend != "bwrap" || got.Reason != c.want):
			t.Errorf("%s: got %+v, want hands/bwrap/%s", c.name, got, c.want)
		}
	}
}
