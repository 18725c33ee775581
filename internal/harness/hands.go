package harness

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
	"go.opentelemetry.io/otel/trace"
)

// handsExec is the hands' executor: a built-in tool run by the brain in the session's sandbox (execute). A call a
// crash cut short is closed as of unknown outcome.
type handsExec struct{ builtinExec }

func (handsExec) name() string                            { return "hands" }
func (handsExec) recover() bool                           { return true }
func (handsExec) run(t *thread, u *toolUse) (bool, error) { return true, t.execute(u) }

// execute runs an approved built-in tool in the hands and appends its result. The model sees a sandbox failure
// as an error result; the next call provisions a fresh sandbox from the same recipe.
func (t *thread) execute(u *toolUse) error {
	delete(t.fresh, u.ev.ID)
	if t.b.cfg.Hands == nil {
		// Approved by a brain that had hands (the log says so): this one has none.
		_, err := t.append("", nil, failedResult(u.ev.ID, source(apitype.ComponentHands, "", apitype.ReasonUnavailable), msgNoHands))
		return err
	}
	input := u.data.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	spanCtx, span := t.startToolSpan(u.data.Name, u.ev.ID, "hands")
	call := &sandbox.Call{Recipe: t.recipe(), Shell: t.id, Name: u.data.Name, Input: input, OnProvision: t.provisionReporter(spanCtx)}
	ctx, done := t.watchInterrupts()
	began := time.Now()
	res, err := t.b.cfg.Hands.Execute(trace.ContextWithSpan(ctx, span), call)
	t.b.cfg.Metrics.ToolCall(u.data.Name, "hands", time.Since(began), err != nil || res.IsError)
	interrupted := done()
	var src *apitype.FailureSource
	if !interrupted {
		src = handsSource(t.b.backend(), res, err)
	}
	endToolSpan(span, src, err, res.IsError)
	var ev apitype.NewEvent
	switch {
	case interrupted:
		ev = toolResult(u.ev.ID, true, msgInterrupted)
	case t.ctx.Err() != nil:
		return context.Cause(t.ctx)
	case err != nil && len(res.Content) > 0:
		// The hands explained the failure for the model.
		ev = mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{ToolUseID: u.ev.ID, Content: res.Content, IsError: true, Source: src})
	case err != nil:
		ev = failedResult(u.ev.ID, src, fmt.Sprintf("The sandbox failed while running this tool, so its outcome is unknown (%v). The next tool call gets a fresh sandbox.", err))
	default:
		ev = mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{ToolUseID: u.ev.ID, Content: res.Content, IsError: res.IsError, Source: src})
	}
	_, err = t.append("", nil, ev)
	return err
}

// recipe is what the hands need to (re)build the session's sandbox. It names nothing of a host: where the
// sandbox's files are is the hands' business (the Pool's HostDirs).
func (r *run) recipe() sandbox.Recipe {
	return sandbox.Recipe{SessionID: r.sess.ID, Environment: r.env, Resources: r.sess.Resources, Skills: r.skills()}
}

// provisionReporter returns the OnProvision callback that puts sandbox provisioning into the log as
// span.sandbox_provision_start / span.sandbox_provision_end.
func (r *run) provisionReporter(parent context.Context) func(sandbox.ProvisionReport) {
	var mu sync.Mutex
	startID := ""
	spans := &provisionSpans{tracer: r.b.tracer(), parent: parent}
	return func(p sandbox.ProvisionReport) {
		mu.Lock()
		defer mu.Unlock()
		spans.report(p)
		var ev apitype.NewEvent
		if !p.Done {
			ev = mustEvent(apitype.EventSpanSandboxProvisionStart, apitype.SandboxProvisionStart{Backend: p.Backend, Image: p.Image})
		} else {
			r.b.cfg.Metrics.Provisioned(p.Backend, p.Duration, p.Err)
			end := apitype.SandboxProvisionEnd{
				ProvisionStartID: startID, Backend: p.Backend, IsError: p.Err != nil,
				DurationMS: float64(p.Duration) / float64(time.Millisecond),
			}
			if p.Err != nil {
				end.Error = p.Err.Error()
				end.Source = provisionSource(p)
			}
			ev = mustEvent(apitype.EventSpanSandboxProvisionEnd, end)
		}
		events := append([]apitype.NewEvent{ev}, resourceErrors(p.Backend, p.ResourceErrors)...)
		if ie := (*sandbox.ImageError)(nil); p.Done && errors.As(p.Err, &ie) {
			events = append(events, imageError(p.Backend, ie))
		}
		out, err := r.appendRaw(&store.EventAppendParams{Events: events})
		if err != nil {
			r.b.cfg.Logger.Warn("provision span not logged", "session", r.sess.ID, "err", err)
			return
		}
		if !p.Done && len(out) > 0 {
			startID = out[0].ID
		}
	}
}

