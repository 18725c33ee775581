package worker

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The worker's spans: an execute_tool span per tool call it runs, a child of the brain's turn that made the
// call (the agent.tool_use's traceparent), with a sandbox.provision span under it when the call provisions. The
// user.tool_result it posts carries the span's context (internal/client sends the traceparent header), so the
// API request and the brain's next step stay in the turn's trace.

// startToolSpan starts the span of one call, under the trace of the brain's turn that made it.
func (w *worker) startToolSpan(ctx context.Context, sessionID string, c *call) (context.Context, trace.Span) {
	if c.traceparent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": c.traceparent})
	}
	return w.tracer.Start(ctx, "execute_tool "+c.name, trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", c.name),
		attribute.String("gen_ai.tool.call.id", c.id),
		attribute.String("corral.tool.route", "worker"),
		attribute.String("corral.session.id", sessionID),
		attribute.String("corral.sandbox.backend", w.pool.Backend())))
}

// endToolSpan ends a call's span, failed in the hands when the sandbox (not the tool) failed (src).
func endToolSpan(span trace.Span, src *apitype.FailureSource, res sandbox.Result, err error) {
	switch {
	case src != nil:
		span.SetAttributes(failureAttrs(src.Component, src.Backend, src.Reason)...)
		msg := string(src.Reason)
		if err != nil {
			msg = err.Error()
		}
		span.SetStatus(codes.Error, msg)
	case res.IsError:
		span.SetAttributes(attribute.Bool("corral.tool.is_error", true))
	}
	span.End()
}

// failureAttrs are a failed span's attributes, as the brain's (internal/harness) name them.
func failureAttrs(c apitype.FailureComponent, backend string, reason apitype.FailureReason) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("corral.failure.component", string(c)),
		attribute.String("corral.failure.backend", backend),
		attribute.String("corral.failure.reason", string(reason)),
		attribute.String("error.type", string(reason)),
	}
}

// provisionSpan reports a provisioning as a sandbox.provision span under the call's span.
func (w *worker) provisionSpan(ctx context.Context) func(sandbox.ProvisionReport) {
	var span trace.Span
	return func(rep sandbox.ProvisionReport) {
		if !rep.Done {
			_, span = w.tracer.Start(ctx, "sandbox.provision", trace.WithAttributes(attribute.String("corral.sandbox.backend", rep.Backend)))
			return
		}
		if span == nil {
			_, span = w.tracer.Start(ctx, "sandbox.provision", trace.WithTimestamp(time.Now().Add(-rep.Duration)))
		}
		if rep.Err != nil {
			span.SetAttributes(failureAttrs(apitype.ComponentHands, rep.Backend, apitype.ReasonProvisionFailed)...)
			span.SetStatus(codes.Error, rep.Err.Error())
		}
		span.End()
		span = nil
	}
}
