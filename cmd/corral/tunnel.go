package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/corralhq/corral/internal/tunnel"
)

func init() {
	register("tunnel", "connect a tunnel to Corral from inside your network and carry its MCP traffic to your private MCP servers", runTunnel)
}

// tunnelTokenEnv names the variable that holds the tunnel's token (reveal_token).
const tunnelTokenEnv = "CORRAL_TUNNEL_TOKEN"

// routeFlag is the repeatable --route NAME=HOST:PORT.
type routeFlag map[string]string

func (r routeFlag) String() string { return "" }

func (r routeFlag) Set(s string) error {
	name, addr, ok := strings.Cut(s, "=")
	name = strings.ToLower(strings.TrimSpace(name))
	if !ok || name == "" || strings.Trim(name, ".") != name {
		return fmt.Errorf("%q is not NAME=HOST:PORT", s)
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("%q: %q is not HOST:PORT", s, addr)
	}
	if _, dup := r[name]; dup {
		return fmt.Errorf("route %q given twice", name)
	}
	r[name] = addr
	return nil
}

// serversFlag is the repeatable --server URL.
type serversFlag []string

func (s *serversFlag) String() string { return strings.Join(*s, ",") }

func (s *serversFlag) Set(v string) error {
	if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
		return fmt.Errorf("%q is not an http(s) URL", v)
	}
	*s = append(*s, strings.TrimSuffix(v, "/"))
	return nil
}

// runTunnel runs the connector of a tunnel: it dials out to each server with the tunnel's token, and carries the
// MCP proxy's connections for https://NAME.<tunnel domain>/... to the server --route NAME names. TLS runs from
// the MCP proxy to that server, verified against the tunnel's CA certificates: the connector sees only
// ciphertext and holds no credential but its token.
func runTunnel(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "tunnel", "--server URL --route NAME=HOST:PORT [flags] (token in "+tunnelTokenEnv+" or --token-file)")
	var servers serversFlag
	routes := routeFlag{}
	fs.Var(&servers, "server", "`URL` of the Corral process that runs the MCP proxy (corral serve, or corral proxy in a fleet); repeatable: one connection to each")
	fs.Var(routes, "route", "a private MCP server, as `NAME=HOST:PORT`: MCP URLs https://NAME.<tunnel domain>/... reach it; repeatable")
	tokenFile := fs.String("token-file", "", "`file` holding the tunnel token (else "+tunnelTokenEnv+")")
	caFile := fs.String("ca-file", "", "PEM `file` of CA certificates to verify the servers' TLS with, besides the system roots")
	insecure := fs.Bool("insecure-http", false, "allow an http:// --server other than loopback (the tunnel token then crosses the network in the clear)")
	var lf logFlags
	lf.register(fs)
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if len(servers) == 0 || len(routes) == 0 {
		return errors.New("corral tunnel needs --server and at least one --route")
	}
	for _, s := range servers {
		if u, err := url.Parse(s); err == nil && u.Scheme == "http" && !loopback(u.Hostname()) && !*insecure {
			return fmt.Errorf("--server %s: the tunnel token would cross the network in the clear: use https (or --insecure-http)", s)
		}
	}
	token := os.Getenv(tunnelTokenEnv)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return fmt.Errorf("the tunnel token goes in %s or --token-file (POST /v1/tunnels/{id}/reveal_token)", tunnelTokenEnv)
	}
	var roots *x509.CertPool
	if *caFile != "" {
		pemData, err := os.ReadFile(*caFile)
		if err != nil {
			return fmt.Errorf("--ca-file: %w", err)
		}
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pemData) {
			return fmt.Errorf("--ca-file: %s holds no PEM certificate", *caFile)
		}
	}
	logger, err := lf.logger(io)
	if err != nil {
		return err
	}
	err = tunnel.RunConnector(ctx, tunnel.ConnectorConfig{
		Servers: servers, Token: token, Routes: routes, RootCAs: roots, Logger: logger,
		OnConnect: func(server, tunnelID, domain string) {
			fmt.Fprintf(io.err, "corral tunnel: connected to %s as %s\n", server, tunnelID)
			for name := range routes {
				fmt.Fprintf(io.err, "corral tunnel:   https://%s.%s/... -> %s\n", name, domain, routes[name])
			}
		},
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// loopback reports whether host names this machine's loopback interface.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
