package main

import (
	"context"
	"log/slog"
	"slices"

	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/proxy"
	corral "github.com/corralhq/corral/internal/server" // aliased: the e2e tests have a type server
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/tunnel"
	"github.com/corralhq/corral/internal/vault"
)

// parts are the pieces of a server that serve, harness and proxy build the same way, in one order: the logger,
// the store, the vault, then what each command asks for (the MCP proxy, the Files API's service, the images,
// the hands). Each command takes what it needs; close releases them in reverse.
type parts struct {
	data  string // the data directory
	log   *slog.Logger
	store store.Store
	vault *vault.Vault
	// closers run in reverse order by close.
	closers []func()
}

// openParts opens the logger, the store and the vault from their flags. On error, what was opened is closed.
func openParts(ctx context.Context, io *stdio, sf *storeFlags, vf *vaultFlags, lf *logFlags) (_ *parts, err error) {
	p := &parts{data: sf.data}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.log, err = lf.logger(io); err != nil {
		return nil, err
	}
	if p.store, err = sf.open(ctx); err != nil {
		return nil, err
	}
	st := p.store
	p.closers = append(p.closers, func() { st.Close() })
	if p.vault, err = vf.open(ctx, p.store, sf.data, io.err); err != nil {
		return nil, err
	}
	return p, nil
}

// close releases the parts in reverse order of their opening: the store last. Idempotent.
func (p *parts) close() {
	for _, c := range slices.Backward(p.closers) {
		c()
	}
	p.closers = nil
}

// mcpProxy builds the MCP proxy, which holds the sessions' MCP credentials, and the hub of the tunnels'
// connectors it reaches private MCP servers through (both closed by close).
func (p *parts) mcpProxy(hf *handsFlags) (*proxy.MCP, *tunnel.Hub, error) {
	m, hub, err := hf.mcpProxy(p.store, p.vault, p.log)
	if err != nil {
		return nil, nil, err
	}
	p.closers = append(p.closers, func() { hub.Close() }, func() { m.Close() })
	return m, hub, nil
}

// files opens the Files API's service.
func (p *parts) files(ctx context.Context, ff *fileFlags) (*files.Service, error) {
	return ff.open(ctx, p.data, p.store)
}

// images builds the environments' images for the backend hf picks.
func (p *parts) images(imf *imageFlags, hf *handsFlags) (corral.Images, error) {
	return imf.images(p.data, hf, p.store, p.log)
}

// sandbox configures the hands of the brains.
func (p *parts) sandbox(hf *handsFlags, fsvc *files.Service, io *stdio) (corral.SandboxConfig, error) {
	return hf.sandbox(p.data, p.store, p.vault, fsvc, io.err, p.log)
}
