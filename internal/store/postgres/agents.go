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

func decodeAgent(doc []byte, archived *time.Time) (apitype.Agent, error) {
	var a apitype.Agent
	if err := json.Unmarshal(doc, &a); err != nil {
		return a, fmt.Errorf("decode agent: %w", err)
	}
	a.ArchivedAt = utc(archived)
	return a, nil
}

// AgentCreate stores version 1 of a new agent; ErrConflict if the id exists.
func (s *Store) AgentCreate(ctx context.Context, a *apitype.Agent) error {
	if a.Version == 0 {
		a.Version = 1
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
	if err := s.check(); err != nil {
		return nil, err
	}
	var (
		doc      []byte
		archived *time.Time
	)
	err := s.pool.QueryRow(ctx, `SELECT v.doc, a.archived_at FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id AND v.version = CASE WHEN $2 > 0 THEN $2 ELSE a.latest_version END
		WHERE a.id = $1`, p.ID, p.Version).Scan(&doc, &archived)
	if err != nil {
		return nil, s.dbErr("agent get", err)
	}
	a, err := decodeAgent(doc, archived)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// AgentPutVersion stores version a.Version, which must follow the latest; ErrConflict otherwise.
func (s *Store) AgentPutVersion(ctx context.Context, a *apitype.Agent) error {
	doc, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("agent put version: encode: %w", err)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE agents SET latest_version = $2 WHERE id = $1 AND latest_version = $2 - 1`,
			a.ID, a.Version)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE id = $1)`, a.ID).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return store.ErrNotFound
			}
			return fmt.Errorf("version %d does not follow the latest: %w", a.Version, store.ErrConflict)
		}
		_, err = tx.Exec(ctx, `INSERT INTO agent_versions (agent_id, version, doc) VALUES ($1, $2, $3)`,
			a.ID, a.Version, doc)
		return err
	})
	return s.dbErr("agent put version", err)
}

// AgentArchive marks the agent archived (keeping the first archive time) and returns its latest version.
func (s *Store) AgentArchive(ctx context.Context, id string, at time.Time) (*apitype.Agent, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var (
		doc      []byte
		archived *time.Time
	)
	err := s.pool.QueryRow(ctx, `WITH a AS (
			UPDATE agents SET archived_at = COALESCE(archived_at, $2) WHERE id = $1 RETURNING id, latest_version, archived_at)
		SELECT v.doc, a.archived_at FROM a JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.latest_version`,
		id, at).Scan(&doc, &archived)
	if err != nil {
		return nil, s.dbErr("agent archive", err)
	}
	a, err := decodeAgent(doc, archived)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// AgentList lists the latest version of each agent.
func (s *Store) AgentList(ctx context.Context, p *store.ListParams) ([]apitype.Agent, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q query
	q.sql.WriteString(`SELECT v.doc, a.archived_at FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.latest_version WHERE true`)
	q.listFilter(p, "a", true)
	out, err := collectDocs(ctx, s, &q, decodeAgent)
	return out, s.dbErr("agent list", err)
}

// AgentVersionList lists an agent's versions, newest first.
func (s *Store) AgentVersionList(ctx context.Context, p *store.AgentVersionListParams) ([]apitype.Agent, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
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
	out, err := collectDocs(ctx, s, &q, decodeAgent)
	if err != nil {
		return nil, s.dbErr("agent version list", err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, "agents", p.ID); err != nil {
			return nil, s.dbErr("agent version list", err)
		}
	}
	return out, nil
}
