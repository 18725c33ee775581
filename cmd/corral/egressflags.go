package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// egressFlags are serve's operator-trusted destinations: --egress-allow-internal HOST:PORT[,...] and
// --egress-ca-file FILE.
type egressFlags struct {
	allowInternal string
	caFile        string
	tunnelDomain  string
}

// egressOptions are the parsed egress flags.
type egressOptions struct {
	// AllowInternal are the exact host:port pairs trusted although internal (for proxy.GitConfig,
	// sandbox.Egress via the git endpoint, and proxy.Resolver for workspace.Config.Resolve).
	AllowInternal []string
	// CAPEM are the extra CA certificates (for workspace.Config.ExtraRootCAsPEM); RootCAs the system roots
	// with them (for proxy.GitConfig.RootCAs). Both nil without --egress-ca-file.
	CAPEM   []byte
	RootCAs *x509.CertPool
}

// register adds the flags to fs.
func (f *egressFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.allowInternal, "egress-allow-internal", "", "comma-separated internal `host:port` pairs that clones, "+
		"the git endpoint (and the workers' git relay), the MCP proxy, webhooks, the web_fetch tool, the web search provider and the sandboxes' egress proxies may reach (a private git server, MCP server, search engine or API)")
	fs.StringVar(&f.caFile, "egress-ca-file", "", "PEM `file` of CA certificates trusted for upstream TLS besides the system roots")
	fs.StringVar(&f.tunnelDomain, "tunnel-domain", apitype.DefaultTunnelDomain, "base `domain` of the MCP tunnels: each tunnel gets a domain below it, and MCP URLs below a tunnel's domain go through its connector (corral tunnel)")
}

// parse validates the flags.
func (f *egressFlags) parse() (*egressOptions, error) {
	o := &egressOptions{}
	for _, hp := range strings.Split(f.allowInternal, ",") {
		hp = strings.TrimSpace(hp)
		if hp == "" {
			continue
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" {
			return nil, fmt.Errorf("--egress-allow-internal: %q is not host:port", hp)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("--egress-allow-internal: %q has no valid port", hp)
		}
		o.AllowInternal = append(o.AllowInternal, net.JoinHostPort(strings.ToLower(host), port))
	}
	if f.caFile == "" {
		return o, nil
	}
	pemData, err := os.ReadFile(f.caFile)
	if err != nil {
		return nil, fmt.Errorf("--egress-ca-file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, errors.New("--egress-ca-file: " + f.caFile + " holds no PEM certificate")
	}
	o.CAPEM, o.RootCAs = pemData, pool
	return o, nil
}
