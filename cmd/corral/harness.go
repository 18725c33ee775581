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
	logger, err := lf.logger(io)
	if err != nil {
		return err
	}
	st, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	brain, err := bf.brainConfig()
	if err != nil {
		return err
	}
	vlt, err := vf.open(ctx, st, sf.data, io.err)
	if err != nil {
		return err
	}
	fsvc, err := ff.open(ctx, sf.data, st)
	if err != nil {
		return err
	}
	sc, err := hf.sandbox(sf.data, st, vlt, fsvc, io.err, logger)
	if err != nil {
		return err
	}
	if *mcpProxyURL != "" {
		if brain.MCP, err = remoteMCP(*mcpProxyURL); err != nil {
			return err
		}
	} else {
		mcpProxy, err := hf.mcpProxy(st, vlt, logger)
		if err != nil {
			return err
		}
		defer mcpProxy.Close()
		brain.MCP = mcpProxy
	}
	images, err := imf.images(sf.data, &hf, st, logger)
	if err != nil {
		return err
	}
	cfg := corral.Config{Store: st, Logger: logger, Brain: brain, Sandbox: sc, Images: images}
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
