// Command corral-sandbox-agent is the in-sandbox agent: bound read-only into every sandbox and started as its
// process, it runs the built-in tools for the host over line-delimited JSON on stdin/stdout. Build it static
// (CGO_ENABLED=0). See package internal/sandbox/agent.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/corralhq/corral/internal/sandbox/agent"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "corral-sandbox-agent:", err)
		os.Exit(1)
	}
}

func run() error {
	workspace := flag.String("workspace", agent.Workspace, "directory relative tool paths resolve against")
	confine := flag.Bool("confine", false, "confine the file tools to the workspace")
	proxySocket := flag.String("proxy-socket", agent.ProxySocketPath, "egress proxy Unix socket to bridge at "+agent.ProxyListenAddr+" when it exists; empty for none")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	env := os.Environ()
	if _, err := os.Stat(*proxySocket); *proxySocket != "" && err == nil {
		go func() {
			if err := agent.Bridge(ctx, agent.ProxyListenAddr, *proxySocket); err != nil {
				fmt.Fprintln(os.Stderr, "corral-sandbox-agent: proxy bridge:", err)
			}
		}()
		proxy := "http://" + agent.ProxyListenAddr
		env = append(env, "http_proxy="+proxy, "https_proxy="+proxy, "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy,
			"no_proxy=localhost,127.0.0.1", "NO_PROXY=localhost,127.0.0.1")
	}
	srv := agent.NewServer(agent.Config{Workspace: *workspace, Env: env, Confine: *confine})
	go func() {
		// Serve blocks reading stdin; on SIGTERM kill the shells and leave.
		<-ctx.Done()
		srv.Close()
		os.Exit(0)
	}()
	defer srv.Close()
	return srv.Serve(ctx, os.Stdin, os.Stdout)
}
