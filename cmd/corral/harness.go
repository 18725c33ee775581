package main

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/internal/harness"
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
	if err := parse(fs, args); err != nil {
		return err
	}
	logger := newLogger(io)
	st, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	hands, err := hf.build(sf.data, logger)
	if err != nil {
		return err
	}
	if hands != nil {
		defer hands.Stop()
	}
	brainCfg, err := bf.config(st, hands, logger)
	if err != nil {
		return err
	}
	brain := harness.New(brainCfg)
	if err := brain.Start(ctx); err != nil {
		return err
	}
	logger.Info("corral harness running", "store", st.Capabilities().Name, "brains", bf.workers)
	fmt.Fprintln(io.err, "corral: harness running; stop with SIGTERM")
	<-ctx.Done()
	brain.Stop() // finishes in-flight appends and releases leases
	return nil
}
