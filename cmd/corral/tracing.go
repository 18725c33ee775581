package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracing builds the OpenTelemetry tracer provider of serve, harness and worker from the standard environment,
// or none (nil) when it asks for no traces: OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none, or no
// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. The exporter is OTLP over HTTP
// (http/protobuf, the default) or gRPC (grpc), as OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or else
// OTEL_EXPORTER_OTLP_PROTOCOL says, configured by the OTEL_EXPORTER_OTLP_* variables it reads itself (endpoint,
// headers, timeout, TLS; an http:// endpoint is plaintext gRPC); the sampler by OTEL_TRACES_SAMPLER(_ARG)
// (default: parent-based, always on); the resource by OTEL_SERVICE_NAME (default corral) and
// OTEL_RESOURCE_ATTRIBUTES. The returned function flushes and stops it.
func tracing(ctx context.Context) (trace.TracerProvider, func(), error) {
	none := func() {}
	if os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return nil, none, nil
	}
	switch exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return nil, none, nil
	case "", "otlp":
	default:
		return nil, none, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: corral exports traces with otlp only", exp)
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, none, nil
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, none, fmt.Errorf("OTLP protocol %q: corral exports traces over http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, none, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	env, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, none, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "corral")), env)
	if err != nil {
		return nil, none, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx) // flushes the spans still batched
	}, nil
}
