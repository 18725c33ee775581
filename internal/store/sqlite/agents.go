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

const agentColumns = `v.doc, a.archived_at`

// AgentCreate stores version 1 of a new agent (a.Version 0 is taken as 1).
func (s *Store) AgentCreate(ctx context.Context, a *apitype.Agent) error {
	if a.Version == 0 {
		a.Version = 1
	}
	if a.Version != 1 {
		return fmt.Errorf("sqlite: create agent %s: version must be 1, got %d", a.ID, a.Version)
	}
	doc, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("sqlite: create agent %s: %w", a.ID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		if _, err := w.exec(`INSERT INTO agents (id, latest_version, created_at, archived_at) VALUES (?, 1, ?, ?)`,
			a.ID, micros(a.CreatedAt), nullMicros(a.ArchivedAt)); err != nil {
			return err
		}
		_, err := w.exec(`INSERT INTO agent_versions (agent_id, version, doc) VALUES (?, 1, ?)`, a.ID, doc)
		return err
	}, nil)
	if isConstraint(err) {
		return fmt.Errorf("sqlite: create agent %s: %w", a.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlite: create agent %s: %w", a.ID, err)
	}
	return nil
}

// AgentGet returns the agent at p.Version (0 = latest).
func (s *Store) AgentGet(ctx context.Context, p *store.AgentGetParams) (*apitype.Agent, error) {
	row := s.readRow(ctx, `SELECT `+agentColumns+` FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id AND v.version = CASE WHEN ? = 0 THEN a.latest_version ELSE ? END
		WHERE a.id = ?`, p.Version, p.Version, p.ID)
	a, err := scanAgent(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: get agent %s v%d: %w", p.ID, p.Version, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr("get agent "+p.ID, err)
	}
	return a, nil
}

// AgentPutVersion stores version a.Version, which must follow the current latest version.
func (s *Store) AgentPutVersion(ctx context.Context, a *apitype.Agent) error {
	doc, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("sqlite: put agent %s v%d: %w", a.ID, a.Version, err)
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
		if latest != a.Version-1 {
			return fmt.Errorf("latest version is %d: %w", latest, store.ErrConflict)
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
	var a *apitype.Agent
	err := s.write(ctx, func(w *wtx) error {
		n, err := w.execN(`UPDATE agents SET archived_at = coalesce(archived_at, ?) WHERE id = ?`, micros(at), id)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		a, err = scanAgent(w.queryRow(`SELECT `+agentColumns+` FROM agents a
			JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.latest_version WHERE a.id = ?`, id))
		return err
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: archive agent %s: %w", id, err)
	}
	return a, nil
}

// AgentList lists the latest version of each agent.
func (s *Store) AgentList(ctx context.Context, p *store.ListParams) ([]apitype.Agent, error) {
	var f filter
	tail := f.addList("a", p)
	rows, err := s.readQuery(ctx, `SELECT `+agentColumns+` FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.latest_version`+f.where()+tail,
		append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list agents", err)
	}
	out, err := collect(rows, scanAgent)
	if err != nil {
		return nil, s.readErr("list agents", err)
	}
	return out, nil
}

// AgentVersionList lists an agent's versions, newest first.
func (s *Store) AgentVersionList(ctx context.Context, p *store.AgentVersionListParams) ([]apitype.Agent, error) {
	rows, err := s.readQuery(ctx, `SELECT `+agentColumns+` FROM agents a
		JOIN agent_versions v ON v.agent_id = a.id
		WHERE a.id = ? AND (? = 0 OR v.version < ?) ORDER BY v.version DESC LIMIT ?`,
		p.ID, p.BeforeVersion, p.BeforeVersion, limitArg(p.Limit))
	if err != nil {
		return nil, s.readErr("list agent versions "+p.ID, err)
	}
	out, err := collect(rows, scanAgent)
	if err != nil {
		return nil, s.readErr("list agent versions "+p.ID, err)
	}
	if len(out) == 0 {
		var one int
		err := s.readRow(ctx, `SELECT 1 FROM agents WHERE id = ?`, p.ID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlite: list agent versions %s: %w", p.ID, store.ErrNotFound)
		}
		if err != nil {
			return nil, s.readErr("list agent versions "+p.ID, err)
		}
	}
	return out, nil
}

func scanAgent(row scanner) (*apitype.Agent, error) {
	var doc []byte
	var archived sql.NullInt64
	if err := row.Scan(&doc, &archived); err != nil {
		return nil, err
	}
	var a apitype.Agent
	if err := json.Unmarshal(doc, &a); err != nil {
		return nil, fmt.Errorf("decode agent: %w", err)
	}
	a.ArchivedAt = timePtr(archived)
	return &a, nil
}
