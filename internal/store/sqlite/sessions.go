package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// sessions select the document plus the columns the store owns, which override the document's copies.
var sessions = &table[apitype.Session]{
	what: "session", name: "sessions", alias: "s", archivable: true,
	sel: `SELECT d.doc, s.status, s.usage, s.active_seconds, s.archived_at
		FROM sessions s JOIN session_docs d ON d.session_id = s.id`,
	scan: scanSession,
	put: func(w *wtx, next, _ *apitype.Session) error {
		doc, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if _, err := w.exec(`UPDATE sessions SET archived_at = ?, agent_id = ?, agent_version = ?, deployment_id = ?
			WHERE id = ?`, nullMicros(next.ArchivedAt), next.Agent.ID, next.Agent.Version, orNull(next.DeploymentID),
			next.ID); err != nil {
			return err
		}
		_, err = w.exec(`UPDATE session_docs SET doc = ? WHERE session_id = ?`, doc, next.ID)
		return err
	},
}

// SessionCreate stores a session and appends its initial events in the same transaction; with any, the session
// is runnable. An empty status is stored as idle.
func (s *Store) SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*apitype.Session,
	[]apitype.Event, error) {
	in := *p.Session
	if err := store.CheckEvents(p.InitialEvents); err != nil {
		return nil, nil, fmt.Errorf("sqlite: create session %s: %w", in.ID, err)
	}
	threads, err := threadRows(in.ID, p.Threads)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: create session %s: %w", in.ID, err)
	}
	if in.Status == "" {
		in.Status = apitype.StatusIdle
	}
	doc, err := json.Marshal(&in)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: create session %s: %w", in.ID, err)
	}
	usage, err := json.Marshal(in.Usage)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: create session %s: %w", in.ID, err)
	}
	// The session as a read would return it, made from what is written (its initial events change none of its
	// columns) here, before the write, rather than read back by the writer, which every write of the store waits
	// for. Made before, a failure leaves nothing written.
	var archived sql.NullInt64
	if in.ArchivedAt != nil {
		archived = sql.NullInt64{Int64: micros(*in.ArchivedAt), Valid: true}
	}
	sess, err := sessionOf(doc, in.Status, usage, in.Stats.ActiveSeconds, archived)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: create session %s: %w", in.ID, err)
	}
	var events []apitype.Event
	var offered offeredClaim
	wake := len(p.InitialEvents) > 0
	err = s.submit(ctx, &writeReq{fn: func(w *wtx) error {
		if _, err := w.exec(`INSERT INTO sessions (id, created_at, archived_at, agent_id, agent_version, deployment_id,
			status, usage, active_seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			in.ID, micros(in.CreatedAt), nullMicros(in.ArchivedAt), in.Agent.ID, in.Agent.Version,
			orNull(in.DeploymentID), in.Status, usage, in.Stats.ActiveSeconds); err != nil {
			return err
		}
		if _, err := w.exec(`INSERT INTO session_docs (session_id, doc) VALUES (?, ?)`, in.ID, doc); err != nil {
			return err
		}
		for _, sec := range p.ResourceSecrets {
			if _, err := w.exec(`INSERT INTO resource_secrets (session_id, resource_id, name, key_id, wrapped_key, ciphertext)
				VALUES (?, ?, ?, ?, ?, ?)`, in.ID, sec.CredentialID, sec.Name, sec.KeyID, sec.WrappedKey, sec.Ciphertext); err != nil {
				return err
			}
		}
		if wake {
			var err error
			events, _, err = appendEvents(w, &store.EventAppendParams{
				SessionID: in.ID, Events: p.InitialEvents, Wake: true,
			}, threads)
			if err != nil {
				return err
			}
		} else if err := putThreads(w, in.ID, threads); err != nil {
			return err
		}
		// The session's webhook event goes to the outbox in its transaction (its initial events' went with
		// them, in appendEvents).
		if err := insertWebhookEvents(w, []apitype.WebhookEvent{store.SessionCreatedWebhookEvent(&in)}); err != nil {
			return err
		}
		if !wake {
			return nil
		}
		return offered.claim(w, in.ID)
	}, after: func() {
		if wake {
			s.hub.NotifySession(in.ID)
			if !offered.committed() {
				s.hub.NotifyRunnable()
			}
		}
	}, failed: offered.failed})
	if isConstraint(err) {
		err = store.ErrConflict
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: create session %s: %w", in.ID, err)
	}
	if events == nil {
		events = []apitype.Event{}
	}
	return sess, events, nil
}

// SessionGet returns a session with its status, usage and active time.
func (s *Store) SessionGet(ctx context.Context, id string) (*apitype.Session, error) {
	return sessions.get(ctx, s, id, "s.id = ?", id)
}

// SessionState reads the session's columns.
func (s *Store) SessionState(ctx context.Context, id string) (*store.SessionState, error) {
	st := store.SessionState{ID: id}
	var archived sql.NullInt64
	err := s.readRow(ctx, `SELECT status, archived_at FROM sessions WHERE id = ?`, id).Scan(&st.Status, &archived)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: get session %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr("get session "+id, err)
	}
	st.ArchivedAt = timePtr(archived)
	return &st, nil
}

// SessionUpdate applies fn to the session and stores the result, atomically, under store.KeepSession's rule.
func (s *Store) SessionUpdate(ctx context.Context, id string,
	fn func(*apitype.Session) error) (*apitype.Session, error) {
	return sessions.update(ctx, s, id, fn, store.KeepSession)
}

// SessionList lists sessions matching p.
func (s *Store) SessionList(ctx context.Context, p *store.SessionListParams) ([]apitype.Session, error) {
	var f filter
	if p.AgentID != "" {
		f.add("s.agent_id = ?", p.AgentID)
	}
	if p.AgentVersion > 0 {
		f.add("s.agent_version = ?", p.AgentVersion)
	}
	if p.DeploymentID != "" {
		f.add("s.deployment_id = ?", p.DeploymentID)
	}
	if len(p.Statuses) > 0 {
		f.add("s.status IN ("+placeholders(len(p.Statuses))+")", anys(p.Statuses)...)
	}
	return sessions.list(ctx, s, &f, &p.ListParams)
}

// SessionDelete removes a session, its log and its threads (by cascade), and wakes its subscribers.
func (s *Store) SessionDelete(ctx context.Context, id string) error {
	err := s.write(ctx, func(w *wtx) error { return sessions.deleteIn(w, "id = ?", id) }, func() {
		s.recent.forget(id)
		s.hub.NotifySession(id)
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete session %s: %w", id, err)
	}
	return nil
}

func scanSession(row scanner) (*apitype.Session, error) {
	var doc, usage []byte
	var status string
	var active float64
	var archived sql.NullInt64
	if err := row.Scan(&doc, &status, &usage, &active, &archived); err != nil {
		return nil, err
	}
	return sessionOf(doc, status, usage, active, archived)
}

// sessionOf is the session whose document is doc, with the columns the store keeps of it beside the document.
func sessionOf(doc []byte, status string, usage []byte, active float64, archived sql.NullInt64) (*apitype.Session,
	error) {
	var sess apitype.Session
	if err := json.Unmarshal(doc, &sess); err != nil {
		return nil, fmt.Errorf("decode session: %w", err)
	}
	sess.Usage = apitype.SessionUsage{}
	if len(usage) > 0 {
		if err := json.Unmarshal(usage, &sess.Usage); err != nil {
			return nil, fmt.Errorf("decode session usage: %w", err)
		}
	}
	sess.Status = status
	sess.Stats.ActiveSeconds = active
	sess.ArchivedAt = timePtr(archived)
	return &sess, nil
}
