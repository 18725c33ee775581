package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The dreams (beta dreaming-2026-04-21): a dream reads a memory store and up to 100 session transcripts and
// writes a memory store that merges duplicates, drops stale entries and records cross-session patterns. The
// handlers here record a dream and change its status; the runner (dreamrun.go) runs it as a session.

// Dream limits.
const (
	maxDreamSessions        = 100
	maxDreamInstructionsLen = 4096
)

type dreamCreateRequest struct {
	Inputs         []json.RawMessage `json:"inputs"`
	Model          json.RawMessage   `json:"model"`
	Instructions   *string           `json:"instructions"`
	OutputBehavior json.RawMessage   `json:"output_behavior"`
}

func viewDream(d *apitype.Dream) *apitype.Dream {
	if d.Outputs == nil {
		d.Outputs = []apitype.DreamOutput{}
	}
	return d
}

// parseDreamInputs reads «DreamCreate».inputs: exactly one memory_store entry and one sessions entry with 1 to
// 100 unique session ids, which the dream keeps sorted.
func parseDreamInputs(raws []json.RawMessage) ([]apitype.DreamInput, error) {
	if len(raws) != 2 {
		return nil, invalid("inputs", "must hold exactly one memory_store entry and one sessions entry, got %d entries", len(raws))
	}
	var ms, sessions *apitype.DreamInput
	for i, raw := range raws {
		p := index("inputs", i)
		typ, err := typeOf(p, raw)
		if err != nil {
			return nil, err
		}
		switch apitype.DreamInputType(typ) {
		case apitype.DreamInputMemoryStore:
			var in struct {
				Type          string `json:"type"`
				MemoryStoreID string `json:"memory_store_id"`
			}
			if err := strictUnmarshal(p, raw, &in); err != nil {
				return nil, err
			}
			if ms != nil {
				return nil, invalid(p, "a second memory_store entry: a dream reads exactly one memory store")
			}
			if err := checkString(path(p, "memory_store_id"), in.MemoryStoreID, true, 256); err != nil {
				return nil, err
			}
			ms = &apitype.DreamInput{Type: apitype.DreamInputMemoryStore, MemoryStoreID: in.MemoryStoreID}
		case apitype.DreamInputSessions:
			var in struct {
				Type       string   `json:"type"`
				SessionIDs []string `json:"session_ids"`
			}
			if err := strictUnmarshal(p, raw, &in); err != nil {
				return nil, err
			}
			if sessions != nil {
				return nil, invalid(p, "a second sessions entry: a dream reads exactly one list of sessions")
			}
			ids := in.SessionIDs
			if len(ids) < 1 || len(ids) > maxDreamSessions {
				return nil, invalid(path(p, "session_ids"), "must list 1 to %d sessions, got %d", maxDreamSessions, len(ids))
			}
			seen := map[string]bool{}
			for j, id := range ids {
				if err := checkString(index(path(p, "session_ids"), j), id, true, 256); err != nil {
					return nil, err
				}
				if seen[id] {
					return nil, invalid(index(path(p, "session_ids"), j), "session %s is listed twice", id)
				}
				seen[id] = true
			}
			sorted := slices.Clone(ids)
			slices.Sort(sorted)
			sessions = &apitype.DreamInput{Type: apitype.DreamInputSessions, SessionIDs: sorted}
		default:
			return nil, invalid(path(p, "type"), `must be "memory_store" or "sessions", got %q`, typ)
		}
	}
	if ms == nil || sessions == nil {
		return nil, invalid("inputs", "must hold exactly one memory_store entry and one sessions entry")
	}
	return []apitype.DreamInput{*ms, *sessions}, nil
}

// parseDreamModel reads «DreamCreate».model: a model id, or {"id", "speed"?: "standard"}.
func parseDreamModel(raw json.RawMessage) (apitype.DreamModel, error) {
	var m apitype.DreamModel
	if len(raw) == 0 || isNull(raw) {
		return m, invalid("model", "required")
	}
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &m.ID); err != nil {
			return m, invalid("model", "expected a model id or an object")
		}
	} else {
		if raw[0] != '{' {
			return m, invalid("model", "expected a model id or an object")
		}
		if err := strictUnmarshal("model", raw, &m); err != nil {
			return m, err
		}
		if m.Speed != "" && m.Speed != "standard" {
			return m, invalid("model.speed", `can only be "standard"`)
		}
	}
	return m, checkString("model.id", m.ID, true, 256)
}

// parseOutputBehavior reads «DreamCreate».output_behavior (default create_new); update_existing must name the
// input memory store.
func parseOutputBehavior(raw json.RawMessage, input string) (apitype.DreamOutputBehavior, error) {
	b := apitype.DreamOutputBehavior{Type: apitype.DreamCreateNew}
	if len(raw) == 0 || isNull(raw) {
		return b, nil
	}
	typ, err := typeOf("output_behavior", raw)
	if err != nil {
		return b, err
	}
	switch apitype.DreamOutputBehaviorType(typ) {
	case apitype.DreamCreateNew:
		var in struct {
			Type string `json:"type"`
		}
		return b, strictUnmarshal("output_behavior", raw, &in)
	case apitype.DreamUpdateExisting:
		if err := strictUnmarshal("output_behavior", raw, &b); err != nil {
			return b, err
		}
		if err := checkString("output_behavior.memory_store_id", b.MemoryStoreID, true, 256); err != nil {
			return b, err
		}
		if b.MemoryStoreID != input {
			return b, invalid("output_behavior.memory_store_id",
				"must be the memory store the dream reads (%s): update_existing writes the result into its input", input)
		}
		return b, nil
	}
	return b, invalid("output_behavior.type", `must be "create_new" or "update_existing", got %q`, typ)
}

