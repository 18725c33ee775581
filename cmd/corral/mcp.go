package main

import (
	"log/slog"

	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

// mcpProxy is the in-process MCP proxy the brains call MCP servers through (harness.Config.MCP): it holds the
// sessions' MCP credentials and reaches the servers under the environments' networking and the operator's
// --egress-allow-internal and --egress-ca-file.
func (f *handsFlags) mcpProxy(st store.Store, vlt *vault.Vault, logger *slog.Logger) (*proxy.MCP, error) {
	eo, err := f.egress.parse()
	if err != nil {
		return nil, err
	}
	return proxy.NewMCP(proxy.MCPConfig{Store: st, Vault: vlt, AllowInternal: eo.AllowInternal, RootCAs: eo.RootCAs, Logger: logger})
}
