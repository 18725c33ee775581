package sandbox

import (
	"context"
	"errors"
	"fmt"
)

// ErrUnavailable is returned (wrapped) by the Execute of Unavailable hands: this server's sandbox backend cannot
// run, so no tool call can.
var ErrUnavailable = errors.New("sandbox backend unavailable")

// Unavailable returns hands for a server whose sandbox backend cannot run here: every call gets an error result
// that says why (reason, e.g. "bubblewrap is not installed: apt-get install bubblewrap"), so the model and the
// client see what the server's log says, and sessions that need no sandbox still work.
func Unavailable(reason string) Hands { return unavailable{reason: reason} }

type unavailable struct{ reason string }

func (u unavailable) Execute(context.Context, *Call) (Result, error) {
	msg := fmt.Sprintf("Built-in tools cannot run on this server: its sandbox backend is unavailable (%s).", u.reason)
	return errorResult(msg), fmt.Errorf("%w: %s", ErrUnavailable, u.reason)
}
