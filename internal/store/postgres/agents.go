package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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

// AgentCreate stores version 1 of a new agent under store.FirstVersion's rule; ErrConflict if the id exists.
func (s *Store) AgentCreate(ctx context.Context, a *apitype.Agent) error {
	if err := store.FirstVersion(a); err != nil {
		return fmt.Errorf("agent create: %w", err)
	}
	doc, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("agent create: encode: %w", err)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO agents (id, latest_version, created_at, archived_at)
			VALUES ($1, $2, $3, $4)`, a.ID, a.Version, a.CreatedAt, a.ArchivedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO agent_versions (agent_id, version, doc) VALUES ($1, $2, $3)`,
			a.ID, a.Version, doc)
		return err
	})
	return s.dbErr("agent create", err)
}

// AgentGet returns a version of an agent (0 = latest) with the agent's archived_at.
func (s *Store) AgentGet(ctx context.Context, p *store.AgentGetParams) (*apitype.Agent, error) {
	return agents.one(ctx, s, `SELECT v.doc, a.archived_at FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id AND v.version = CASE WHEN $2 > 0 THEN $2 ELSE a.latest_version END
		WHERE a.id = $1`, p.ID, p.Version)
}

// AgentPutVersion stores version a.Version under store.NextVersion's rule, the agent's row locked.
func (s *Store) AgentPutVersion(ctx context.Context, a *apitype.Agent) error {
	doc, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("agent put version: encode: %w", err)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var latest int
		if err := tx.QueryRow(ctx, `SELECT latest_version FROM agents WHERE id = $1 FOR NO KEY UPDATE`, a.ID).
			Scan(&latest); err != nil {
			return err
		}
		if err := store.NextVersion(latest, a); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE agents SET latest_version = $2 WHERE id = $1`, a.ID, a.Version); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO agent_versions (agent_id, version, doc) VALUES ($1, $2, $3)`,
			a.ID, a.Version, doc)
		return err
	})
	return s.dbErr("agent put version", err)
}

// AgentArchive marks the agent archived (keeping the first archive time) and returns its latest version.
func (s *Store) AgentArchive(ctx context.Context, id string, at time.Time) (*apitype.Agent, error) {
	return txResult(ctx, s, "agent archive", func(tx pgx.Tx) (*apitype.Agent, error) {
		if err := agents.stamp(ctx, tx, "archived_at", at, "id = $2", id); err != nil {
			return nil, err
		}
		return agents.read(ctx, tx, "", "a.id = $1", id)
	})
}

// AgentList lists the latest version of each agent.
func (s *Store) AgentList(ctx context.Context, p *store.ListParams) ([]apitype.Agent, error) {
	return agents.list(ctx, s, agents.query(), p)
}

// AgentVersionList lists an agent's versions, newest first.
func (s *Store) AgentVersionList(ctx context.Context, p *store.AgentVersionListParams) ([]apitype.Agent, error) {
	var q query
	fmt.Fprintf(&q.sql, `SELECT v.doc, a.archived_at FROM agents a JOIN agent_versions v ON v.agent_id = a.id
		WHERE a.id = %s`, q.arg(p.ID))
	if p.BeforeVersion > 0 {
		fmt.Fprintf(&q.sql, " AND v.version < %s", q.arg(p.BeforeVersion))
	}
	q.sql.WriteString(" ORDER BY v.version DESC")
	if p.Limit > 0 {
		fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(p.Limit))
	}
	out, err := agents.rows(ctx, s, "agent version list", q.sql.String(), q.args...)
	if err == nil && len(out) == 0 {
		_, err = s.AgentGet(ctx, &store.AgentGetParams{ID: p.ID})
	}
	return out, err
}