// resourceErrors are the session.error events for session resources that could not be placed in the workspace:
// as the hosted service does, retry_status retrying, and the session continues without them.
func resourceErrors(backend string, errs []*sandbox.ResourceError) []apitype.NewEvent {
	events := make([]apitype.NewEvent, 0, len(errs))
	for _, e := range errs {
		body := apitype.SessionErrorBody{
			Type:        cmp.Or(e.ErrorType, apitype.SessionErrUnknown),
			Message:     e.Error(),
			RetryStatus: apitype.RetryStatus{Type: apitype.RetryStatusRetrying},
			Source:      source(apitype.ComponentHands, backend, apitype.ReasonResourceUnavailable),
		}
		if e.URL != "" {
			body.RepositoryURL = &e.URL
		}
		events = append(events, mustEvent(apitype.EventSessionError, apitype.SessionError{Error: body}))
	}
	return events
}

// imageError is the session.error of a sandbox that could not be provisioned because the environment's image
// failed to build: it names the package and why. The session goes on (retrying): the tool call gets an error
// result, and the next one tries again (a fixed package list builds anew).
func imageError(backend string, e *sandbox.ImageError) apitype.NewEvent {
	return mustEvent(apitype.EventSessionError, apitype.SessionError{Error: apitype.SessionErrorBody{
		Type:           apitype.SessionErrEnvironmentBuild,
		Message:        e.Error(),
		RetryStatus:    apitype.RetryStatus{Type: apitype.RetryStatusRetrying},
		Source:         source(apitype.ComponentHands, backend, apitype.ReasonImageBuildFailed),
		PackageManager: e.Manager, Package: e.Package,
	}})
}

// provisionEagerly, with Config.EagerHands, makes sure the session's sandbox exists before the model call, the
// way a coupled design provisions a container before it can call the model. Lazy hands (the default) skip it.
// The session is announced running first, so the provisioning shows inside the turn.
func (t *thread) provisionEagerly() error {
	p, ok := t.b.cfg.Hands.(sandbox.Provisioner)
	if !t.b.cfg.EagerHands || !ok || !t.tools.hasBuiltin() {
		return nil
	}
	if len(t.lead.events) > 0 {
		if _, err := t.append("", nil); err != nil {
			return err
		}
	}
	if err := p.Provision(t.ctx, &sandbox.Call{Recipe: t.recipe(), OnProvision: t.provisionReporter(t.spanCtx)}); err != nil {
		t.b.cfg.Logger.Warn("eager sandbox provisioning failed", "session", t.sess.ID, "err", err)
	}
	return nil
}

// collectOutputs has the hands collect the files the session left under sandbox.OutputsMount into the Files
// API before the session goes idle, so that a client that sees the idle can list them. A failure (the outputs'
// quota, a file that cannot be read) is a session.error in the same write as the idle; the turn still ends.
func (r *run) collectOutputs() []apitype.NewEvent {
	oc, ok := r.b.cfg.Hands.(sandbox.OutputCollector)
	if !ok {
		return nil
	}
	rec := r.recipe()
	if err := oc.CollectOutputs(r.ctx, &rec); err != nil {
		r.b.cfg.Logger.Warn("session outputs not collected", "session", r.sess.ID, "err", err)
		return []apitype.NewEvent{mustEvent(apitype.EventSessionError, apitype.SessionError{Error: apitype.SessionErrorBody{
			Type:        apitype.SessionErrUnknown,
			Message:     "collecting the session's outputs (retried at the next turn's end): " + err.Error(),
			RetryStatus: apitype.RetryStatus{Type: apitype.RetryStatusRetrying},
			Source:      source(apitype.ComponentHands, r.b.backend(), apitype.ReasonOutputsFailed),
		}})}
	}
	return nil
}
