package main

import (
	"context"
	"fmt"
	"os"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/harness"
	corral "github.com/corralhq/corral/internal/server" // aliased: the e2e tests have a type server
	"github.com/corralhq/corral/internal/store"
)

// The workspaces' fair shares by default: a workspace may send 500 requests a second, run 250 sessions and
// hold 100 live sandboxes at once, so that no single one takes a whole server (docs/benchmarks.md: about 5,000
// appends a second and 500 to 750 active sessions on 2 cores).
const (
	defaultWorkspaceRate      = 500
	defaultWorkspaceSessions  = 250
	defaultWorkspaceSandboxes = 100
)

func init() {
	register("serve", "run the server: the HTTP API (and the web console at /console/), brains and sandboxes, with embedded defaults", runServe)
}

func runServe(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "serve", "[flags]")
	var sf storeFlags
	sf.register(fs)
	listen := fs.String("listen", envOr("CORRAL_LISTEN", corral.DefaultListen), "`address` to serve the API on (env CORRAL_LISTEN)")
	var bf brainFlags
	bf.register(fs)
	var hf handsFlags
	hf.register(fs)
	var imf imageFlags
	imf.register(fs)
	hf.registries = &imf.registries // --package-registry: the builds' mirrors are the sandboxes' too
	var vf vaultFlags
	vf.register(fs)
	var ff fileFlags
	ff.register(fs)
	rateLimit := fs.Float64("rate-limit", 0, "`requests` per second allowed per API key (0 = unlimited)")
	wsRate := fs.Float64("workspace-rate", defaultWorkspaceRate, "`requests` per second a workspace's credentials may send, in bursts of twice as many,\n"+
		"counted across every server of a PostgreSQL store (0 = unlimited); over it, a 429 with retry-after")
	wsSessions := fs.Int("workspace-sessions", defaultWorkspaceSessions, "`sessions` of a workspace that may run at once: a message that would start one more is\n"+
		"a 429 with retry-after (0 = unlimited)")
	var lf logFlags
	lf.register(fs)
	var mf metricsFlags
	mf.register(fs)
	tracingHelp(fs)
	var flf fleetFlags
	flf.register(fs)
	workTTL := fs.Duration("work-lease-ttl", api.DefaultWorkLeaseTTL, "how long a self-hosted worker keeps a work item without a heartbeat; after it the item goes to another worker")
	if err := parse(fs, args); err != nil {
		return err
	}
	dataDir, err := sf.dir()
	if err != nil {
		return err
	}
	fmt.Fprintf(io.err, "corral: data in %s (--data or CORRAL_DATA to change)\n", dataDir)
	prices, err := bf.prices()
	if err != nil {
		return err
	}
	p, err := openParts(ctx, io, &sf, &vf, &lf)
	if err != nil {
		return err
	}
	defer p.close()
	st, logger := p.store, p.log
	keys, err := apiKeys(ctx, io, st, &sf)
	if err != nil {
		return err
	}
	// The MCP proxy holds the sessions' MCP credentials: the brains call MCP servers through it, and the API
	// validates credentials with it.
	mcpProxy, tunnels, err := p.mcpProxy(&hf)
	if err != nil {
		return err
	}
	fsvc, err := p.files(ctx, &ff)
	if err != nil {
		return err
	}
	// The git relay forwards the self-hosted workers' git traffic to the sessions' repositories with their
	// tokens, which stay here, under the egress rules of the sandboxes' git endpoint.
	gitRelay, err := hf.gitEndpoint(st, p.vault, logger)
	if err != nil {
		return err
	}
	cfg := corral.Config{
		Store: st, Logger: logger,
		API: &corral.APIConfig{Listen: *listen, Keys: keys, RateLimit: *rateLimit, Sealer: p.vault,
			Shares: api.Shares{RequestRate: *wsRate, RunningSessions: *wsSessions}, Validator: mcpProxy,
			WorkLeaseTTL: *workTTL, Files: fsvc, Prices: prices, GitRelay: gitRelay, WebSearch: bf.webSearchName(), Tunnels: tunnels},
	}
	if cfg.Fleet, err = flf.config(&hf, p.vault, fsvc); err != nil {
		return err
	}
	if cfg.Images, err = p.images(&imf, &hf); err != nil {
		return err
	}
	if imf.dir != "" {
		fmt.Fprintf(io.err, "corral: images in %s, shared by every server on this machine (--image-cache or CORRAL_IMAGE_CACHE to change)\n", imf.dir)
	}
	stopTracing, err := mf.observe(ctx, &cfg)
	if err != nil {
		return err
	}
	defer stopTracing() // after the server's Stop (deferred later, run first): its last spans are flushed
	if bf.workers > 0 {
		if cfg.Brain, err = bf.brainConfig(); err != nil {
			return err
		}
		if cfg.Sandbox, err = p.sandbox(&hf, fsvc, io); err != nil {
			return err
		}
		cfg.Brain.MCP = mcpProxy
		if err := bf.setWebTools(io, cfg.Brain, &hf); err != nil {
			return err
		}
	}
	srv, err := corral.New(cfg)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop()
	logger.Info("corral serving", "addr", srv.Addr().String(), "store", st.Capabilities().Name, "sandbox", hf.kind, "brains", bf.workers)
	fmt.Fprintf(io.err, "corral: listening on %s\n", srv.URL())
	fmt.Fprintf(io.err, "corral: console on %s/console/ (log in with an API key)\n", srv.URL())
	if u := srv.MetricsURL(); u != "" {
		fmt.Fprintf(io.err, "corral: metrics on %s\n", u)
	}

	select {
	case err := <-srv.Failed():
		return err
	case <-ctx.Done():
	}
	// SIGTERM: stop accepting, let in-flight requests (and their writes) finish, then stop the brains, which
	// release their leases; the store closes last.
	logger.Info("corral shutting down")
	srv.Stop()
	return nil
}

