package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/worker"
)

func init() {
	register("worker", "run a self-hosted worker: claim an environment's work and run its tools in local sandboxes", runWorker)
}

// runWorker maps corral worker's flags onto internal/worker, which runs it: it dials out only, long-polls the
// server for its environment's work items and runs their built-in tool calls in sandboxes of the backends
// table (backends.go) with the server's isolation, limits and egress rules. The SDK's EnvironmentWorker runs
// them unsandboxed in a directory.
func runWorker(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "worker", "--url URL --env ENV_ID --key KEY [--sandbox bwrap|oci|gvisor|process] [flags]")
	tracingHelp(fs)
	base := new(string)
	urlFlag(fs, base, "url", os.Getenv("CORRAL_URL"), "Corral server `URL` (env CORRAL_URL)")
	envID := fs.String("env", os.Getenv("CORRAL_ENV"), "the self-hosted environment's `id` (env CORRAL_ENV)")
	key := secretFlag(fs, "key", "CORRAL_ENV_KEY", "the environment `key` (corral envs keys create)")
	data := fs.String("data", defaultWorkerData(), "`directory` for the sessions' workspaces (env CORRAL_WORKER_DATA; default /var/lib/corral-worker as root, else $XDG_STATE_HOME/corral-worker, ~/.local/state/corral-worker)")
	workerID := fs.String("worker-id", "", "this worker's id, sent as Anthropic-Worker-ID (default: host name and a random suffix)")
	idle := fs.Duration("session-idle", worker.DefaultIdle, "how long a session whose turn ended keeps this worker before it goes back to polling")
	uidBase := fs.Int("sandbox-uids", worker.DefaultUIDBase, "first host `uid` of this worker's sandboxes (10000 uids): workers sharing a machine, or a machine with a server, need ranges of their own")
	var hf handsFlags
	hf.register(fs)
	var lf logFlags
	lf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *base == "" || *envID == "" || *key == "" {
		fs.Usage()
		return errUsage
	}
	if hf.kind == "none" {
		return errors.New("corral worker runs the tools in sandboxes: pick a --sandbox backend")
	}
	logger, err := lf.logger(io)
	if err != nil {
		return err
	}
	baseURL, err := serverURL(*base)
	if err != nil {
		return err
	}
	c, err := client.New(client.Config{BaseURL: baseURL, APIKey: *key})
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(*data)
	if err != nil {
		return err
	}
	root := filepath.Join(dataDir, "workspaces")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	eo, err := hf.egress.parse()
	if err != nil {
		return err
	}
	hf.uidBase = *uidBase
	prov, err := hf.provider(dataDir, logger)
	if err != nil {
		return fmt.Errorf("sandbox backend %s: %w", hf.kind, err)
	}
	pc := sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, IdleTimeout: hf.idle, Limits: hf.limits(), Logger: logger}
	// The same workspace quotas as the server's (a worker's disk is the user's machine).
	vols, err := hf.volumes(root, logger)
	if err != nil {
		return err
	}
	if vols != nil {
		pc.Volumes = vols
	}
	tp, stopTracing, err := tracing(ctx)
	if err != nil {
		return err
	}
	defer stopTracing()
	w, err := worker.New(worker.Config{Client: c, Environment: *envID, ID: *workerID, Pool: pc, AllowInternal: eo.AllowInternal,
		RootCAs: eo.RootCAs, Idle: *idle, Logger: logger, TracerProvider: tp})
	if err != nil {
		return err
	}
	fmt.Fprintf(io.err, "corral: worker %s polling %s for %s (sandbox %s, data %s)\n", w.ID(), redactURL(*base), *envID, hf.kind, dataDir)
	return w.Run(ctx)
}

// defaultWorkerData is where a worker keeps its state unless --data says otherwise (workerData).
func defaultWorkerData() string { return workerData(os.Getenv, os.Geteuid()) }

// workerData is $CORRAL_WORKER_DATA; else, as root (euid 0), /var/lib/corral-worker; else
// $XDG_STATE_HOME/corral-worker (an absolute one), else $HOME/.local/state/corral-worker; the current
// directory's corral-worker only without a home either.
func workerData(getenv func(string) string, euid int) string {
	if v := getenv("CORRAL_WORKER_DATA"); v != "" {
		return v
	}
	if euid == 0 {
		return "/var/lib/corral-worker"
	}
	if v := getenv("XDG_STATE_HOME"); filepath.IsAbs(v) {
		return filepath.Join(v, "corral-worker")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "state", "corral-worker")
	}
	return "corral-worker"
}
