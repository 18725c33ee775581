package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// propagator reads the W3C traceparent and tracestate the official SDKs send.
var propagator = propagation.TraceContext{}

// startSpan starts the server span of a request, a child of the caller's traceparent if it sent one, named by
// the route's pattern without its method (ids stay out of span names).
func (s *Server) startSpan(r *http.Request, pattern, requestID string) (context.Context, trace.Span) {
	ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	route := pattern
	if _, path, ok := strings.Cut(pattern, " "); ok {
		route = path
	}
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
		attribute.String("corral.request_id", requestID),
	}
	name := r.Method
	if route != "" {
		name += " " + route
		attrs = append(attrs, attribute.String("http.route", route))
	}
	if id := sessionInPath(r.URL.Path); id != "" {
		attrs = append(attrs, attribute.String("corral.session.id", id))
	}
	return s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// endSpan ends a request's span with its status; a 5xx is an error of the server, a 4xx the client's (the
// span is not an error: the server did its job).
func endSpan(span trace.Span, status int) {
	if status == 0 {
		status = http.StatusOK
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	switch {
	case status >= 500:
		span.SetStatus(codes.Error, http.StatusText(status))
		span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)),
			attribute.String("corral.failure.component", string(apitype.ComponentAPI)),
			attribute.String("corral.failure.reason", string(apitype.ReasonInternal)))
	case status >= 400:
		// The client's failure: the span is not an error (the server did its job), but it says whose it was.
		reason := apitype.ReasonBadInput
		switch status {
		case http.StatusUnauthorized, http.StatusForbidden:
			reason = apitype.ReasonAuth
		case http.StatusTooManyRequests:
			reason = apitype.ReasonRateLimited
		}
		span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)),
			attribute.String("corral.failure.component", string(apitype.ComponentClient)),
			attribute.String("corral.failure.reason", string(reason)))
	}
	span.End()
}

// endAppendSpan ends the span of an append of client events; a failure other than the session's absence is
// the store's.
func endAppendSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		span.SetAttributes(attribute.String("corral.failure.component", string(apitype.ComponentStore)),
			attribute.String("corral.failure.reason", string(apitype.ReasonAppendFailed)),
			attribute.String("error.type", string(apitype.ReasonAppendFailed)))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traced is a client event carrying the request's trace context (apitype.TraceParentField), so that the brain
// that acts on it, in this process or another, continues the request's trace.
func traced(ctx context.Context, ev apitype.NewEvent) apitype.NewEvent {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ev
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	ev.Data = apitype.WithTraceParent(ev.Data, c["traceparent"])
	return ev
}

// sessionInPath is the session id of a /v1/sessions/{id}/... path, or "".
func sessionInPath(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/sessions/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}
