package harness

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Spans follow the OpenTelemetry GenAI semantic conventions: a turn of a session is an invoke_agent span, each
// model request a chat span under it (gen_ai.request.model, gen_ai.usage.*), each tool call an execute_tool
// span, a sandbox provisioning a span under the tool call that caused it, and each append a store.append span.
//
// A turn continues the trace of the client event that started it: the API stores the request's traceparent in
// the event (apitype.TraceParentField), so a brain in another process (corral harness) parents its invoke_agent
// span there, and the agent.tool_use events it writes carry the turn's traceparent on to a self-hosted worker.
// A failed span says which part failed, as a session.error's source does: corral.failure.component,
// corral.failure.backend and corral.failure.reason, with error.type and an error status.

const tracerName = "github.com/corralhq/corral/internal/harness"

// propagator reads and writes the W3C traceparent of events.
var propagator = propagation.TraceContext{}

func (b *Brain) tracer() trace.Tracer { return b.cfg.TracerProvider.Tracer(tracerName) }

// startRun starts the span of one turn of a session (invoke_agent), under parent.
func (b *Brain) startRun(parent context.Context, sessionID string) (context.Context, trace.Span) {
	return b.tracer().Start(parent, "invoke_agent", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.conversation.id", sessionID),
		attribute.String("corral.session.id", sessionID)))
}

// follow makes the run's span the one of the turn that evs (the client events the next step acts on) belong
// to: a client event sent in another trace than the current span's ends that span and starts the turn's,
// parented by the event's traceparent. A run with no span yet takes the trace of the latest client event of
// its tail that carries one (a turn taken over mid-way continues its trace), or starts a root.
func (r *run) follow(evs []apitype.Event) {
	tp := lastTraceParent(evs)
	if tp == "" && r.span == nil && r.main != nil && r.main.tail != nil {
		tp = lastTraceParent(r.main.tail.events)
	}
	parent := context.Background()
	if tp != "" {
		parent = propagator.Extract(parent, propagation.MapCarrier{"traceparent": tp})
	}
	sc := trace.SpanContextFromContext(parent)
	if r.span != nil {
		if !sc.IsValid() || sc.TraceID() == r.span.SpanContext().TraceID() {
			return
		}
		r.endSpan(nil)
	}
	r.spanCtx, r.span = r.b.startRun(parent, r.lease.get().SessionID)
}

// lastTraceParent is the traceparent of the last client event of evs that carries one.
func lastTraceParent(evs []apitype.Event) string {
	for _, e := range slices.Backward(evs) {
		if !apitype.IsUserEvent(e.Type) {
			continue
		}
		if tp := e.TraceParent(); tp != "" {
			return tp
		}
	}
	return ""
}

// traceParent is the traceparent of the run's current span, for the events that hand the turn on ("" without a
// valid span).
func (r *run) traceParent() string {
	if r.spanCtx == nil {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(r.spanCtx, c)
	return c["traceparent"]
}

// endRun ends the run's current span with the run's outcome; a run that failed before it had one gets one,
// so the failure shows.
func (r *run) endRun(err error) {
	if r.span == nil {
		if err == nil {
			return
		}
		r.spanCtx, r.span = r.b.startRun(context.Background(), r.lease.get().SessionID)
	}
	r.endSpan(err)
}

// endSpan ends the current turn span.
func (r *run) endSpan(err error) {
	if r.sess != nil {
		r.span.SetName("invoke_agent " + r.sess.Agent.Name)
		r.span.SetAttributes(r.agentAttrs()...)
	}
	switch {
	case errors.Is(err, errLeaseLost) || errors.Is(context.Cause(r.ctx), errLeaseLost):
		failed(r.span, source(apitype.ComponentBrain, "", apitype.ReasonLeaseLost), errLeaseLost)
	case err != nil:
		failed(r.span, source(apitype.ComponentBrain, "", apitype.ReasonInternal), err)
	}
	r.span.End()
	r.span = nil
}

func (r *run) agentAttrs() []attribute.KeyValue {
	if r.sess == nil {
		return nil
	}
	return []attribute.KeyValue{
		attribute.String("gen_ai.agent.id", r.sess.Agent.ID),
		attribute.String("gen_ai.agent.name", r.sess.Agent.Name),
		attribute.Int("corral.agent.version", r.sess.Agent.Version),
	}
}

// failed marks a span failed by src, with the error's message.
func failed(span trace.Span, src *apitype.FailureSource, err error) {
	span.SetAttributes(failureAttrs(src)...)
	span.SetStatus(codes.Error, err.Error())
}

// failureAttrs are the attributes of a failed span: the source, and error.type (its reason).
func failureAttrs(src *apitype.FailureSource) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("corral.failure.component", string(src.Component)),
		attribute.String("corral.failure.reason", string(src.Reason)),
		attribute.String("error.type", string(src.Reason)),
	}
	if src.Backend != "" {
		attrs = append(attrs, attribute.String("corral.failure.backend", src.Backend))
	}
	return attrs
}

