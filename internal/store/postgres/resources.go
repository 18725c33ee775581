package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// query builds a statement with numbered arguments.
type query struct {
	sql  strings.Builder
	args []any
}

// arg adds an argument and returns its placeholder.
func (q *query) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

// listFilter adds the conditions of p on the created_at and id columns (of table alias t) and the archived_at
// column (if archivable), then the ordering and limit.
func (q *query) listFilter(p *store.ListParams, t string, archivable bool) {
	if p == nil {
		p = &store.ListParams{}
	}
	if archivable && !p.IncludeArchived {
		fmt.Fprintf(&q.sql, " AND %s.archived_at IS NULL", t)
	}
	timeCond := func(op string, v *time.Time) {
		if v != nil {
			fmt.Fprintf(&q.sql, " AND %s.created_at %s %s", t, op, q.arg(*v))
		}
	}
	timeCond(">", p.CreatedAfter)
	timeCond(">=", p.CreatedFrom)
	timeCond("<", p.CreatedBefore)
	timeCond("<=", p.CreatedTo)
	dir, op := "ASC", ">"
	if p.Desc {
		dir, op = "DESC", "<"
	}
	if p.After != nil {
		fmt.Fprintf(&q.sql, " AND (%s.created_at, %s.id) %s (%s, %s)",
			t, t, op, q.arg(p.After.CreatedAt), q.arg(p.After.ID))
	}
	fmt.Fprintf(&q.sql, " ORDER BY %s.created_at %s, %s.id %s", t, dir, t, dir)
	if p.Limit > 0 {
		fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(p.Limit))
	}
}

// collectDocs runs q and decodes each row, a JSON document and an archived_at, with decode.
func collectDocs[T any](ctx context.Context, s *Store, q *query,
	decode func(doc []byte, archived *time.Time) (T, error)) ([]T, error) {
	rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
	if err != nil {
		return nil, err
	}
	var (
		doc      []byte
		archived *time.Time
	)
	out := []T{}
	_, err = pgx.ForEachRow(rows, []any{&doc, &archived}, func() error {
		v, err := decode(doc, archived)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

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

// exists returns ErrNotFound unless table has a row with the id.
func (s *Store) exists(ctx context.Context, table, id string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+table+" WHERE id = $1)", id).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return store.ErrNotFound
	}
	return nil
}

func decodeEnvironment(doc []byte, archived *time.Time) (apitype.Environment, error) {
	var e apitype.Environment
	if err := json.Unmarshal(doc, &e); err != nil {
		return e, fmt.Errorf("decode environment: %w", err)
	}
	e.ArchivedAt = utc(archived)
	return e, nil
}

// EnvironmentCreate stores a new environment; ErrConflict if the id exists.
func (s *Store) EnvironmentCreate(ctx context.Context, e *apitype.Environment) error {
	if err := s.check(); err != nil {
		return err
	}
	doc, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("environment create: encode: %w", err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO environments (id, created_at, archived_at, doc) VALUES ($1, $2, $3, $4)`,
		e.ID, e.CreatedAt, e.ArchivedAt, doc)
	return s.dbErr("environment create", err)
}

// EnvironmentGet returns an environment.
func (s *Store) EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var (
		doc      []byte
		archived *time.Time
	)
	err := s.pool.QueryRow(ctx, `SELECT doc, archived_at FROM environments WHERE id = $1`, id).Scan(&doc, &archived)
	if err != nil {
		return nil, s.dbErr("environment get", err)
	}
	e, err := decodeEnvironment(doc, archived)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// EnvironmentUpdate applies fn to the environment under a row lock and stores the result.
func (s *Store) EnvironmentUpdate(ctx context.Context, id string,
	fn func(*apitype.Environment) error) (*apitype.Environment, error) {
	var out apitype.Environment
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			doc      []byte
			archived *time.Time
		)
		err := tx.QueryRow(ctx, `SELECT doc, archived_at FROM environments WHERE id = $1 FOR NO KEY UPDATE`, id).
			Scan(&doc, &archived)
		if err != nil {
			return err
		}
		e, err := decodeEnvironment(doc, archived)
		if err != nil {
			return err
		}
		if err := fn(&e); err != nil {
			return err
		}
		e.ID = id
		if doc, err = json.Marshal(&e); err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE environments SET doc = $2, archived_at = $3 WHERE id = $1`,
			id, doc, e.ArchivedAt); err != nil {
			return err
		}
		out = e
		return nil
	})
	if err != nil {
		return nil, s.dbErr("environment update", err)
	}
	return &out, nil
}

// EnvironmentList lists environments.
func (s *Store) EnvironmentList(ctx context.Context, p *store.ListParams) ([]apitype.Environment, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q query
	q.sql.WriteString(`SELECT e.doc, e.archived_at FROM environments e WHERE true`)
	q.listFilter(p, "e", true)
	out, err := collectDocs(ctx, s, &q, decodeEnvironment)
	return out, s.dbErr("environment list", err)
}

// EnvironmentDelete removes an environment.
func (s *Store) EnvironmentDelete(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM environments WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return s.dbErr("environment delete", err)
}

// APIKeyCreate stores a hashed API key; ErrConflict if the id or hash exists.
func (s *Store) APIKeyCreate(ctx context.Context, k *apitype.APIKey) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6)`,
		k.ID, k.Name, k.Hash, k.Hint, k.CreatedAt, k.RevokedAt)
	return s.dbErr("api key create", err)
}

const apiKeyColumns = `id, name, hash, hint, created_at, revoked_at`

func scanAPIKey(row pgx.Row) (apitype.APIKey, error) {
	var k apitype.APIKey
	err := row.Scan(&k.ID, &k.Name, &k.Hash, &k.Hint, &k.CreatedAt, &k.RevokedAt)
	k.CreatedAt = k.CreatedAt.UTC()
	k.RevokedAt = utc(k.RevokedAt)
	return k, err
}

// APIKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*apitype.APIKey, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	k, err := scanAPIKey(s.pool.QueryRow(ctx,
		`SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = $1 AND revoked_at IS NULL`, hash))
	if err != nil {
		return nil, s.dbErr("api key by hash", err)
	}
	return &k, nil
}

// APIKeyList lists every key, revoked ones included, oldest first.
func (s *Store) APIKeyList(ctx context.Context) ([]apitype.APIKey, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, s.dbErr("api key list", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (apitype.APIKey, error) { return scanAPIKey(row) })
	if err != nil {
		return nil, s.dbErr("api key list", err)
	}
	if keys == nil {
		keys = []apitype.APIKey{}
	}
	return keys, nil
}

// APIKeyRevoke marks a key revoked (keeping the first revocation time).
func (s *Store) APIKeyRevoke(ctx context.Context, id string, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1`, id, at)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return s.dbErr("api key revoke", err)
}
