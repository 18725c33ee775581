package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// agents select an agent's latest version, with the agent's archived_at.
var agents = &table[apitype.Agent]{
	what: "agent", name: "agents", alias: "a", archivable: true,
	sel: `SELECT v.doc, a.archived_at FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.latest_version`,
	scan: scanDoc("agent", func(a *apitype.Agent, at *time.Time) { a.ArchivedAt = at }),
}

// AgentCreate stores version 1 of a new agent under store.FirstVersion's rule.
func (s *Store) AgentCreate(ctx context.Context, a *apitype.Agent) error {
	if err := store.FirstVersion(a); err != nil {
		return fmt.Errorf("sqlite: create agent: %w", err)
	}
	doc, err := json.Marshal(a)
	if err != nil {
		return writeErr(err, "create agent %s", a.ID)
	}
	err = s.write(ctx, func(w *wtx) error {
		if _, err := w.exec(`INSERT INTO agents (id, latest_version, created_at, archived_at) VALUES (?, 1, ?, ?)`,
			a.ID, micros(a.CreatedAt), nullMicros(a.ArchivedAt)); err != nil {
			return err
		}
		_, err := w.exec(`INSERT INTO agent_versions (agent_id, version, doc) VALUES (?, 1, ?)`, a.ID, doc)
		return err
	}, nil)
	return writeErr(err, "create agent %s", a.ID)
}

// AgentGet returns the agent at p.Version (0 = latest).
func (s *Store) AgentGet(ctx context.Context, p *store.AgentGetParams) (*apitype.Agent, error) {
	return agents.one(ctx, s, fmt.Sprintf("%s v%d", p.ID, p.Version), `SELECT v.doc, a.archived_at FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id AND v.version = CASE WHEN ? = 0 THEN a.latest_version ELSE ? END
		WHERE a.id = ?`, p.Version, p.Version, p.ID)
}

// AgentPutVersion stores version a.Version under store.NextVersion's rule.
func (s *Store) AgentPutVersion(ctx context.Context, a *apitype.Agent) error {
	doc, err := json.Marshal(a)
	if err != nil {
		return writeErr(err, "put agent %s v%d", a.ID, a.Version)
	}
	err = s.write(ctx, func(w *wtx) error {
		var latest int
		err := w.queryRow(`SELECT latest_version FROM agents WHERE id = ?`, a.ID).Scan(&latest)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := store.NextVersion(latest, a); err != nil {
			return err
		}
		if _, err := w.exec(`INSERT INTO agent_versions (agent_id, version, doc) VALUES (?, ?, ?)`,
			a.ID, a.Version, doc); err != nil {
			return err
		}
		_, err = w.exec(`UPDATE agents SET latest_version = ? WHERE id = ?`, a.Version, a.ID)
		return err
	}, nil)
	return writeErr(err, "put agent %s v%d", a.ID, a.Version)
}

// AgentArchive sets archived_at (once) and returns the latest version.
func (s *Store) AgentArchive(ctx context.Context, id string, at time.Time) (*apitype.Agent, error) {
	return writeResult(ctx, s, func(w *wtx) (*apitype.Agent, error) {
		if err := agents.stamp(w, "archived_at", at, "id = ?", id); err != nil {
			return nil, err
		}
		return agents.read(w, "a.id = ?", id)
	}, "archive agent %s", id)
}

// AgentList lists the latest version of each agent.
func (s *Store) AgentList(ctx context.Context, p *store.ListParams) ([]apitype.Agent, error) {
	return agents.list(ctx, s, &filter{}, p)
}

// AgentVersionList lists an agent's versions, newest first.
func (s *Store) AgentVersionList(ctx context.Context, p *store.AgentVersionListParams) ([]apitype.Agent, error) {
	out, err := agents.rows(ctx, s, "list agent versions "+p.ID, `SELECT v.doc, a.archived_at FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id
		WHERE a.id = ? AND (? = 0 OR v.version < ?) ORDER BY v.version DESC LIMIT ?`,
		p.ID, p.BeforeVersion, p.BeforeVersion, limitArg(p.Limit))
	if err == nil && len(out) == 0 {
		_, err = s.AgentGet(ctx, &store.AgentGetParams{ID: p.ID})
	}
	return out, err
}
