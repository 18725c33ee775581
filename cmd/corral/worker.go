package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/sandbox"
	corral "github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/worker"
)

func init() {
	register("worker", "run a self-hosted worker: claim an environment's work and run its tools in local sandboxes", runWorker)
}

// runWorker maps corral worker's flags onto internal/worker, which runs it: it dials out only, long-polls the
// server for its environment's work items and runs their built-in tool calls in sandboxes of the backends
// table (backends.go) with the server's isolation, limits and egress rules, on the Debian base plus the
// worker's --package list (imageFlags, as serve's; host's layout where images cannot be built). The SDK's
// EnvironmentWorker runs them unsandboxed in a directory.
func runWorker(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "worker", "--url URL --env ENV_ID --key KEY [--sandbox bwrap|oci|gvisor|process] [--images debian|host|auto] [--package MANAGER=PACKAGE]... [flags]")
	tracingHelp(fs)
	base := new(string)
	urlFlag(fs, base, "url", os.Getenv("CORRAL_URL"), "Corral server `URL` (env CORRAL_URL)")
	envID := fs.String("env", os.Getenv("CORRAL_ENV"), "the self-hosted environment's `id` (env CORRAL_ENV)")
	key := secretFlag(fs, "key", "CORRAL_ENV_KEY", "the environment `key` (corral envs keys create)")
	data := fs.String("data", defaultWorkerData(), "`directory` for the sessions' workspaces (env CORRAL_WORKER_DATA): /var/lib/corral-worker as root, else $XDG_STATE_HOME/corral-worker or ~/.local/state/corral-worker")
	workerID := fs.String("worker-id", "", "this worker's id, sent as Anthropic-Worker-ID (default: host name and a random suffix)")
	idle := fs.Duration("session-idle", worker.DefaultIdle, "how long a session whose turn ended keeps this worker before it goes back to polling")
	uidBase := fs.Int("sandbox-uids", worker.DefaultUIDBase, "first host `uid` of this worker's sandboxes (10000 uids): workers sharing a machine, or a machine with a server, need ranges of their own")
	var hf handsFlags
	hf.register(fs)
	var imf imageFlags
	imf.register(fs)
	imf.registerPackages(fs)
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
	// Once the worker's pool has closed its sandboxes (Run), the provider removes what it keeps on the host (its
	// state directory, bwrap's starts kept ready), as the server does on Stop.
	if c, ok := prov.(interface{ Close() error }); ok {
		defer func() {
			if err := c.Close(); err != nil {
				logger.Warn("closing the sandbox backend", "err", err)
			}
		}()
	}
	pc := sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, IdleTimeout: hf.idle, Limits: hf.limits(), Logger: logger,
		MaxStarting: hf.maxStarting()}
	// The same workspace quotas as the server's (a worker's disk is the user's machine).
	vols, err := hf.volumes(root, logger)
	if err != nil {
		return err
	}
	if vols != nil {
		pc.Volumes = vols
	}
	// The sandboxes run on the worker's image (the Debian base and its --package list), or on the host's layout.
	imgs, err := imf.images(dataDir, &hf, nil, logger)
	if err != nil {
		return err
	}
	images := "host"
	if _, host := imgs.(image.HostLayout); !host {
		wi := workerImages{images: imgs, config: apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: &imf.packages.Packages}}
		pc.Images = wi
		if err := imgs.Start(ctx); err != nil {
			return err
		}
		defer imgs.Stop()
		images = "debian"
		if pk := imf.packages.String(); pk != "" {
			images += " with " + pk
		}
		if wi.Image(nil).Status != apitype.ImageReady {
			images += ", building in the background: the first tool calls wait for it"
		}
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
	fmt.Fprintf(io.err, "corral: worker %s polling %s for %s (sandbox %s, image %s, data %s)\n", w.ID(), redactURL(*base), *envID, hf.kind, images, dataDir)
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
	home := func() (string, error) { return getenv("HOME"), nil }
	return cmp.Or(defaultDir(euid, getenv, home, "/var/lib/corral-worker", "XDG_STATE_HOME", ".local/state", "corral-worker"), "corral-worker")
}

// workerImages gives every sandbox of a worker the image of config, a cloud environment's with the worker's
// --package list, whatever the session's environment says: a self-hosted environment lists no packages.
type workerImages struct {
	images corral.Images
	config apitype.EnvConfig
}

var _ sandbox.ImageStatus = workerImages{} // a tool call's provisioning says it waits for the build

func (w workerImages) Acquire(ctx context.Context, _ *apitype.EnvConfig) (string, func(), error) {
	return w.images.Acquire(ctx, &w.config)
}

func (w workerImages) Image(*apitype.EnvConfig) *apitype.EnvironmentImage {
	return w.images.Image(&w.config)
}
