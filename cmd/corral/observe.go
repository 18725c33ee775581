package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/corralhq/corral/internal/metrics"
	corral "github.com/corralhq/corral/internal/server" // aliased: the e2e tests have a type server
)

// logFlags adds --log-format to a flag set.
type logFlags struct{ format string }

func (f *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.format, "log-format", envOr("CORRAL_LOG_FORMAT", "text"), "log `format` on stderr: text or json (slog; env CORRAL_LOG_FORMAT); lines about a session carry its id as \"session\"")
}

// logger is the process's logger: slog text or JSON on stderr, at debug level when CORRAL_DEBUG is set.
func (f *logFlags) logger(io *stdio) (*slog.Logger, error) {
	level := slog.LevelInfo
	if os.Getenv("CORRAL_DEBUG") != "" {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.format {
	case "", "text":
		return slog.New(slog.NewTextHandler(io.err, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(io.err, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.format)
}

// metricsFlags adds --metrics-listen to a flag set.
type metricsFlags struct{ listen string }

func (f *metricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "metrics-listen", os.Getenv("CORRAL_METRICS_LISTEN"), "`address` to serve Prometheus metrics on at /metrics, apart from the API and without authentication, e.g. 127.0.0.1:9464 (env CORRAL_METRICS_LISTEN; default: off)")
}

// observe sets the server's metrics (a registry served on --metrics-listen, none when it is empty) and its
// tracer (from the OTEL_* environment, tracing.go). The returned function flushes the traces: call it after the
// server's Stop.
func (f *metricsFlags) observe(ctx context.Context, cfg *corral.Config) (func(), error) {
	if f.listen != "" {
		cfg.Metrics, cfg.MetricsListen = metrics.New(), f.listen
	}
	tp, stop, err := tracing(ctx)
	if err != nil {
		return nil, err
	}
	cfg.TracerProvider = tp
	return stop, nil
}

// tracingHelp adds to a command's usage the environment its traces are configured by (tracing.go).
func tracingHelp(fs *flag.FlagSet) {
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprint(fs.Output(), "\nTraces: OpenTelemetry spans over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or\n"+
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; off otherwise, or with OTEL_SDK_DISABLED=true or\n"+
			"OTEL_TRACES_EXPORTER=none. OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL picks http/protobuf (default) or grpc.\n"+
			"OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME (default corral) and\n"+
			"OTEL_RESOURCE_ATTRIBUTES apply as usual. A turn continues the trace of the request that started it\n"+
			"(its W3C traceparent), across serve, harness and worker processes.\n")
	}
}
