package main

import (
	"log/slog"

	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/tunnel"
	"github.com/corralhq/corral/internal/vault"
)

// mcpProxy is the in-process MCP proxy the brains call MCP servers through (harness.Config.MCP): it holds the
// sessions' MCP credentials and reaches the servers under the environments' networking and the operator's
// --egress-allow-internal and --egress-ca-file, and the private ones through the tunnels' connectors connected to
// this process (the hub, which the caller closes after the proxy).
func (f *handsFlags) mcpProxy(st store.Store, vlt *vault.Vault, logger *slog.Logger) (*proxy.MCP, *tunnel.Hub, error) {
	eo, err := f.egress.parse()
	if err != nil {
		return nil, nil, err
	}
	hub, err := tunnel.NewHub(tunnel.HubConfig{Store: st, Domain: f.egress.tunnelDomain, Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	m, err := proxy.NewMCP(proxy.MCPConfig{Store: st, Vault: vlt, AllowInternal: eo.AllowInternal, RootCAs: eo.RootCAs,
		Tunnels: hub, Logger: logger})
	if err != nil {
		hub.Close()
		return nil, nil, err
	}
	return m, hub, nil
}
