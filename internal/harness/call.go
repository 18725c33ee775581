package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// call makes one model request under the retry policy; retries live here and nowhere else. Each attempt is a
// span.model_request_start; a failed attempt is closed with span.model_request_end is_error. A retryable error
// appends session.error (retrying) and session.status_rescheduled, backs off (honouring the provider's
// retry-after), and tries again after session.status_running. When retries run out, or the error is not
// retryable, it appends session.error (exhausted) and idles the session with retries_exhausted, and returns
// errTurnEnded. When the model says the prompt is too long, shrink (if set) gives a compacted request to try
// once instead.
//
// With preview set (a conversation answer, not a compaction), each attempt publishes stream previews of the
// answer while it streams (see previewer); a failed or interrupted attempt publishes nothing more, and its
// span.model_request_end closes its previews. An interrupted attempt appends the text it streamed as an
// agent.message before that span end: the model said it, and the next request must show it.
//
// On success it returns the answer, whose span.model_request_start is still open: the caller closes it together
// with what it appends.
func (t *thread) call(req *model.Request, preview bool, shrink func() (*model.Request, error)) (*answer, error) {
	for attempt := 0; ; attempt++ {
		ctx, done := t.watchInterrupts()
		var pv *previewer
		var said partialText // a conversation answer's text (preview is set only for those)
		var onDelta func(model.Delta)
		if preview {
			onDelta = said.add
		}
		durable := make(chan struct{}) // closed once the request's start is in the log
		if preview && t.b.cfg.PreviewInterval > 0 && !t.child() {
			// Previews are the session's (the store keys them by session): a child's would show on the
			// session's condensed stream, so only the primary thread publishes them.
			pv = t.newPreviewer(durable)
			onDelta = func(d model.Delta) {
				said.add(d)
				pv.onDelta(d)
			}
		}
		callCtx, cancelCall := context.WithTimeoutCause(ctx, t.b.cfg.ModelTimeout, errModelTimeout)
		started := t.appendBeside(cancelCall, durable, mustEvent(apitype.EventSpanModelRequestStart, nil))
		span := t.startModelSpan(req)
		began := time.Now()
		resp, err := t.b.cfg.Model.Call(trace.ContextWithSpan(callCtx, span), req, onDelta)
		took := time.Since(began)
		timedOut := errors.Is(context.Cause(callCtx), errModelTimeout)
		cancelCall()
		interrupted := done()
		start, serr := started()
		if serr != nil {
			// The request's start never made the log: nothing of its answer may (the lease is lost, or the
			// store failed).
			pv.finish(false)
			span.SetStatus(codes.Error, serr.Error()) // the append's own span says why
			span.End()
			return nil, serr
		}
		startID := start[0].ID
		span.SetAttributes(attribute.String("corral.event.id", startID))
		t.recordModel(req.Model, took, resp, err, interrupted, timedOut)
		endModelSpan(span, req, resp, err, interrupted, timedOut)
		if err == nil && !interrupted {
			return &answer{resp: resp, startID: startID, ids: pv.finish(true)}, nil
		}
		if timedOut && !interrupted {
			// A stalled stream: retried like a dropped connection.
			err = &model.Error{Kind: model.ErrServer, Err: fmt.Errorf("no complete answer within %v", t.b.cfg.ModelTimeout)}
		}
		ids := pv.finish(false)
		if t.ctx.Err() != nil {
			return nil, fmt.Errorf("model call: %w", t.ctx.Err())
		}
		failed := spanEnd(startID, true, apitype.SpanUsage{})
		if interrupted {
			// What the model said before the interrupt is part of the conversation: the next request shows it
			// (see transcript), under the id its previews gave it. The interrupt step ends the turn.
			evs := []apitype.NewEvent{failed}
			if msg, ok := said.message(ids); ok {
				evs = []apitype.NewEvent{msg, failed}
			}
			if _, err := t.append("", nil, evs...); err != nil {
				return nil, err
			}
			return nil, errInterrupted
		}
		var me *model.Error
		if !errors.As(err, &me) {
			me = &model.Error{Kind: model.ErrServer, Err: err}
		}
		if me.Kind == model.ErrContextTooLong && shrink != nil {
			if _, err := t.append("", nil, failed); err != nil {
				return nil, err
			}
			if req, err = shrink(); err != nil {
				return nil, err
			}
			shrink = nil
			attempt--
			continue
		}
		body := apitype.SessionErrorBody{Type: sessionErrorType(me), Message: errorMessage(me), Source: modelSource(req.Model, me, timedOut)}
		if me.Retryable() && attempt < t.b.cfg.Retry.MaxRetries {
			body.RetryStatus.Type = apitype.RetryStatusRetrying
			_, err := t.append(apitype.StatusRescheduling, nil, failed,
				mustEvent(apitype.EventSessionError, apitype.SessionError{Error: body}),
				mustEvent(apitype.EventSessionStatusRescheduled, nil))
			if err != nil {
				return nil, err
			}
			if err := t.backoff(attempt, me.RetryAfter); err != nil {
				return nil, err
			}
			if _, err := t.append(apitype.StatusRunning, nil, mustEvent(apitype.EventSessionStatusRunning, nil)); err != nil {
				return nil, err
			}
			continue
		}
		if me.Kind == model.ErrBilling {
			// Terminal (retry_status terminal): no later turn can be billed either, so the session is
			// terminated, as the hosted service does; terminated is final.
			body.RetryStatus.Type = apitype.RetryStatusTerminal
			_, err = t.append(apitype.StatusTerminated, nil, failed,
				mustEvent(apitype.EventSessionError, apitype.SessionError{Error: body}),
				mustEvent(apitype.EventSessionStatusTerminated, nil))
			if err != nil {
				return nil, err
			}
			return nil, errTurnEnded
		}
		body.RetryStatus.Type = apitype.RetryStatusExhausted
		_, err = t.append(apitype.StatusIdle, nil, failed,
			mustEvent(apitype.EventSessionError, apitype.SessionError{Error: body}),
			idleEvent(apitype.StopReason{Type: apitype.StopRetriesExhausted}))
		if err != nil {
			return nil, err
		}
		return nil, errTurnEnded
	}
}

