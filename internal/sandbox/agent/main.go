package agent

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// Main is the in-sandbox agent's entry point (cmd/corral-sandbox-agent, and the corral binary when invoked as
// corral-sandbox-agent): it serves tool calls on stdin/stdout until stdin closes (or SIGTERM, unless it is the
// sandbox's pid 1, which ignores signals), and returns the process exit code.
func Main(args []string) int {
	if len(args) > 0 && args[0] == BridgeExecArg {
		return bridgeExec(args[1:], os.Environ())
	}
	if len(args) > 0 && args[0] == InstallArg {
		return install(args[1:])
	}
	if len(args) > 0 && args[0] == SpawnArg {
		return spawn(args[1:])
	}
	if err := run(args); err != nil {
		fmt.Fprintln(os.Stderr, "corral-sandbox-agent:", err)
		return 1
	}
	return 0
}

func run(args []string) error {
	if len(args) > 0 && args[0] == launcherArg {
		return runLauncher(args[1:], os.Environ())
	}
	fs := flag.NewFlagSet("corral-sandbox-agent", flag.ContinueOnError)
	workspace := fs.String("workspace", Workspace, "directory relative tool paths resolve against")
	confine := fs.Bool("confine", false, "confine the file tools to the workspace")
	proxySocket := fs.String("proxy-socket", ProxySocketPath, "egress proxy Unix socket to bridge at "+ProxyListenAddr+" when it exists; empty for none")
	proxyAddr := fs.String("proxy-addr", "", "egress proxy TCP address (host:port) to bridge at "+ProxyListenAddr+" instead of the socket (a sandbox on another machine)")
	shellNS := fs.Bool("shell-namespace", false, "start the shells in user and pid namespaces of their own, where the agent has no pid")
	if err := fs.Parse(args); err != nil {
		return err
	}

	pid1, err := protectSelf()
	if err != nil {
		return err
	}
	ctx, stop := context.Background(), context.CancelFunc(func() {})
	if !pid1 {
		// Outside a sandbox of its own (the process backend) the host stops the agent with SIGTERM. As pid 1 it
		// ignores signals; the host ends it by closing its stdin or by killing the sandbox.
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	}
	defer stop()

	env := os.Environ()
	network, addr := "unix", *proxySocket
	if *proxyAddr != "" {
		network, addr = "tcp", *proxyAddr
	}
	if _, err := os.Stat(addr); network == "tcp" || addr != "" && err == nil {
		// Bound before the first command runs: a command that starts at once must find the proxy listening.
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", ProxyListenAddr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "corral-sandbox-agent: proxy bridge: listen %s: %v\n", ProxyListenAddr, err)
		} else {
			go serveBridge(ctx, ln, network, addr)
		}
		proxy := "http://" + ProxyListenAddr
		env = append(env, "http_proxy="+proxy, "https_proxy="+proxy, "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy,
			"no_proxy=localhost,127.0.0.1", "NO_PROXY=localhost,127.0.0.1")
	}
	srv := NewServer(Config{Workspace: *workspace, Env: env, Confine: *confine, ShellNamespace: *shellNS})
	go func() {
		// Serve blocks reading stdin; on SIGTERM kill the shells and leave.
		<-ctx.Done()
		srv.Close()
		os.Exit(0)
	}()
	defer srv.Close()
	return srv.Serve(ctx, os.Stdin, os.Stdout)
}

// InstallArg, as the agent's first argument, makes it copy its own executable to the path that follows
// (mode 0555) and exit: an init container runs it from Corral's image to put the agent into a pod whose image
// has no shell and no cp (internal/sandbox/kubernetes).
const InstallArg = "install"

func install(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "corral-sandbox-agent: install DEST")
		return 2
	}
	if err := copySelf(args[0]); err != nil {
		fmt.Fprintln(os.Stderr, "corral-sandbox-agent: install:", err)
		return 1
	}
	return 0
}

func copySelf(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