// recoverSpan records, under the run's span, that this brain resumed a turn another brain left mid-way.
func (r *run) recoverSpan(src *apitype.FailureSource) {
	_, span := r.b.tracer().Start(r.spanCtx, "corral.recover", trace.WithAttributes(failureAttrs(src)...))
	span.SetAttributes(attribute.String("corral.session.id", r.sess.ID))
	span.End()
}

// startModelSpan starts the chat span of one model request. The caller adds the id of the request's
// span.model_request_start event in the session's log once it is appended (corral.event.id: the log and the
// trace name the same request).
func (r *run) startModelSpan(req *model.Request) trace.Span {
	attrs := append(r.agentAttrs(),
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", modelProvider(req.Model)),
		attribute.String("gen_ai.request.model", req.Model),
		attribute.Int("gen_ai.request.max_tokens", req.MaxTokens),
		attribute.String("gen_ai.conversation.id", r.sess.ID))
	_, span := r.b.tracer().Start(r.spanCtx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return span
}

// endModelSpan ends a model request's span with its usage or its failure.
func endModelSpan(span trace.Span, req *model.Request, resp *model.Response, err error, interrupted, timedOut bool) {
	switch {
	case interrupted:
		span.SetAttributes(attribute.String("corral.outcome", "interrupted"))
	case timedOut:
		failed(span, modelSource(req.Model, err, true), errModelTimeout)
	case err != nil:
		failed(span, modelSource(req.Model, err, false), err)
	case resp != nil:
		span.SetAttributes(
			attribute.Int64("gen_ai.usage.input_tokens", resp.Usage.InputTokens),
			attribute.Int64("gen_ai.usage.output_tokens", resp.Usage.OutputTokens),
			attribute.Int64("gen_ai.usage.cache_read.input_tokens", resp.Usage.CacheReadInputTokens),
			attribute.Int64("gen_ai.usage.cache_creation.input_tokens", resp.Usage.CacheCreationInputTokens),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{resp.StopReason}))
	}
	span.End()
}

// startToolSpan starts the execute_tool span of a tool call routed by route (hands, mcp, client or worker).
func (r *run) startToolSpan(name, callID, route string) (context.Context, trace.Span) {
	attrs := append(r.agentAttrs(),
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.call.id", callID),
		attribute.String("corral.tool.route", route),
		attribute.String("corral.session.id", r.sess.ID))
	return r.b.tracer().Start(r.spanCtx, "execute_tool "+name, trace.WithAttributes(attrs...))
}

// endToolSpan ends a tool call's span: failed by src when a part of Corral failed; an error result the tool
// merely reported is the model's to handle, not a failure of Corral.
func endToolSpan(span trace.Span, src *apitype.FailureSource, err error, isError bool) {
	switch {
	case src != nil:
		if err == nil {
			err = errors.New(string(src.Reason))
		}
		failed(span, src, err)
	case isError:
		span.SetAttributes(attribute.Bool("corral.tool.is_error", true))
	}
	span.End()
}

