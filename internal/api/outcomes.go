package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// resolveRubric turns a user.define_outcome's file rubric into a text rubric holding the file's contents (the
// spec lets the echo show a file rubric resolved to text): the brain and its grader then read the rubric from the
// log alone. A file that does not exist, has expired, or is not text of at most maxRubricLen bytes is the
// client's error.
func (s *Server) resolveRubric(ctx context.Context, p string, ev *apitype.NewEvent) error {
	if ev.Type != apitype.EventUserDefineOutcome {
		return nil
	}
	var d apitype.DefineOutcome
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		return err
	}
	var rubric struct {
		Type   string `json:"type"`
		FileID string `json:"file_id"`
	}
	if err := json.Unmarshal(d.Rubric, &rubric); err != nil {
		return err
	}
	if rubric.Type != "file" {
		return nil
	}
	fp := path(path(p, "rubric"), "file_id")
	if s.files == nil {
		return invalid(fp, "this server has no Files API: give the rubric as text")
	}
	// The file is read through the API's store first: another workspace's is not found (the Files service
	// reads any).
	_, err := s.store.FileGet(ctx, rubric.FileID)
	var f *store.File
	var rc io.ReadCloser
	if err == nil {
		f, rc, err = s.files.Open(ctx, rubric.FileID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return invalid(fp, "no file %q", rubric.FileID)
	}
	if err != nil {
		return fmt.Errorf("rubric file %s: %w", rubric.FileID, err)
	}
	defer rc.Close()
	if f.ExpiresAt != nil && !s.now().Before(*f.ExpiresAt) {
		return invalid(fp, "file %q has expired", rubric.FileID)
	}
	b, err := io.ReadAll(io.LimitReader(rc, maxRubricLen+1))
	if err != nil {
		return fmt.Errorf("rubric file %s: %w", rubric.FileID, err)
	}
	if len(b) > maxRubricLen || !utf8.Valid(b) || len(b) == 0 {
		return invalid(fp, "the rubric file must be UTF-8 text of 1 to %d bytes", maxRubricLen)
	}
	d.Rubric, _ = json.Marshal(map[string]string{"type": "text", "content": string(b)})
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	ev.Data = data
	return nil
}

// outcomeEvaluations derives the session's outcome_evaluations from its log: one per user.define_outcome, in
// order, with the state its evaluation events say.
func (s *Server) outcomeEvaluations(ctx context.Context, sessionID string) ([]json.RawMessage, error) {
	var ev evaluations
	after := int64(0)
	for {
		evs, err := s.store.EventList(ctx, &store.EventListParams{SessionID: sessionID, AfterSeq: after, Limit: maxEventLimit,
			Types: []apitype.EventType{apitype.EventUserDefineOutcome, apitype.EventSpanOutcomeEvaluationStart,
				apitype.EventSpanOutcomeEvaluationEnd}})
		if err != nil {
			return nil, err
		}
		if err := ev.read(evs); err != nil {
			return nil, err
		}
		if len(evs) < maxEventLimit {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	return ev.encode()
}

// evaluations are outcome evaluations as a session's events, read in order, say.
type evaluations struct {
	out  []*apitype.OutcomeEvaluation
	byID map[string]*apitype.OutcomeEvaluation
}

// read takes the next events of the log (those of other types are skipped).
func (v *evaluations) read(events []apitype.Event) error {
	if v.byID == nil {
		v.byID = map[string]*apitype.OutcomeEvaluation{}
	}
	for _, e := range events {
		switch e.Type {
		case apitype.EventUserDefineOutcome:
			var d apitype.DefineOutcome
			if err := e.DecodeData(&d); err != nil {
				return err
			}
			o := &apitype.OutcomeEvaluation{Type: apitype.ObjectOutcomeEvaluation, OutcomeID: d.OutcomeID,
				Description: d.Description, Result: apitype.OutcomePending}
			if e.ProcessedAt != nil {
				o.Result = apitype.OutcomeRunning
			}
			v.out = append(v.out, o)
			v.byID[d.OutcomeID] = o
		case apitype.EventSpanOutcomeEvaluationStart:
			var sp apitype.OutcomeEvaluationSpan
			if err := e.DecodeData(&sp); err != nil {
				return err
			}
			if o := v.byID[sp.OutcomeID]; o != nil {
				o.Iteration, o.Result = sp.Iteration, apitype.OutcomeEvaluating
			}
		case apitype.EventSpanOutcomeEvaluationEnd:
			var end apitype.OutcomeEvaluationEnd
			if err := e.DecodeData(&end); err != nil {
				return err
			}
			o := v.byID[end.OutcomeID]
			if o == nil {
				continue
			}
			o.Explanation = end.Explanation
			if end.Result == apitype.OutcomeNeedsRevision {
				// The agent revises: the next iteration is running.
				o.Iteration, o.Result = end.Iteration+1, apitype.OutcomeRunning
				continue
			}
			at := e.CreatedAt.UTC().Truncate(time.Microsecond)
			o.Iteration, o.Result, o.CompletedAt = end.Iteration, end.Result, &at
		}
	}
	return nil
}

// encode is the evaluations as the session's outcome_evaluations.
func (v *evaluations) encode() ([]json.RawMessage, error) {
	raws := make([]json.RawMessage, len(v.out))
	for i, o := range v.out {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		raws[i] = b
	}
	return raws, nil
}
