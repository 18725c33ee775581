package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// Placer places a session's resources (git repositories, files) in its workspace, on the host, before the Pool
// provisions the session's sandbox. The Pool calls it on every provisioning; the Placer places each resource
// once per workspace and remembers what it attempted, so that a re-provisioned sandbox (the workspace survives)
// finds the workspace as the session left it. internal/workspace implements it; the port only calls it, so that
// neither the backends nor the in-sandbox agent link the placement code (host git, credentials).
type Placer interface {
	// Place places the recipe's resources and skills that were not attempted before in host.Workspace (and
	// host.Session), which exist, and removes the files of resources the recipe no longer has. The Pool calls
	// it before every provisioning, with resources or without, for a Provider with Capabilities.HostWorkspace
	// or StagedWorkspace only. It returns the resources that could not be placed: they do not stop the
	// session, which continues without them (an error with an empty Type is a failure of the placement as a
	// whole). An attempt cut short because ctx ended must not count as attempted.
	Place(ctx context.Context, r *Recipe, host HostDirs) []*ResourceError
	// Forget discards what the Placer keeps about workspace dir, whose workspace the Pool has removed.
	// Idempotent.
	Forget(workspaceDir string) error
}

// ErrNoPlacer is the resource error of a session that has resources when the Pool has no Placer.
var ErrNoPlacer = errors.New("the sandbox pool has no workspace placer; no resource was placed")

// ResourceError is a session resource that could not be placed in the workspace. The sandbox is provisioned
// without it and the session continues.
type ResourceError struct {
	ResourceID string // the resource's id, if it has one
	Type       string // the resource's type: github_repository, file, ...; empty when no resource could be placed
	URL        string // a repository's URL, its password (if any) redacted
	MountPath  string // where the resource was to appear in the sandbox
	// ErrorType is the hosted service's session error type for the failure (repository_clone_error,
	// repository_checkout_error), or empty when none fits.
	ErrorType apitype.SessionErrorType
	Err       error
}

func (e *ResourceError) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("session resources: %v", e.Err)
	}
	what := e.Type
	if e.URL != "" {
		what += " " + e.URL
	}
	if e.MountPath != "" {
		what += " at " + e.MountPath
	}
	return fmt.Sprintf("session resource %s: %v", what, e.Err)
}

func (e *ResourceError) Unwrap() error { return e.Err }

// ErrNotPlacedRemote is the resource error of a session that has resources when its sandboxes run on other
// machines and the Pool keeps no copy of their files (a Provider with neither Capabilities.HostWorkspace nor
// StagedWorkspace).
var ErrNotPlacedRemote = errors.New("this sandbox backend does not place session resources (files, repositories, skills, memory stores) in its sandboxes; no resource was placed")

// place has the Placer place the recipe's resources and skills (and remove the files of deleted resources);
// without one, or for a Provider whose sessions have no directories on this host, a recipe with resources or
// skills gets an error that says so.
func (p *Pool) place(ctx context.Context, r *Recipe, host HostDirs) []*ResourceError {
	if !p.cfg.Provider.Capabilities().KeepsHostDirs() {
		if len(r.Resources) == 0 && len(r.Skills) == 0 {
			return nil
		}
		p.cfg.Logger.Warn("session resources not placed", "session", r.SessionID, "err", ErrNotPlacedRemote)
		return []*ResourceError{{Err: ErrNotPlacedRemote}}
	}
	if p.cfg.Placer == nil {
		if len(r.Resources) == 0 && len(r.Skills) == 0 {
			return nil
		}
		p.cfg.Logger.Error("session resources not placed", "session", r.SessionID, "err", ErrNoPlacer)
		return []*ResourceError{{Err: ErrNoPlacer}}
	}
	return p.cfg.Placer.Place(ctx, r, host)
}

// resourceNotes is the note put in front of a tool result about resources that could not be placed.
func resourceNotes(errs []*ResourceError) []apitype.ContentBlock {
	if len(errs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("Note: the session continues without these resources, which could not be placed in the workspace:")
	for _, e := range errs {
		b.WriteString("\n- ")
		b.WriteString(e.Error())
	}
	return []apitype.ContentBlock{apitype.TextBlock(b.String())}
}

// takeUnplaced returns and forgets the session's resources that could not be placed and that no tool result
// has mentioned yet.
func (s *session) takeUnplaced() []*ResourceError {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.unplaced
	s.unplaced = nil
	return u
}
