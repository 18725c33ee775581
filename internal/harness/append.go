package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// lead is what a model turn announces before its model request: the session running, and the client events the
// request picks up, marked processed. It rides on the next append (the request's span.model_request_start), so
// that the announcement and the request's start are one write, and a crash can never leave a client event
// marked processed without the turn that picked it up.
type lead struct {
	events    []apitype.NewEvent
	status    string
	processed []apitype.Event
}

// append appends events fenced by the lease, with the session status and usage they imply, and adds them to
// the tail. A pending lead goes first, in the same append; the events returned are the caller's. It refuses
// once the work is cancelled: a brain that lost its lease or is stopping writes nothing.
func (t *thread) append(status string, usage *apitype.SessionUsage, evs ...apitype.NewEvent) ([]apitype.Event, error) {
	return t.appendP(&store.EventAppendParams{Events: evs, Status: status, Usage: usage})
}

// appendP is append with the parameters spelled out; with p.Release, the run is over once it succeeds.
func (t *thread) appendP(p *store.EventAppendParams) ([]apitype.Event, error) {
	if t.ctx.Err() != nil {
		return nil, context.Cause(t.ctx)
	}
	status, evs := p.Status, p.Events
	led := 0
	if l := t.lead; l != nil {
		led = len(l.events)
		p.Events = append(slices.Clip(l.events), evs...)
		p.Status = cmp.Or(status, l.status)
		for _, e := range l.processed {
			p.MarkProcessed = append(p.MarkProcessed, e.Seq)
		}
	}
	var kicks []*thread
	if t.rec != nil {
		// A thread of a multi-agent session: its append is made its own, and the session's status follows.
		t.multi.mu.Lock()
		defer t.multi.mu.Unlock()
		if p.Usage != nil {
			// Threads price their model requests concurrently and append in the lock's order: the append carries
			// the session's usage as it is now, so that neither the session's total nor its last session.usage
			// goes back.
			u := t.usage
			p.Usage = &u
			for i, e := range p.Events {
				if e.Type == apitype.EventSessionUsage {
					p.Events[i] = t.usageEvent()
				}
			}
		}
		kicks = t.translate(p)
	}
	status = p.Status
	if status == apitype.StatusIdle && !t.activeFrom.IsZero() {
		p.ActiveSeconds = time.Since(t.activeFrom).Seconds()
	}
	out, err := t.appendRaw(p)
	if err != nil {
		return nil, err
	}
	t.lead, t.released = nil, p.Release
	if status != "" {
		t.b.cfg.Metrics.Status(status)
	}
	switch {
	case status == apitype.StatusIdle:
		t.activeDone += p.ActiveSeconds
		t.activeFrom = time.Time{}
	case t.activeFrom.IsZero() && (status == apitype.StatusRunning || status == apitype.StatusRescheduling):
		t.activeFrom = time.Now()
	}
	if len(out) > 0 {
		t.tail.setProcessed(p.MarkProcessed, out[0].CreatedAt)
	}
	for _, k := range kicks {
		t.kickLocked(k)
	}
	if t.rec != nil {
		// Other threads append to this one's part of the log too (messages, the session's status): read it.
		return out[led:], t.refresh()
	}
	if len(out) > 0 && out[0].Seq == t.tail.lastSeq+1 {
		t.tail.events = append(t.tail.events, out...)
		t.tail.lastSeq = out[len(out)-1].Seq
		return out[led:], nil
	}
	if t.released {
		return out[led:], nil // the run is over: nothing reads the tail again
	}
	return out[led:], t.refresh()
}

// appendRaw appends with the lease and does not touch the tail; it is safe from any goroutine. An append that
// has started finishes even if the work is cancelled meanwhile.
func (r *run) appendRaw(p *store.EventAppendParams) ([]apitype.Event, error) {
	p.SessionID, p.Lease = r.sess.ID, r.lease.get()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.b.cfg.LeaseTTL)
	defer cancel()
	span := r.startAppendSpan(len(p.Events))
	start := time.Now()
	out, err := r.b.cfg.Store.EventAppend(ctx, p)
	r.b.cfg.Metrics.StoreAppend(time.Since(start), err)
	endAppendSpan(span, err)
	if err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			r.cancel(errLeaseLost)
		}
		return nil, fmt.Errorf("append to %s: %w", r.sess.ID, err)
	}
	return out, nil
}

// markProcessed sets processed_at on client events, in the log and in the tail.
func (t *thread) markProcessed(evs []apitype.Event) error {
	if len(evs) == 0 {
		return nil
	}
	if t.ctx.Err() != nil {
		return context.Cause(t.ctx)
	}
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq
	}
	now := apitype.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), t.b.cfg.LeaseTTL)
	defer cancel()
	err := t.b.cfg.Store.EventMarkProcessed(ctx, &store.EventMarkProcessedParams{
		SessionID: t.sess.ID, Lease: t.lease.get(), Seqs: seqs, At: now,
	})
	if err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			t.cancel(errLeaseLost)
		}
		return fmt.Errorf("mark processed: %w", err)
	}
	t.tail.setProcessed(seqs, now)
	return nil
}
