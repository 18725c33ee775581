package main

import (
	"context"
	"fmt"

	corral "github.com/corralhq/corral/internal/server" // aliased: the e2e tests have a type server
)

func init() {
	register("harness", "run brains only, against a shared store (e.g. --db postgres://...)", runHarness)
}

func runHarness(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "harness", "--db URL [flags]")
	var sf storeFlags
	sf.register(fs)
	var bf brainFlags
	bf.register(fs)
	var hf handsFlags
	hf.register(fs)
	var imf imageFlags
	imf.register(fs)
	hf.registries = &imf.registries // --package-registry: the builds' mirrors are the sandboxes' too
	var vf vaultFlags
	vf.register(fs)
	mcpProxyURL := fs.String("mcp-proxy", "", "`URL` of a corral proxy to call MCP servers through (token in "+proxyTokenEnv+"); default: an MCP proxy in this process")
	var ff fileFlags
	ff.register(fs)
	var flf fleetFlags
	flf.register(fs)
	var lf logFlags
	lf.register(fs)
	var mf metricsFlags
	mf.register(fs)
	tracingHelp(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if bf.workers < 1 {
		return fmt.Errorf("--brains must be at least 1")
	}
	brain, err := bf.brainConfig()
	if err != nil {
		return err
	}
	p, err := openParts(ctx, io, &sf, &vf, &lf)
	if err != nil {
		return err
	}
	defer p.close()
	st, logger := p.store, p.log
	fsvc, err := p.files(ctx, &ff)
	if err != nil {
		return err
	}
	sc, err := p.sandbox(&hf, fsvc, io)
	if err != nil {
		return err
	}
	if *mcpProxyURL != "" {
		if brain.MCP, err = remoteMCP(*mcpProxyURL); err != nil {
			return err
		}
	} else if brain.MCP, _, err = p.mcpProxy(&hf); err != nil {
		return err
	}
	images, err := p.images(&imf, &hf)
	if err != nil {
		return err
	}
	if err := bf.setWebTools(io, brain, &hf); err != nil {
		return err
	}
	cfg := corral.Config{Store: st, Logger: logger, Brain: brain, Sandbox: sc, Images: images}
	if cfg.Fleet, err = flf.config(&hf, p.vault, fsvc); err != nil {
		return err
	}
	stopTracing, err := mf.observe(ctx, &cfg)
	if err != nil {
		return err
	}
	defer stopTracing() // after the server's Stop (deferred later, run first): its last spans are flushed
	srv, err := corral.New(cfg)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop()
	logger.Info("corral harness running", "store", st.Capabilities().Name, "brains", bf.workers)
	fmt.Fprintln(io.err, "corral: harness running")
	if u := srv.MetricsURL(); u != "" {
		fmt.Fprintf(io.err, "corral: metrics on %s\n", u)
	}
	<-ctx.Done()
	srv.Stop() // finishes in-flight appends and releases leases
	return nil
}