// apiKeys sets up authentication: the key in CORRAL_API_KEY (if set) and every key in the store. When neither
// exists, it mints a key, stores its hash and prints the key once; when keys exist, it says how to make another
// (a restarted server prints no key: the first one's secret is not stored).
func apiKeys(ctx context.Context, io *stdio, st store.Store, sf *storeFlags) (api.Authenticator, error) {
	auth := &api.KeyAuth{Store: st}
	more := "corral keys create " + storeArgs(sf)
	if k := os.Getenv("CORRAL_API_KEY"); k != "" {
		auth.Static = k
		fmt.Fprintf(io.err, "corral: API keys: the one in $CORRAL_API_KEY and those in the store (%s makes one)\n", more)
		return auth, nil
	}
	existing, err := st.APIKeyList(ctx)
	if err != nil {
		return nil, err
	}
	live := 0
	for _, k := range existing {
		if k.RevokedAt == nil {
			live++
		}
	}
	if live > 0 {
		fmt.Fprintf(io.err, "corral: %d API key(s) in the store, none printed (their secrets are not kept): %s makes one, corral keys list %s lists them\n",
			live, more, storeArgs(sf))
		return auth, nil
	}
	secret, key, err := createKey(ctx, st, "initial", "")
	if err != nil {
		return nil, err
	}
	// The secret alone goes to stdout (for scripts: KEY=$(corral serve | head -1) ...), the words to stderr.
	fmt.Fprintf(io.err, "corral: created API key %s; it is printed once, on stdout, and only its hash is stored\n", key.ID)
	fmt.Fprintln(io.out, secret)
	return auth, nil
}

// storeArgs are the flags that point corral keys at this server's store: its --db (password hidden) or --data.
func storeArgs(sf *storeFlags) string {
	if sf.db != "" {
		return "--db '" + redactURL(sf.db) + "'"
	}
	dir, err := sf.dir()
	if err != nil {
		dir = sf.data
	}
	return "--data " + dir
}

// defaultWorkers sizes the in-process brains to the machine (harness.DefaultWorkers).
func defaultWorkers() int { return harness.DefaultWorkers() }
