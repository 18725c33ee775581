package harness

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Spans follow the OpenTelemetry GenAI semantic conventions: a run of a session is an invoke_agent span, each
// model request a chat span under it (gen_ai.request.model, gen_ai.usage.*), each tool call an execute_tool
// span, and a sandbox provisioning a span under the tool call that caused it. A failed span says which part
// failed in corral.failure.part: model, hands (the sandbox backend), mcp, or brain.

const tracerName = "github.com/corralhq/corral/internal/harness"

func (b *Brain) tracer() trace.Tracer { return b.cfg.TracerProvider.Tracer(tracerName) }

// startRun starts the span of one run of a session (a claim, until its lease is handed back).
func (b *Brain) startRun(ctx context.Context, sessionID string) (context.Context, trace.Span) {
	return b.tracer().Start(ctx, "invoke_agent", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.conversation.id", sessionID),
		attribute.String("corral.session.id", sessionID)))
}

// endRun ends the run's span; the agent is known once the run loaded the session.
func (r *run) endRun(err error) {
	if r.sess != nil {
		r.span.SetName("invoke_agent " + r.sess.Agent.Name)
		r.span.SetAttributes(r.agentAttrs()...)
	}
	switch {
	case errors.Is(err, errLeaseLost) || errors.Is(context.Cause(r.ctx), errLeaseLost):
		failed(r.span, "brain", "lease_lost", errLeaseLost)
	case err != nil:
		failed(r.span, "brain", "internal", err)
	}
	r.span.End()
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

// failed marks a span failed by part, with the error's type and message.
func failed(span trace.Span, part, errType string, err error) {
	span.SetAttributes(attribute.String("corral.failure.part", part), attribute.String("error.type", errType))
	span.SetStatus(codes.Error, err.Error())
}

// startModelSpan starts the chat span of one model request, whose span.model_request_start event in the
// session's log is startID (corral.event.id: the log and the trace name the same request).
func (r *run) startModelSpan(req *model.Request, startID string) trace.Span {
	attrs := append(r.agentAttrs(),
		attribute.String("corral.event.id", startID),
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.request.model", req.Model),
		attribute.Int("gen_ai.request.max_tokens", req.MaxTokens),
		attribute.String("gen_ai.conversation.id", r.sess.ID))
	_, span := r.b.tracer().Start(r.spanCtx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return span
}

// endModelSpan ends a model request's span with its usage or its failure.
func endModelSpan(span trace.Span, resp *model.Response, err error, interrupted, timedOut bool) {
	switch {
	case interrupted:
		span.SetAttributes(attribute.String("corral.outcome", "interrupted"))
	case timedOut:
		failed(span, "model", "timeout", errModelTimeout)
	case err != nil:
		failed(span, "model", errorKind(err), err)
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

// startToolSpan starts the execute_tool span of a tool call routed by route (hands or mcp).
func (r *run) startToolSpan(name, callID, route string) (context.Context, trace.Span) {
	attrs := append(r.agentAttrs(),
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.call.id", callID),
		attribute.String("corral.tool.route", route),
		attribute.String("corral.session.id", r.sess.ID))
	return r.b.tracer().Start(r.spanCtx, "execute_tool "+name, trace.WithAttributes(attrs...))
}

// endToolSpan ends a tool call's span; a failure is the part's (route) unless the tool merely reported an
// error result, which is the model's to handle and not a failure of Corral.
func endToolSpan(span trace.Span, part string, err error, isError bool) {
	switch {
	case err != nil:
		failed(span, part, "tool_failed", err)
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
		failed(p.span, "hands", "provision_failed", rep.Err)
	}
	p.span.End()
	p.span = nil
}

// startAppendSpan starts the span of one fenced append of n events to the session's log (store.append), under
// the run's span; a run whose span is not started yet (none in tests that build a run by hand) gets a root.
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
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		failed(span, "brain", "lease_lost", err)
	case err != nil:
		failed(span, "store", "append_failed", err)
	}
	span.End()
}