func (s *Server) dreamCreate(w http.ResponseWriter, r *http.Request) error {
	var req dreamCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Inputs == nil {
		return invalid("inputs", "required")
	}
	inputs, err := parseDreamInputs(req.Inputs)
	if err != nil {
		return err
	}
	model, err := parseDreamModel(req.Model)
	if err != nil {
		return err
	}
	if req.Instructions != nil {
		if err := checkText("instructions", *req.Instructions, true, maxDreamInstructionsLen); err != nil {
			return err
		}
	}
	d := &apitype.Dream{Type: apitype.ObjectDream, ID: apitype.NewID(apitype.PrefixDream), Status: apitype.DreamPending,
		Inputs: inputs, Model: model, Instructions: req.Instructions, Outputs: []apitype.DreamOutput{},
		CreatedAt: s.now()}
	if d.OutputBehavior, err = parseOutputBehavior(req.OutputBehavior, d.MemoryStoreInput()); err != nil {
		return err
	}
	if err := s.checkDreamInputs(r.Context(), d); err != nil {
		return err
	}
	if err := s.own(r.Context(), d.ID); err != nil {
		return err
	}
	if err := s.store.DreamCreate(r.Context(), d); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return conflict("another update_existing dream on memory store %s has not ended yet", d.MemoryStoreInput())
		}
		return err
	}
	return writeJSON(w, http.StatusOK, viewDream(d))
}

// checkDreamInputs checks that a new dream's memory store exists and is not archived, and that its sessions
// exist. The runner checks them again when it starts the dream: they may go in between.
func (s *Server) checkDreamInputs(ctx context.Context, d *apitype.Dream) error {
	id := d.MemoryStoreInput()
	ms, err := s.store.MemoryStoreGet(ctx, id)
	if err != nil {
		return lookup(err, "memory store", id)
	}
	if ms.ArchivedAt != nil {
		return invalid("inputs[0].memory_store_id", "memory store %s is archived", id)
	}
	for _, sid := range d.SessionInputs() {
		if _, err := s.store.SessionGet(ctx, sid); err != nil {
			return lookup(err, "session", sid)
		}
	}
	return nil
}

func (s *Server) dreamGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("dream_id")
	d, err := s.store.DreamGet(r.Context(), id)
	if err != nil {
		return lookup(err, "dream", id)
	}
	return writeJSON(w, http.StatusOK, viewDream(d))
}

func (s *Server) dreamList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	lp, limit, c, err := listParams(q, defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	lp.Desc = true
	p := store.DreamListParams{}
	for _, st := range listOf[apitype.DreamStatus](q, "statuses") {
		if !st.Valid() {
			return invalid("statuses", "unknown status %q", st)
		}
		p.Statuses = append(p.Statuses, st)
	}
	data, next, _, err := listByCreated(lp, limit, c, false,
		func(lp *store.ListParams) ([]apitype.Dream, error) {
			p.ListParams = *inWorkspace(r, lp)
			return s.store.DreamList(r.Context(), &p)
		},
		func(d *apitype.Dream) (time.Time, string) { return d.CreatedAt, d.ID })
	if err != nil {
		return err
	}
	for i := range data {
		viewDream(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Dream]{Data: data, NextPage: next})
}

// dreamArchive archives a dream that has ended (400 while it is pending or running); idempotent.
func (s *Server) dreamArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("dream_id")
	now := s.now()
	d, err := s.store.DreamUpdate(r.Context(), id, func(d *apitype.Dream) error {
		if !d.Status.Terminal() {
			return invalid("", "dream %s is %s: only a completed, failed or canceled dream can be archived", id, d.Status)
		}
		if d.ArchivedAt == nil {
			d.ArchivedAt = &now
		}
		return nil
	})
	if err != nil {
		return lookup(err, "dream", id)
	}
	return writeJSON(w, http.StatusOK, viewDream(d))
}

// dreamCancel cancels a pending or running dream and interrupts its session; idempotent on a canceled dream; a
// dream that completed or failed first is a 400.
func (s *Server) dreamCancel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("dream_id")
	now := s.now()
	d, err := s.store.DreamUpdate(r.Context(), id, func(d *apitype.Dream) error {
		switch d.Status {
		case apitype.DreamCanceled:
		case apitype.DreamCompleted, apitype.DreamFailed:
			return invalid("", "dream %s has already %s and cannot be canceled", id, d.Status)
		default:
			d.Status, d.EndedAt = apitype.DreamCanceled, &now
		}
		return nil
	})
	if err != nil {
		return lookup(err, "dream", id)
	}
	if d.SessionID != nil {
		// A retried cancel interrupts again: harmless on a session that is idle.
		if err := s.stopSession(r.Context(), *d.SessionID); err != nil {
			return err
		}
	}
	return writeJSON(w, http.StatusOK, viewDream(d))
}

// stopSession interrupts a session (a dream's, an archived workspace's): its turn ends, and its mounts are
// collected as at any turn's end, so a dream's output store keeps what the dream wrote. A session that is gone
// or has ended needs nothing; an idle one takes the interrupt as a no-op (its status may lag a message it has
// not taken yet).
func (s *Server) stopSession(ctx context.Context, sessionID string) error {
	sess, err := s.store.SessionGet(ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("session %s: %w", sessionID, err)
	}
	if sess.Status == apitype.StatusTerminated || sess.ArchivedAt != nil {
		return nil
	}
	ev, err := apitype.MakeEvent(apitype.EventUserInterrupt, nil)
	if err != nil {
		return err
	}
	_, err = s.store.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID, Events: []apitype.NewEvent{ev}, Wake: true})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("interrupt session %s: %w", sessionID, err)
	}
	return nil
}
