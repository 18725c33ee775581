package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// stopAndWait stops a corral process with SIGTERM (it flushes its spans) and waits until it exited.
func stopAndWait(t *testing.T, s *server) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("corral did not exit after SIGTERM")
	}
}

// TestTracesAcrossProcesses runs the scaled-out shape with tracing on: `corral serve --brains 0` (the API alone)
// exporting OTLP/HTTP, and `corral harness` exporting OTLP/gRPC, on one PostgreSQL. A client creates a session
// with an initial message inside its own trace (the W3C traceparent the SDKs send). The API's request span joins
// the caller's trace; the brain in the other process continues it: its invoke_agent span is a child of the
// API request's span, and its chat span (with the GenAI attributes) and store.append spans are children of that.
func TestTracesAcrossProcesses(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDSN(t)
	model := modeltest.NewServer(t)
	model.Script(modeltest.Turn{Text: "Traced.", Usage: modeltest.Usage{InputTokens: 30, OutputTokens: 4}})

	httpRcv := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: httpRcv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	grpcRcv, grpcAddr := startGRPCReceiver(t)

	otelEnv := func(endpoint, protocol, service string) []string {
		var env []string
		for _, kv := range serverEnv(model, testKey) {
			if !bytes.HasPrefix([]byte(kv), []byte("OTEL_")) {
				env = append(env, kv)
			}
		}
		return append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL="+protocol, "OTEL_SERVICE_NAME="+service)
	}
	key := sharedVaultKey(t)
	api := startCorral(t, otelEnv("http://"+ln.Addr().String(), "http/protobuf", "corral-api"), "corral: listening on ",
		"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--sandbox", "none", "--db", db, "--brains", "0", "--vault-key-file", key)
	brain := startCorral(t, otelEnv("http://"+grpcAddr, "grpc", "corral-harness"), "corral: harness running",
		"harness", "--db", db, "--data", t.TempDir(), "--sandbox", "none", "--brains", "2", "--lease-ttl", "2s", "--poll", "200ms", "--vault-key-file", key)

	// The caller's trace, as an instrumented SDK sends it.
	callerTrace, _ := trace.TraceIDFromHex("5bf92f3577b34da6a3ce929d0e0e4736")
	callerSpan, _ := trace.SpanIDFromHex("10f067aa0ba902b7")
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: callerTrace, SpanID: callerSpan, TraceFlags: trace.FlagsSampled, Remote: true}))
	c := api.client()
	agent, err := c.AgentCreate(context.Background(), &client.AgentCreateParams{Name: "traced", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.EnvironmentCreate(context.Background(), &client.EnvironmentCreateParams{Name: "e", Config: apitype.EnvConfig{Type: "cloud"}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.SessionCreate(ctx, &client.SessionCreateParams{Agent: client.AgentRef{ID: agent.ID}, EnvironmentID: env.ID,
		InitialEvents: []apitype.NewEvent{client.UserMessage("Say something.")}})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c, sess.ID)
	stopAndWait(t, brain)
	stopAndWait(t, api)

	var create *tracepb.Span
	httpRcv.mu.Lock()
	for _, req := range httpRcv.reqs {
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					if s.GetName() == "POST /v1/sessions" {
						create = s
					}
				}
			}
		}
	}
	httpRcv.mu.Unlock()
	if create == nil {
		t.Fatal("the API exported no span for POST /v1/sessions")
	}
	if !bytes.Equal(create.GetTraceId(), callerTrace[:]) || !bytes.Equal(create.GetParentSpanId(), callerSpan[:]) {
		t.Errorf("API span trace %x parent %x, want the caller's %x and %x", create.GetTraceId(), create.GetParentSpanId(), callerTrace[:], callerSpan[:])
	}

	grpcRcv.mu.Lock()
	defer grpcRcv.mu.Unlock()
	byID := map[string]*tracepb.Span{}
	for _, s := range grpcRcv.spans {
		byID[string(s.GetSpanId())] = s
	}
	var run, chat *tracepb.Span
	appends := 0
	for _, s := range grpcRcv.spans {
		switch s.GetName() {
		case "invoke_agent traced":
			run = s
		case "chat claude-sonnet-4-5":
			chat = s
		case "store.append":
			if p := byID[string(s.GetParentSpanId())]; p != nil && p.GetName() == "invoke_agent traced" {
				appends++
			}
		}
	}
	if run == nil || chat == nil {
		t.Fatalf("the harness exported %d spans, without an invoke_agent and a chat span", len(grpcRcv.spans))
	}
	if !bytes.Equal(run.GetTraceId(), callerTrace[:]) || !bytes.Equal(run.GetParentSpanId(), create.GetSpanId()) {
		t.Errorf("brain's invoke_agent: trace %x parent %x; want the caller's trace %x under the API request's span %x",
			run.GetTraceId(), run.GetParentSpanId(), callerTrace[:], create.GetSpanId())
	}
	if !bytes.Equal(chat.GetParentSpanId(), run.GetSpanId()) {
		t.Errorf("chat span's parent %x, want the invoke_agent span %x", chat.GetParentSpanId(), run.GetSpanId())
	}
	attrs := map[string]string{}
	ints := map[string]int64{}
	for _, kv := range chat.GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		ints[kv.GetKey()] = kv.GetValue().GetIntValue()
	}
	if attrs["gen_ai.operation.name"] != "chat" || attrs["gen_ai.request.model"] != "claude-sonnet-4-5" || attrs["gen_ai.agent.id"] != agent.ID ||
		ints["gen_ai.usage.input_tokens"] != 30 || ints["gen_ai.usage.output_tokens"] != 4 {
		t.Errorf("chat span attributes: %v %v", attrs, ints)
	}
	if appends < 2 {
		t.Errorf("store.append spans under the run = %d, want at least 2 (the request's start, the answer)", appends)
	}
}

