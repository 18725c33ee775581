package sandbox

import "context"

// Quota admits a session's new sandbox against a share that is counted outside the pool: a workspace's live
// sandboxes, whichever brain runs them (internal/server keeps it in the store).
type Quota interface {
	// Admit admits a sandbox of the session, or refuses it with an error that says why (the model reads it as
	// the tool's error). done ends the admission: the pool calls it once the sandbox is closed, or failed to
	// start.
	Admit(ctx context.Context, sessionID string) (done func(), err error)
}

// admittedSandbox is a sandbox its Quota admitted: closing it ends the admission.
type admittedSandbox struct {
	Sandbox
	done func()
}

// Unwrap is the sandbox wrapped.
func (s *admittedSandbox) Unwrap() Sandbox { return s.Sandbox }

func (s *admittedSandbox) Close() error {
	err := s.Sandbox.Close()
	s.done()
	return err
}
