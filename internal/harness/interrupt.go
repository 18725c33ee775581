package harness

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// interrupt ends the turn: a model call in flight is closed as failed, every open tool call gets an error
// result, and the session goes idle with end_turn. Client events queued behind the interrupt stay queued.
func (t *thread) interrupt(st *state, ints []apitype.Event) error {
	var evs []apitype.NewEvent
	if st.openSpan != nil {
		evs = append(evs, spanEnd(st.openSpan.ID, true, apitype.SpanUsage{}))
	}
	msg := msgInterrupted
	if t.child() {
		msg = msgChildInterrupted
		t.multi.mu.Lock()
		t.sched.interrupted = true
		t.multi.mu.Unlock()
	}
	open := st.open()
	for _, u := range open {
		evs = append(evs, u.closeResult(true, msg))
	}
	fanned := t.fanOut(ints)
	for _, c := range fanned {
		ev := mustEvent(apitype.EventUserInterrupt, apitype.UserInterrupt{SessionThreadID: c.rec.ID})
		ev.Thread, ev.Processed = c.id, false
		evs = append(evs, ev)
	}
	if o := st.outcome; o != nil {
		evs = append(evs, mustEvent(apitype.EventSpanOutcomeEvaluationEnd,
			o.evaluationEnd(apitype.OutcomeInterrupted, "The user interrupted the session.")))
	}
	status := ""
	if st.running() || len(evs) > 0 || (st.idle != nil && st.idle.StopReason.Type != apitype.StopEndTurn) {
		evs = append(evs, idleEvent(apitype.StopReason{Type: apitype.StopEndTurn}))
		status = apitype.StatusIdle
	}
	if len(evs) > 0 {
		if _, err := t.append(status, nil, evs...); err != nil {
			return err
		}
	}
	for _, c := range fanned {
		t.kick(c)
	}
	return t.markProcessed(ints)
}

// errInterrupted cancels a model call or a tool when the user interrupts.
var errInterrupted = errors.New("harness: interrupted by the user")

// errWatchDone ends an interrupt watch whose operation finished.
var errWatchDone = errors.New("harness: operation finished")

// watchInterrupts returns a context for a model call, a tool or a backoff that is cancelled as soon as a
// user.interrupt arrives, or the session terminates (it was archived), and a function that ends the watch and
// reports whether it fired. Other client events arriving meanwhile just queue.
func (t *thread) watchInterrupts() (context.Context, func() bool) {
	ctx, cancel := context.WithCancelCause(t.ctx)
	after := t.seenSeq
	var wg sync.WaitGroup
	wg.Go(func() {
		wake, unsubscribe := t.b.cfg.Store.Subscribe(t.sess.ID)
		defer unsubscribe()
		tick := time.NewTicker(t.b.cfg.PollInterval)
		defer tick.Stop()
		for {
			evs, err := t.b.cfg.Store.EventList(ctx, &store.EventListParams{
				SessionID: t.sess.ID, Scope: store.ScopeAll, AfterSeq: after, Limit: eventPage,
				Types: []apitype.EventType{apitype.EventUserInterrupt, apitype.EventSessionStatusTerminated},
			})
			if err == nil && slices.ContainsFunc(evs, func(e apitype.Event) bool {
				// The session's end (on the primary's part of the log), or an interrupt of this thread.
				return (e.Type == apitype.EventSessionStatusTerminated && e.Thread == "") || (e.ProcessedAt == nil && e.Thread == t.id)
			}) {
				cancel(errInterrupted)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-tick.C:
			}
		}
	})
	return ctx, func() bool {
		cancel(errWatchDone)
		wg.Wait()
		return errors.Is(context.Cause(ctx), errInterrupted)
	}
}