// provisionSpans turns provisioning reports into a span under parent: started at the first report, ended
// (with the backend and the outcome) at the one that says it is done. Not safe for concurrent use: the
// caller's reporter holds its lock.
type provisionSpans struct {
	tracer trace.Tracer
	parent context.Context
	span   trace.Span
}

func (p *provisionSpans) report(rep sandbox.ProvisionReport) {
	if !rep.Done {
		_, p.span = p.tracer.Start(p.parent, "sandbox.provision", trace.WithAttributes(attribute.String("corral.sandbox.backend", rep.Backend)))
		return
	}
	if p.span == nil {
		_, p.span = p.tracer.Start(p.parent, "sandbox.provision", trace.WithTimestamp(time.Now().Add(-rep.Duration)))
	}
	p.span.SetAttributes(attribute.String("corral.sandbox.backend", rep.Backend), attribute.Int("corral.resource_errors", len(rep.ResourceErrors)))
	if rep.Err != nil {
		failed(p.span, provisionSource(rep), rep.Err)
	}
	p.span.End()
	p.span = nil
}

// provisionSource attributes a failed provisioning.
func provisionSource(rep sandbox.ProvisionReport) *apitype.FailureSource {
	if errors.Is(rep.Err, context.DeadlineExceeded) {
		return source(apitype.ComponentHands, rep.Backend, apitype.ReasonTimeout)
	}
	return source(apitype.ComponentHands, rep.Backend, apitype.ReasonProvisionFailed)
}

// startAppendSpan starts the span of one fenced append of n events to the session's log (store.append), under
// the run's span; a run whose span is not started yet gets a root.
func (r *run) startAppendSpan(n int) trace.Span {
	parent := r.spanCtx
	if parent == nil {
		parent = context.Background()
	}
	_, span := r.b.tracer().Start(parent, "store.append", trace.WithAttributes(attribute.Int("corral.events", n)))
	return span
}

// endAppendSpan ends an append's span: a lost lease is the brain's (another took the session over), any other
// failure the store's.
func endAppendSpan(span trace.Span, err error) {
	if err != nil {
		failed(span, appendSource(err), err)
	}
	span.End()
}

// clientToolSpans records the tool calls a client (custom tools) or a self-hosted worker (built-in tools in a
// self_hosted environment) answered, as execute_tool spans from the call's event to its result's, under the
// span of the turn that made the call and linked to the span of the turn the result starts.
func (r *run) clientToolSpans(st *state, results []apitype.Event) {
	for _, res := range results {
		var v struct {
			ToolUseID       string                 `json:"tool_use_id"`
			CustomToolUseID string                 `json:"custom_tool_use_id"`
			IsError         bool                   `json:"is_error"`
			Source          *apitype.FailureSource `json:"source"`
		}
		if res.DecodeData(&v) != nil {
			continue
		}
		u := st.byID[cmp.Or(v.CustomToolUseID, v.ToolUseID)]
		if u == nil {
			continue
		}
		route := u.exec().name()
		attrs := append(r.agentAttrs(),
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", u.data.Name),
			attribute.String("gen_ai.tool.call.id", u.ev.ID),
			attribute.String("corral.tool.route", route),
			attribute.String("corral.session.id", r.sess.ID))
		// The span belongs to the turn that made the call (the call's traceparent), linked to the one it answers.
		parent := r.spanCtx
		if tp := u.ev.TraceParent(); tp != "" {
			parent = propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
		}
		_, span := r.b.tracer().Start(parent, "execute_tool "+u.data.Name, trace.WithTimestamp(u.ev.CreatedAt), trace.WithAttributes(attrs...),
			trace.WithLinks(trace.LinkFromContext(r.spanCtx)))
		switch {
		case v.Source != nil:
			failed(span, v.Source, errors.New(string(v.Source.Reason)))
		case v.IsError:
			span.SetAttributes(attribute.Bool("corral.tool.is_error", true))
		}
		span.End(trace.WithTimestamp(res.CreatedAt))
	}
}
