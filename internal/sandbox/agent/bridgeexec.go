package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
)

// BridgeExecArg, as the agent's first argument, makes it run one command with the egress proxy bridged
// (BridgeExec) instead of serving tool calls: `agent bridge-exec SOCKET COMMAND [ARG...]`. The image builder
// (internal/image) runs package installs this way in a sandbox without a network of its own.
const BridgeExecArg = "bridge-exec"

// bridgeExec bridges ProxyListenAddr to the proxy socket, runs the command with the proxy variables set, and
// returns its exit status; env is the command's environment without the proxy.
func bridgeExec(args, env []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "corral-sandbox-agent: bridge-exec SOCKET COMMAND [ARG...]")
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ProxyListenAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral-sandbox-agent: proxy bridge:", err)
		return 126
	}
	go serveBridge(ctx, ln, "unix", args[0])
	cmd := exec.Command(args[1], args[2:]...)
	proxy := "http://" + ProxyListenAddr
	// No no_proxy: every destination goes through the proxy, a registry the operator runs on the host's
	// loopback (trusted by --egress-allow-internal) too.
	cmd.Env = append(env, "http_proxy="+proxy, "https_proxy="+proxy, "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if exit.ExitCode() >= 0 {
			return exit.ExitCode()
		}
		return 128 + 9
	default:
		fmt.Fprintln(os.Stderr, "corral-sandbox-agent:", err)
		return 127
	}
}