// appendBeside appends evs on a goroutine of its own and returns a wait for the append's result; if the append
// succeeds, it closes durable, and if it fails, it calls fail (the model call's cancel), so that the call it
// runs beside stops. It is how a model request's span.model_request_start (and the lead that rides on it) is
// written while the request goes out: the request acts on nothing outside Corral, so it need not wait for its
// start to be durable (the append before acting that rule 2 of DESIGN.md asks is the tool call's), and nothing
// of the answer is used, appended or previewed (the previewer waits for durable) before the start's append has
// succeeded. A crash before that append leaves the log as a crash before the request did: the next brain makes
// the request again. The wait must be called once, before the thread appends again; until then the thread's
// state is the append's.
func (t *thread) appendBeside(fail func(), durable chan<- struct{}, evs ...apitype.NewEvent) func() ([]apitype.Event, error) {
	type result struct {
		evs []apitype.Event
		err error
	}
	ch := make(chan result, 1)
	go func() {
		out, err := t.append("", nil, evs...)
		if err != nil {
			fail()
		} else {
			close(durable)
		}
		ch <- result{out, err}
	}()
	return func() ([]apitype.Event, error) {
		r := <-ch
		return r.evs, r.err
	}
}

// answer is a model call that succeeded.
type answer struct {
	resp *model.Response
	// startID is the id of the call's span.model_request_start, which is still open.
	startID string
	// ids are the event ids the stream previews gave the answer's agent.thinking and agent.message events, by
	// content block index (nil without previews).
	ids map[int]string
}

// errModelTimeout cancels a model call that has not finished within Config.ModelTimeout.
var errModelTimeout = errors.New("harness: model call timed out")

// backoff waits before retry attempt+1: exponential from BaseDelay with jitter, capped at MaxDelay, and never
// shorter than the provider's retry-after. An interrupt cuts it short (errInterrupted).
func (t *thread) backoff(attempt int, retryAfter time.Duration) error {
	p := t.b.cfg.Retry
	d := p.BaseDelay << min(attempt, 30)
	if d <= 0 || d > p.MaxDelay {
		d = p.MaxDelay
	}
	d = d/2 + rand.N(d/2+1) // jitter in [d/2, d]
	d = max(d, retryAfter)
	ctx, done := t.watchInterrupts()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	if done() {
		return errInterrupted
	}
	if t.ctx.Err() != nil {
		return fmt.Errorf("backoff: %w", t.ctx.Err())
	}
	return nil
}

