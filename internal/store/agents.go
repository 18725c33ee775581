package store

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// AgentStore keeps agents and their immutable versions.
type AgentStore interface {
	// AgentCreate stores version 1 of a new agent.
	AgentCreate(ctx context.Context, a *apitype.Agent) error
	// AgentGet returns the agent at a version (0 = latest), with archived_at of the agent.
	AgentGet(ctx context.Context, p *AgentGetParams) (*apitype.Agent, error)
	// AgentPutVersion stores a new version a.Version of an existing agent. It fails with ErrConflict unless
	// the current latest version is a.Version-1: two concurrent updates cannot both win.
	AgentPutVersion(ctx context.Context, a *apitype.Agent) error
	// AgentArchive marks the agent archived (idempotent) and returns its latest version.
	AgentArchive(ctx context.Context, id string, at time.Time) (*apitype.Agent, error)
	// AgentList lists the latest version of each agent.
	AgentList(ctx context.Context, p *ListParams) ([]apitype.Agent, error)
	// AgentVersionList lists an agent's versions, newest first; After.ID is unused, After.CreatedAt unused:
	// paging is by version (AfterVersion).
	AgentVersionList(ctx context.Context, p *AgentVersionListParams) ([]apitype.Agent, error)
}

// AgentGetParams selects an agent version.
type AgentGetParams struct {
	ID      string
	Version int // 0 = latest
}

// AgentVersionListParams pages an agent's versions, newest first.
type AgentVersionListParams struct {
	ID            string
	Limit         int
	BeforeVersion int // only versions < this; 0 = from the latest
}

// FirstVersion is AgentCreate's rule: a new agent is version 1 (0 is taken as 1).
func FirstVersion(a *apitype.Agent) error {
	if a.Version == 0 {
		a.Version = 1
	}
	if a.Version != 1 {
		return fmt.Errorf("agent %s: a new agent is version 1, got %d", a.ID, a.Version)
	}
	return nil
}

// NextVersion is AgentPutVersion's rule, applied to the latest version as read in the adapter's transaction: a
// new version follows the latest, so two concurrent updates cannot both win (ErrConflict).
func NextVersion(latest int, a *apitype.Agent) error {
	if latest != a.Version-1 {
		return fmt.Errorf("agent %s: version %d does not follow the latest, %d: %w", a.ID, a.Version, latest, ErrConflict)
	}
	return nil
}
