package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver on 127.0.0.1: it decodes what the exporter posts to
// /v1/traces.
type otlpReceiver struct {
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.reqs = append(o.reqs, &req)
	o.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestTracingFromEnv: no OTLP endpoint means no tracer; an unsupported exporter or protocol is refused by
// name; with OTEL_EXPORTER_OTLP_ENDPOINT the spans reach an OTLP/HTTP receiver when the provider stops, under
// the resource's service.name (corral by default, OTEL_SERVICE_NAME otherwise).
func TestTracingFromEnv(t *testing.T) {
	ctx := context.Background()
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
	}
	tp, stop, err := tracing(ctx)
	stop()
	if err != nil || tp != nil {
		t.Fatalf("without an endpoint: tracer %v, err %v; want none", tp, err)
	}

	rcv := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: rcv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())

	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, _, err := tracing(ctx); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("OTEL_TRACES_EXPORTER=zipkin: err = %v, want a refusal naming it", err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if tp, _, err := tracing(ctx); err != nil || tp != nil {
		t.Errorf("OTEL_TRACES_EXPORTER=none: tracer %v, err %v; want none", tp, err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, _, err := tracing(ctx); err == nil || !strings.Contains(err.Error(), "http/json") {
		t.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=http/json: err = %v, want a refusal naming it", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

	for _, c := range []struct{ env, want string }{{"", "corral"}, {"corral-eu-1", "corral-eu-1"}} {
		t.Setenv("OTEL_SERVICE_NAME", c.env)
		rcv.mu.Lock()
		rcv.reqs = nil
		rcv.mu.Unlock()
		tp, stop, err := tracing(ctx)
		if err != nil || tp == nil {
			t.Fatalf("with an endpoint: tracer %v, err %v", tp, err)
		}
		_, span := tp.Tracer("test").Start(ctx, "probe")
		span.End()
		stop() // flushes the batch to the receiver
		rcv.mu.Lock()
		var names []string
		service := ""
		for _, req := range rcv.reqs {
			for _, rs := range req.GetResourceSpans() {
				for _, kv := range rs.GetResource().GetAttributes() {
					if kv.GetKey() == "service.name" {
						service = kv.GetValue().GetStringValue()
					}
				}
				for _, ss := range rs.GetScopeSpans() {
					for _, s := range ss.GetSpans() {
						names = append(names, s.GetName())
					}
				}
			}
		}
		rcv.mu.Unlock()
		if len(names) != 1 || names[0] != "probe" || service != c.want {
			t.Errorf("OTEL_SERVICE_NAME=%q: receiver got spans %v of service %q, want [probe] of %q", c.env, names, service, c.want)
		}
	}
}

// grpcReceiver is an in-process OTLP/gRPC trace receiver.
type grpcReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (g *grpcReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			g.spans = append(g.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startGRPCReceiver serves an OTLP/gRPC receiver on 127.0.0.1 until the test ends.
func startGRPCReceiver(t *testing.T) (*grpcReceiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &grpcReceiver{}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, rcv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return rcv, ln.Addr().String()
}

// TestTracingGRPC: with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc (which wins over OTEL_EXPORTER_OTLP_PROTOCOL),
// the spans reach an OTLP/gRPC receiver, with their parent.
func TestTracingGRPC(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
	}
	rcv, addr := startGRPCReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	ctx := context.Background()
	tp, stop, err := tracing(ctx)
	if err != nil || tp == nil {
		t.Fatalf("grpc: tracer %v, err %v", tp, err)
	}
	pctx, parent := tp.Tracer("test").Start(ctx, "parent")
	_, child := tp.Tracer("test").Start(pctx, "child")
	child.End()
	parent.End()
	stop()
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	byName := map[string]*tracepb.Span{}
	for _, s := range rcv.spans {
		byName[s.GetName()] = s
	}
	p, c := byName["parent"], byName["child"]
	if len(rcv.spans) != 2 || p == nil || c == nil {
		t.Fatalf("the gRPC receiver got %d spans %v, want parent and child", len(rcv.spans), byName)
	}
	if !bytes.Equal(c.GetParentSpanId(), p.GetSpanId()) || !bytes.Equal(c.GetTraceId(), p.GetTraceId()) {
		t.Errorf("child's parent %x trace %x, want %x in %x", c.GetParentSpanId(), c.GetTraceId(), p.GetSpanId(), p.GetTraceId())
	}
}