// spans collects the spans an OTLP/HTTP receiver got.
func (o *otlpReceiver) spans() []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, req := range o.reqs {
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				out = append(out, ss.GetSpans()...)
			}
		}
	}
	return out
}

// TestTracesWorker: in a self_hosted environment the tool call runs on `corral worker`, another process, and
// its span joins the turn's trace: `corral serve` (OTLP/HTTP) writes the agent.tool_use with the turn's
// traceparent; the worker (OTLP/gRPC) parents its execute_tool span (and the sandbox.provision under it) on the
// brain's invoke_agent span; its user.tool_result request is a child of its execute_tool span, and the brain
// records the call as an execute_tool span of route worker, all in the caller's trace. The call times out on the
// worker: its result says so (source hands, bwrap, timeout), and both tool spans fail with that source.
func TestTracesWorker(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo traced; sleep 30","timeout_ms":1000}`}}},
		modeltest.Turn{Text: "Done."},
	)
	httpRcv := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: httpRcv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	grpcRcv, grpcAddr := startGRPCReceiver(t)
	withOTel := func(env []string, endpoint, protocol string) []string {
		return append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL="+protocol)
	}
	srv := startCorral(t, withOTel(serverEnv(model, testKey), "http://"+ln.Addr().String(), "http/protobuf"), "corral: listening on ",
		"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--sandbox", sandboxKind(), "--lease-ttl", "2s", "--poll", "200ms")
	sdk := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(srv.url), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	envID, key, agentID := selfHostedEnv(ctx, t, sdk, "traced-worker")
	worker := startCorral(t, withOTel(os.Environ(), "http://"+grpcAddr, "grpc"), "corral: worker ", "worker", "--url", srv.url,
		"--env", envID, "--key", key, "--data", t.TempDir(), "--worker-id", "traced", "--sandbox", "bwrap",
		"--sandbox-uids", "420000", "--session-idle", "1s")

	callerTrace, _ := trace.TraceIDFromHex("6bf92f3577b34da6a3ce929d0e0e4736")
	callerSpan, _ := trace.SpanIDFromHex("20f067aa0ba902b7")
	tctx := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: callerTrace, SpanID: callerSpan, TraceFlags: trace.FlagsSampled, Remote: true}))
	c := srv.client()
	sess, err := c.SessionCreate(tctx, &client.SessionCreateParams{Agent: client.AgentRef{ID: agentID}, EnvironmentID: envID,
		InitialEvents: []apitype.NewEvent{client.UserMessage("Run it.")}})
	if err != nil {
		t.Fatal(err)
	}
	events := waitIdle(t, c, sess.ID)
	if count(events, "user.tool_result") != 1 {
		t.Fatalf("the worker did not answer the call: %v", types(events))
	}
	wantSrc := apitype.FailureSource{Component: apitype.ComponentHands, Backend: "bwrap", Reason: apitype.ReasonTimeout}
	for _, e := range events {
		if e["type"] == "user.tool_result" {
			b, _ := json.Marshal(e["source"])
			var src apitype.FailureSource
			_ = json.Unmarshal(b, &src)
			if e["is_error"] != true || src != wantSrc {
				t.Errorf("worker's result: is_error %v source %s, want %+v", e["is_error"], b, wantSrc)
			}
		}
	}
	stopAndWait(t, worker)
	stopAndWait(t, srv)

	server := httpRcv.spans()
	grpcRcv.mu.Lock()
	defer grpcRcv.mu.Unlock()
	byName := func(spans []*tracepb.Span, name string, attr, value string) *tracepb.Span {
		for _, s := range spans {
			if s.GetName() != name {
				continue
			}
			if attr == "" {
				return s
			}
			for _, kv := range s.GetAttributes() {
				if kv.GetKey() == attr && kv.GetValue().GetStringValue() == value {
					return s
				}
			}
		}
		return nil
	}
	run := byName(server, "invoke_agent traced-worker", "", "")
	brainTool := byName(server, "execute_tool bash", "corral.tool.route", "worker")
	workerTool := byName(grpcRcv.spans, "execute_tool bash", "", "")
	provision := byName(grpcRcv.spans, "sandbox.provision", "", "")
	if run == nil || brainTool == nil || workerTool == nil || provision == nil {
		t.Fatalf("spans: brain's run %v, brain's tool %v, worker's tool %v, worker's provisioning %v", run != nil, brainTool != nil, workerTool != nil, provision != nil)
	}
	for name, s := range map[string]*tracepb.Span{"run": run, "brain's tool span": brainTool, "worker's tool span": workerTool, "provisioning": provision} {
		if !bytes.Equal(s.GetTraceId(), callerTrace[:]) {
			t.Errorf("%s: trace %x, want the caller's %x", name, s.GetTraceId(), callerTrace[:])
		}
	}
	for name, s := range map[string]*tracepb.Span{"brain's tool span": brainTool, "worker's tool span": workerTool} {
		reason := ""
		for _, kv := range s.GetAttributes() {
			if kv.GetKey() == "corral.failure.reason" {
				reason = kv.GetValue().GetStringValue()
			}
		}
		if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || reason != "timeout" {
			t.Errorf("%s: status %v, corral.failure.reason %q; want an error, timeout", name, s.GetStatus(), reason)
		}
	}
	if !bytes.Equal(workerTool.GetParentSpanId(), run.GetSpanId()) {
		t.Errorf("worker's execute_tool parent %x, want the brain's invoke_agent %x", workerTool.GetParentSpanId(), run.GetSpanId())
	}
	if !bytes.Equal(provision.GetParentSpanId(), workerTool.GetSpanId()) {
		t.Errorf("worker's sandbox.provision parent %x, want its execute_tool %x", provision.GetParentSpanId(), workerTool.GetSpanId())
	}
	var result *tracepb.Span
	for _, s := range server {
		if s.GetName() == "POST /v1/sessions/{session_id}/events" && bytes.Equal(s.GetParentSpanId(), workerTool.GetSpanId()) {
			result = s
		}
	}
	if result == nil {
		t.Error("no API span of the worker's user.tool_result under its execute_tool span")
	}
}