// sessionErrorType maps a model error to the session.error type clients know.
// recordModel puts one model request into the metrics.
func (r *run) recordModel(modelID string, d time.Duration, resp *model.Response, err error, interrupted, timedOut bool) {
	kind := ""
	switch {
	case interrupted:
		kind = "interrupted"
	case timedOut:
		kind = "timeout"
	case err != nil:
		kind = errorKind(err)
	}
	var u apitype.SpanUsage
	if resp != nil && err == nil {
		u = resp.Usage
	}
	r.b.cfg.Metrics.ModelRequest(modelID, d, kind, u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens)
}

// errorKind names a model error's kind for metrics and traces.
func errorKind(err error) string {
	var me *model.Error
	if !errors.As(err, &me) {
		return "unknown"
	}
	switch me.Kind {
	case model.ErrOverloaded:
		return "overloaded"
	case model.ErrRateLimited:
		return "rate_limited"
	case model.ErrServer:
		return "server"
	case model.ErrInvalid:
		return "invalid"
	case model.ErrAuth:
		return "auth"
	case model.ErrContextTooLong:
		return "context_too_long"
	case model.ErrBilling:
		return "billing"
	}
	return "unknown"
}

func sessionErrorType(e *model.Error) apitype.SessionErrorType {
	switch e.Kind {
	case model.ErrOverloaded:
		return apitype.SessionErrModelOverloaded
	case model.ErrRateLimited:
		return apitype.SessionErrModelRateLimited
	case model.ErrBilling:
		return apitype.SessionErrBilling
	default:
		return apitype.SessionErrModelRequestFailed
	}
}

// errorMessage says what went wrong, and for configuration errors what to configure.
func errorMessage(e *model.Error) string {
	switch {
	case errors.Is(e, model.ErrNoCredentials):
		return "The model request was not sent: " + model.ErrNoCredentials.Error() + "."
	case e.Kind == model.ErrAuth:
		return fmt.Sprintf("The model provider rejected the credentials (%v). Check the API key this server is configured with.", e.Err)
	case e.Kind == model.ErrBilling:
		return fmt.Sprintf("The model provider refused to bill the account (%v); the session cannot continue.", e.Err)
	case e.Kind == model.ErrInvalid:
		return fmt.Sprintf("The model provider rejected the request (%v).", e.Err)
	case e.Kind == model.ErrContextTooLong:
		return fmt.Sprintf("The conversation is too long for the model even after compaction (%v).", e.Err)
	case e.Kind == model.ErrOverloaded:
		return fmt.Sprintf("The model is overloaded (%v).", e.Err)
	case e.Kind == model.ErrRateLimited:
		return fmt.Sprintf("The model provider is rate limiting requests (%v).", e.Err)
	}
	return fmt.Sprintf("The model request failed (%v).", e.Err)
}

// partialText collects the text an answer streams, for a call cut short by an interrupt.
type partialText struct {
	first  int // content index of the first text block
	blocks [][]byte
	last   int // content index of the last text block
}

// add records a streamed fragment; it runs on the model call's goroutine.
func (p *partialText) add(d model.Delta) {
	if d.Type != model.BlockText || d.Text == "" {
		return
	}
	if len(p.blocks) == 0 {
		p.first = d.Index
	}
	if len(p.blocks) == 0 || p.last != d.Index {
		p.blocks = append(p.blocks, nil)
		p.last = d.Index
	}
	p.blocks[len(p.blocks)-1] = append(p.blocks[len(p.blocks)-1], d.Text...)
}

// message is the agent.message of the text streamed so far, named by the previews' id for it (ids, by content
// index), or false when no text streamed.
func (p *partialText) message(ids map[int]string) (apitype.NewEvent, bool) {
	if len(p.blocks) == 0 {
		return apitype.NewEvent{}, false
	}
	content := make([]apitype.ContentBlock, len(p.blocks))
	for i, b := range p.blocks {
		content[i] = apitype.TextBlock(string(b))
	}
	ev := mustEvent(apitype.EventAgentMessage, apitype.AgentMessage{Content: content})
	ev.ID = ids[p.first]
	return ev, true
}
