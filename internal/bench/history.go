package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The history section (issue 30) measures how a turn's platform overhead grows with the events already in its
// session's log. A brain that wakes a session reads the log back to its last compaction (harness loadTail) and
// sends the whole conversation to the model, so both grow with the history until a compaction bounds them.
// For each level a fresh session's log is filled through the store with whole earlier turns of six events, as a
// brain writes a talk-only turn (the user's message, already processed; session.status_running; the model
// request's start; the agent's answer; the request's end; session.status_idle),
// then HistoryTurns talk-only turns are sent through the API one after the other and timed as the ttft section
// times a turn.

// HistoryLevel is one level of the history section.
type HistoryLevel struct {
	// Events is the log's length before the first measured turn.
	Events   int
	Overhead Dist
	// First is the first turn's overhead: its brain reads the tail from the log. The later turns' brain takes up
	// the tail it kept after the turn before (harness tailcache.go) and reads only the events that follow it.
	First  time.Duration
	Phases [NumPhases]Dist
	// RequestBytes is the size of the body of the model request of the level's last turn.
	RequestBytes int
	Errors       int
	FirstError   string
}

// historyMark begins the markers of the history section's turns: the fake model keeps their requests' sizes.
const historyMark = "bench history "

// historyText is the text of each filled message: about what a short chat message weighs (60 bytes).
const historyText = "an earlier message of this session, as long as a short one."

func (b *benchRun) history(ctx context.Context) error {
	s, err := b.startServer(ctx, "history", serverSpec{fake: b.fake})
	if err != nil {
		return err
	}
	defer s.close()
	for _, n := range b.cfg.HistoryEvents {
		b.progress("history: a session with %d events in its log, %d turns", n, b.cfg.HistoryTurns)
		lv, err := b.historyLevel(ctx, s, n)
		if err != nil {
			return err
		}
		b.progress("history: %d events: overhead p50 %s p95 %s ms (wake p50 %s, to model p50 %s ms), model request %s",
			lv.Events, Ms(lv.Overhead.P50), Ms(lv.Overhead.P95), Ms(lv.Phases[PhaseWake].P50), Ms(lv.Phases[PhaseToModel].P50), bytesText(float64(lv.RequestBytes)))
		b.rep.History = append(b.rep.History, lv)
	}
	return nil
}

// historyLevel fills a fresh session with n events (rounded down to whole turns) and times the turns after them.
func (b *benchRun) historyLevel(ctx context.Context, s *benchServer, n int) (HistoryLevel, error) {
	lv := HistoryLevel{}
	id, err := s.c.CreateSession(ctx, s.agentID, s.envID)
	if err != nil {
		return lv, err
	}
	if err := fillHistory(ctx, s.st, id, n); err != nil {
		return lv, err
	}
	evs, err := s.st.EventList(ctx, &store.EventListParams{SessionID: id, Desc: true, Limit: 1})
	if err != nil {
		return lv, fmt.Errorf("history: read the filled log: %w", err)
	}
	if len(evs) > 0 {
		lv.Events = int(evs[0].Seq)
	}
	st, err := s.c.Open(ctx, id)
	if err != nil {
		return lv, err
	}
	defer st.Close()
	var samples []Sample
	for k := range b.cfg.HistoryTurns {
		p := &prepared{id: id, stream: st, marker: fmt.Sprintf("%s%d %d %s", historyMark, n, k, id)}
		smp, err := turn(ctx, s.c, b.fake, p, 2*time.Minute)
		if err != nil {
			lv.Errors++
			if lv.FirstError == "" {
				lv.FirstError = err.Error()
			}
			// The stream may be mid-turn: the level's later turns would read the wrong events.
			break
		}
		samples = append(samples, smp)
		lv.RequestBytes = b.fake.requestBytes(p.marker)
	}
	b.fake.forget()
	if len(samples) == 0 {
		return lv, fmt.Errorf("history at %d events: %s", n, lv.FirstError)
	}
	overheads := Overheads(samples)
	lv.Overhead, lv.Phases, lv.First = Summarize(overheads), PhaseDists(samples), overheads[0]
	return lv, nil
}

// fillHistory appends n events to the session's log, as whole earlier turns (n rounded down), 250 turns per append.
func fillHistory(ctx context.Context, st store.Store, sessionID string, n int) error {
	text := []apitype.ContentBlock{apitype.TextBlock(historyText)}
	var one []apitype.NewEvent
	for _, e := range []struct {
		typ     apitype.EventType
		payload any
	}{
		{apitype.EventUserMessage, apitype.UserMessage{Content: text}},
		{apitype.EventSessionStatusRunning, nil},
		{apitype.EventSpanModelRequestStart, nil},
		{apitype.EventAgentMessage, apitype.AgentMessage{Content: text}},
		{apitype.EventSpanModelRequestEnd, apitype.SpanModelRequestEnd{}},
		{apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}, StopDetails: json.RawMessage("null")}},
	} {
		ev, err := apitype.MakeEvent(e.typ, e.payload)
		if err != nil {
			return err
		}
		ev.Processed = true // the user's message too: a brain took it in its turn
		one = append(one, ev)
	}
	turns := n / len(one)
	for turns > 0 {
		k := min(turns, 250)
		batch := make([]apitype.NewEvent, 0, k*len(one))
		for range k {
			batch = append(batch, one...)
		}
		if _, err := st.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID, Events: batch}); err != nil {
			return fmt.Errorf("history: fill the log: %w", err)
		}
		turns -= k
	}
	return nil
}

func historyMarkdown(levels []HistoryLevel, turns int) string {
	var b strings.Builder
	b.WriteString("\n### A session's history\n\n")
	fmt.Fprintf(&b, "A turn's platform overhead in a session whose log already holds earlier talk-only turns (six events each: the user's "+
		"message, the running and idle statuses, the model request's start and end, the answer), %d talk-only turns per level, one after the other. The first turn's brain reads "+
		"the log back to its last compaction; the later turns' takes up the tail it kept after the turn before and reads only what follows it. Each "+
		"sends the whole conversation, which grows with the history until a compaction bounds it.\n\n", turns)
	b.WriteString("| events in the log | first turn (ms) | overhead p50 / p95 (ms) | wake p50 / p95 (ms) | to model p50 / p95 (ms) | model request | errors |\n|---|---|---|---|---|---|---|\n")
	for _, lv := range levels {
		fmt.Fprintf(&b, "| %d | %s | %s / %s | %s / %s | %s / %s | %s | %d |\n", lv.Events, Ms(lv.First), Ms(lv.Overhead.P50), Ms(lv.Overhead.P95),
			Ms(lv.Phases[PhaseWake].P50), Ms(lv.Phases[PhaseWake].P95), Ms(lv.Phases[PhaseToModel].P50), Ms(lv.Phases[PhaseToModel].P95),
			bytesText(float64(lv.RequestBytes)), lv.Errors)
	}
	return b.String()
}

func writeHistorySummary(w io.Writer, levels []HistoryLevel) {
	fmt.Fprintln(w)
	for _, lv := range levels {
		fmt.Fprintf(w, "history: %d events: first turn %s ms, overhead p50 %s p95 %s ms, model request %s\n", lv.Events, Ms(lv.First),
			Ms(lv.Overhead.P50), Ms(lv.Overhead.P95), bytesText(float64(lv.RequestBytes)))
	}
}
