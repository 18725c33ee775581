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

// sessions select the document plus the columns the store owns, which override the document's copies.
var sessions = &table[apitype.Session]{
	what: "session", name: "sessions", alias: "s", archivable: true,
	sel:  `SELECT s.doc, s.archived_at, s.status, s.usage, s.active_seconds FROM sessions s`,
	scan: scanSession,
	put: func(ctx context.Context, tx pgx.Tx, next, _ *apitype.Session) error {
		doc, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		_, err = tx.Exec(ctx, `UPDATE sessions SET doc = $2, archived_at = $3, agent_id = $4, agent_version = $5,
			deployment_id = $6 WHERE id = $1`, next.ID, doc, next.ArchivedAt, next.Agent.ID, next.Agent.Version,
			next.DeploymentID)
		return err
	},
}

// scanSession reads a session document and fills the fields the store owns from their columns.
func scanSession(row pgx.Row) (*apitype.Session, error) {
	var (
		sess          apitype.Session
		doc, usage    []byte
		archived      *time.Time
		status        string
		activeSeconds float64
	)
	if err := row.Scan(&doc, &archived, &status, &usage, &activeSeconds); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(doc, &sess); err != nil {
		return nil, fmt.Errorf("decode session: %w", err)
	}
	sess.Usage = apitype.SessionUsage{}
	if err := json.Unmarshal(usage, &sess.Usage); err != nil {
		return nil, fmt.Errorf("decode session usage: %w", err)
	}
	sess.ArchivedAt = utc(archived)
	sess.Status = status
	sess.Stats.ActiveSeconds = activeSeconds
	return &sess, nil
}

// SessionCreate stores a new session and appends its initial events in one transaction, marking the session
// runnable when there are any.
func (s *Store) SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*apitype.Session,
	[]apitype.Event, error) {
	if err := store.CheckEvents(p.InitialEvents); err != nil {
		return nil, nil, fmt.Errorf("session create: %w", err)
	}
	sess := *p.Session
	if sess.Status == "" {
		sess.Status = apitype.StatusIdle
	}
	doc, err := json.Marshal(&sess)
	if err != nil {
		return nil, nil, fmt.Errorf("session create: encode: %w", err)
	}
	usage, err := json.Marshal(&sess.Usage)
	if err != nil {
		return nil, nil, fmt.Errorf("session create: encode usage: %w", err)
	}
	threads, err := threadRows(sess.ID, p.Threads)
	if err != nil {
		return nil, nil, fmt.Errorf("session create: %w", err)
	}
	ap := &store.EventAppendParams{SessionID: sess.ID, Events: p.InitialEvents, Wake: len(p.InitialEvents) > 0}
	req := s.newAppend(ctx, ap, nil)
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO sessions
			(id, created_at, archived_at, agent_id, agent_version, doc, status, usage, active_seconds, deployment_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			sess.ID, sess.CreatedAt, sess.ArchivedAt, sess.Agent.ID, sess.Agent.Version, doc, sess.Status, usage,
			sess.Stats.ActiveSeconds, sess.DeploymentID); err != nil {
			return err
		}
		for _, sec := range p.ResourceSecrets {
			if _, err := tx.Exec(ctx, `INSERT INTO resource_secrets (session_id, resource_id, name, key_id, wrapped_key, ciphertext)
				VALUES ($1, $2, $3, $4, $5, $6)`, sess.ID, sec.CredentialID, sec.Name, sec.KeyID, sec.WrappedKey, sec.Ciphertext); err != nil {
				return err
			}
		}
		if err := putThreads(ctx, tx, sess.ID, threads); err != nil {
			return err
		}
		// The session's webhook event goes to the outbox in its transaction (its initial events' go with them,
		// in the append's statement).
		if err := insertWebhookEvents(ctx, tx, []apitype.WebhookEvent{store.SessionCreatedWebhookEvent(&sess)}); err != nil {
			return err
		}
		if len(p.InitialEvents) == 0 {
			return nil
		}
		sql, args := s.appendArgs([]*appendReq{req})
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		res := make([]appendResult, 1)
		if err := scanAppend(rows, res); err != nil {
			return err
		}
		if !res[0].ok {
			return fmt.Errorf("initial events not appended")
		}
		req.fill(res[0].lastSeq)
		return nil
	})
	if err != nil {
		return nil, nil, s.dbErr("session create", err)
	}
	s.notifyLocal(sess.ID, ap.Wake)
	return &sess, req.events, nil
}

// SessionGet returns a session with its status, usage and stats.
func (s *Store) SessionGet(ctx context.Context, id string) (*apitype.Session, error) {
	return sessions.get(ctx, s, "s.id = $1", id)
}

// SessionState reads the session's columns.
func (s *Store) SessionState(ctx context.Context, id string) (*store.SessionState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	st := store.SessionState{ID: id}
	var archived *time.Time
	err := s.pool.QueryRow(ctx, `SELECT status, archived_at FROM sessions WHERE id = $1`, id).Scan(&st.Status, &archived)
	if err != nil {
		return nil, s.dbErr("session get", err)
	}
	st.ArchivedAt = utc(archived)
	return &st, nil
}

// SessionUpdate applies fn to the session under a row lock and stores the document, under store.KeepSession's
// rule.
func (s *Store) SessionUpdate(ctx context.Context, id string,
	fn func(*apitype.Session) error) (*apitype.Session, error) {
	return sessions.update(ctx, s, id, fn, store.KeepSession)
}

// SessionList lists sessions, filtered by agent, deployment and status.
func (s *Store) SessionList(ctx context.Context, p *store.SessionListParams) ([]apitype.Session, error) {
	q := sessions.query()
	if p.AgentID != "" {
		fmt.Fprintf(&q.sql, " AND s.agent_id = %s", q.arg(p.AgentID))
	}
	if p.AgentVersion > 0 {
		fmt.Fprintf(&q.sql, " AND s.agent_version = %s", q.arg(p.AgentVersion))
	}
	if p.DeploymentID != "" {
		fmt.Fprintf(&q.sql, " AND s.deployment_id = %s", q.arg(p.DeploymentID))
	}
	if len(p.Statuses) > 0 {
		fmt.Fprintf(&q.sql, " AND s.status = ANY(%s)", q.arg(p.Statuses))
	}
	return sessions.list(ctx, s, q, &p.ListParams)
}

// SessionDelete removes the session, its log and its threads (by cascade) and wakes its subscribers, here and in
// other processes.
func (s *Store) SessionDelete(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var deleted bool
		err := tx.QueryRow(ctx, `WITH d AS (DELETE FROM sessions WHERE id = $1 RETURNING id)
			SELECT EXISTS (SELECT 1 FROM d), (SELECT pg_notify($2, id) FROM d)`, id, s.eventsChannel).Scan(&deleted, nil)
		if err != nil {
			return err
		}
		if !deleted {
			return store.ErrNotFound
		}
		// A statement of its own, so that its snapshot, taken after the session row lock was won, holds the
		// events of every append that committed before; later appends find no session row.
		_, err = tx.Exec(ctx, `DELETE FROM events WHERE session_id = $1`, id)
		return err
	})
	if err != nil {
		return s.dbErr("session delete", err)
	}
	s.hub.NotifySession(id)
	return nil
}
