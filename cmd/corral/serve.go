package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/store"
)

func init() {
	register("serve", "run the server: the HTTP API, brains and sandboxes, with embedded defaults", runServe)
}

func runServe(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "serve", "[flags]")
	var sf storeFlags
	sf.register(fs)
	listen := fs.String("listen", envOr("CORRAL_LISTEN", "127.0.0.1:8080"), "`address` to serve the API on (env CORRAL_LISTEN)")
	var bf brainFlags
	bf.register(fs)
	var hf handsFlags
	hf.register(fs)
	rateLimit := fs.Float64("rate-limit", 0, "`requests` per second allowed per API key (0 = unlimited)")
	var vf vaultFlags
	vf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	logger := newLogger(io)

	st, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()

	keys, err := apiKeys(ctx, io, st)
	if err != nil {
		return err
	}

	vlt, err := vf.open(ctx, st, sf.data, io.err)
	if err != nil {
		return err
	}

	if bf.workers > 0 {
		stopBrains, err := startBrains(ctx, &bf, &hf, sf.data, st, logger)
		if err != nil {
			return err
		}
		defer stopBrains()
	}

	srv := api.New(api.Config{Store: st, Logger: logger, Keys: keys, RateLimit: *rateLimit, Sealer: vlt})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// Streams end when the server shuts down; ordinary requests finish first.
	baseCtx, cancelStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStreams()
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // a slow body cannot hold a handler forever
		WriteTimeout:      time.Minute, // streams set their own per-write deadlines
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	httpSrv.RegisterOnShutdown(cancelStreams)
	logger.Info("corral serving", "addr", ln.Addr().String(), "store", st.Capabilities().Name, "sandbox", hf.kind, "brains", bf.workers)
	fmt.Fprintf(io.err, "corral: listening on http://%s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// SIGTERM: stop accepting, let in-flight requests (and their writes) finish, then stop the brains, which
	// release their leases, and close the store.
	logger.Info("corral shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("http shutdown", "err", err)
	}
	return nil
}

// apiKeys sets up authentication: the key in CORRAL_API_KEY (if set) and every key in the store. When neither
// exists, it mints a key, stores its hash and prints the key once.
func apiKeys(ctx context.Context, io *stdio, st store.Store) (api.Authenticator, error) {
	auth := &api.KeyAuth{Store: st}
	if k := os.Getenv("CORRAL_API_KEY"); k != "" {
		auth.Static = k
		return auth, nil
	}
	existing, err := st.APIKeyList(ctx)
	if err != nil {
		return nil, err
	}
	for _, k := range existing {
		if k.RevokedAt == nil {
			return auth, nil
		}
	}
	secret, key, err := createKey(ctx, st, "initial")
	if err != nil {
		return nil, err
	}
	// The secret alone goes to stdout (for scripts: KEY=$(corral serve | head -1) ...), the words to stderr.
	fmt.Fprintf(io.err, "corral: created API key %s; it is printed once, on stdout, and only its hash is stored\n", key.ID)
	fmt.Fprintln(io.out, secret)
	return auth, nil
}

func newLogger(io *stdio) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("CORRAL_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(io.err, &slog.HandlerOptions{Level: level}))
}

// defaultWorkers sizes the in-process brains to the machine. A brain mostly waits on the model, so a core
// keeps many sessions going.
func defaultWorkers() int { return 100 * runtime.NumCPU() }
