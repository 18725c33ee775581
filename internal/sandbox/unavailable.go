package sandbox

import (
	"context"
	"errors"
	"fmt"
)

// ErrUnavailable is returned (wrapped) by the Execute of Unavailable hands.
var ErrUnavailable = errors.New("sandbox unavailable")

// Unavailable returns hands that declare tools but cannot run them, for a server whose sandbox backend cannot
// run: the model is still offered the tools, and every call gets an error result that gives the reason (why the
// backend cannot run, and what to do about it), so the model and the client see why.
func Unavailable(tools []Tool, reason string) Hands {
	return &unavailable{tools: tools, reason: reason}
}

type unavailable struct {
	tools  []Tool
	reason string
}

func (u *unavailable) Tools() []Tool { return u.tools }

// Backend names no backend: none can run.
func (u *unavailable) Backend() string { return "unavailable" }

func (u *unavailable) Execute(context.Context, *Call) (Result, error) {
	return errorResult(u.reason), fmt.Errorf("%w: %s", ErrUnavailable, u.reason)
}
