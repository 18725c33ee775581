package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/mcp/remote"
	"github.com/corralhq/corral/internal/tunnel"
)

func init() {
	register("proxy", "run the MCP proxy alone, for brains on other machines (corral harness --mcp-proxy URL)", runProxy)
}

// proxyTokenEnv names the variable that holds the token brains authenticate to `corral proxy` with.
const proxyTokenEnv = "CORRAL_PROXY_TOKEN"

// runProxy serves the MCP proxy (proxy.MCP, which opens the sessions' MCP credentials with the vault) over HTTP
// to brains holding the shared token: the brains of `corral harness --mcp-proxy` then hold no MCP connection and
// call no MCP server themselves (they still open the vault for the sandboxes' git tokens and injected secrets).
func runProxy(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "proxy", "--db URL --listen ADDR [flags] (token in "+proxyTokenEnv+")")
	var sf storeFlags
	sf.register(fs)
	var hf handsFlags
	hf.egress.register(fs)
	var vf vaultFlags
	vf.register(fs)
	listen := fs.String("listen", "127.0.0.1:7431", "`address` to serve the MCP proxy on")
	var lf logFlags
	lf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	token := os.Getenv(proxyTokenEnv)
	if len(token) < 16 {
		return fmt.Errorf("%s must hold the shared token (16 characters or more) the brains authenticate with", proxyTokenEnv)
	}
	parts, err := openParts(ctx, io, &sf, &vf, &lf)
	if err != nil {
		return err
	}
	defer parts.close()
	st, logger := parts.store, parts.log
	p, hub, err := parts.mcpProxy(&hf)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// The tunnels' connectors connect here too: the MCP proxy reaches private MCP servers through them.
	mux := http.NewServeMux()
	mux.Handle(tunnel.ConnectPath, hub)
	mux.Handle("/", remote.Handler(p, token))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	logger.Info("corral proxy running", "addr", l.Addr().String(), "store", st.Capabilities().Name)
	fmt.Fprintf(io.err, "corral: proxy listening on http://%s\n", l.Addr())
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// remoteMCP is the MCP client of brains whose MCP proxy is `corral proxy` at url (token in CORRAL_PROXY_TOKEN).
func remoteMCP(url string) (*remote.Client, error) {
	token := os.Getenv(proxyTokenEnv)
	if token == "" {
		return nil, fmt.Errorf("--mcp-proxy needs the proxy's token in %s", proxyTokenEnv)
	}
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("--mcp-proxy: %q is not an http(s) URL", url)
	}
	return &remote.Client{URL: url, Token: token, HTTP: &http.Client{Transport: &http.Transport{
		ResponseHeaderTimeout: 10 * time.Minute, IdleConnTimeout: time.Minute, MaxIdleConnsPerHost: 16,
	}}}, nil
}
