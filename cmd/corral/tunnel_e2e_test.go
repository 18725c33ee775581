package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/proxy"
)

// tunnelMCPEnv makes the test binary the private MCP server of TestTunnelThroughSDK: "CERT|KEY|BEARER|IP" (files
// of its certificate and key, the bearer token it requires, the address it listens on).
const tunnelMCPEnv = "CORRAL_TEST_TUNNEL_MCP"

// runTunnelMCPChild serves an MCP server (official MCP Go SDK, Streamable HTTP over TLS, one echo tool that
// requires the bearer token) on an address of the network namespace it runs in, prints it, and serves until its
// standard input closes.
func runTunnelMCPChild(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 4 {
		fmt.Fprintln(os.Stderr, "tunnel mcp child: bad spec")
		return 2
	}
	cert, err := tls.LoadX509KeyPair(parts[0], parts[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := sdk.NewServer(&sdk.Implementation{Name: "private", Version: "1"}, nil)
	type text struct {
		Text string `json:"text"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "Echoes its text."}, func(ctx context.Context, r *sdk.CallToolRequest, in text) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "private echo: " + in.Text}}}, nil, nil
	})
	mcpHandler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+parts[2] {
			fmt.Fprintf(os.Stderr, "refused %s %s with %d bytes of authorization\n", r.Method, r.URL, len(r.Header.Get("Authorization")))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	})
	l, err := tls.Listen("tcp", net.JoinHostPort(parts[3], "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("mcp listening on %s\n", l.Addr())
	go func() { _ = http.Serve(l, handler) }()
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// privateNetwork creates a network namespace joined to this one by a veth pair (a /30 of 10.0.0.0/8), and returns
// its name, the address of this side, and a private address of the namespace's own, on its loopback interface,
// that nothing outside it routes to. It is deleted when the test ends.
func privateNetwork(t *testing.T) (ns, hostIP, privateIP string) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CORRAL_REQUIRE_SANDBOXES") != "" {
			t.Fatalf("a network namespace needs root and ip (iproute2): %v, euid %d", err, os.Geteuid())
		}
		t.Skipf("a network namespace needs root and ip (iproute2): %v, euid %d", err, os.Geteuid())
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:3])
	ns, vh, vn := "corral-t"+id, "cth"+id, "ctn"+id
	subnet := fmt.Sprintf("10.%d.%d.", 200+int(b[0])%50, b[1])
	hostIP = subnet + fmt.Sprint(4*(int(b[2])%63)+1)
	nsIP := subnet + fmt.Sprint(4*(int(b[2])%63)+2)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", ns).Run()
		_ = exec.Command("ip", "link", "del", vh).Run()
	})
	run("link", "add", vh, "type", "veth", "peer", "name", vn)
	run("link", "set", vn, "netns", ns)
	run("addr", "add", hostIP+"/30", "dev", vh)
	run("link", "set", vh, "up")
	run("-n", ns, "addr", "add", nsIP+"/30", "dev", vn)
	run("-n", ns, "link", "set", vn, "up")
	run("-n", ns, "link", "set", "lo", "up")
	privateIP = fmt.Sprintf("192.168.%d.1", b[3])
	run("-n", ns, "addr", "add", privateIP+"/32", "dev", "lo")
	return ns, hostIP, privateIP
}

// nsProcess is a process started in a network namespace.
type nsProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	lines  chan string // its standard output's and error's lines
	exited chan struct{}
}

func startInNetns(t *testing.T, ns string, env []string, args ...string) *nsProcess {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Env = env
	p := &nsProcess{cmd: cmd, stderr: &lockedBuffer{}, lines: make(chan string, 64), exited: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, io.MultiWriter(p.stderr, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// await returns the rest of the first line that starts with prefix.
func (p *nsProcess) await(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-p.exited:
			t.Fatalf("%s exited: %s", p.cmd.Args, p.stderr.String())
		case <-timeout:
			t.Fatalf("%s: no line %q: %s", p.cmd.Args, prefix, p.stderr.String())
		}
	}
}

// TestTunnelThroughSDK is issue 29's tunnel end to end through the official SDK: a private MCP server (official
// MCP Go SDK, TLS with a certificate from the user's CA for wiki.<tunnel domain>) in a network namespace that
// only the connector, `corral tunnel`, reaches; `corral serve` on this side of a veth pair. Through the SDK: a
// tunnel, its CA certificate, its token; a vault credential for the private server's URL; an agent calls the
// server's tool and gets its answer, the bearer added by the MCP proxy (the connector holds none). Rotating the
// token stops the connector at once and the next call fails saying no connector is connected; the connector
// started with the new token carries calls again; archiving the tunnel stops it.
func TestTunnelThroughSDK(t *testing.T) {
	ns, hostIP, privateIP := privateNetwork(t)
	model := modeltest.NewServer(t)
	echo := func(id, text string) modeltest.Turn {
		return modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: id, Name: "mcp__wiki__echo", Input: `{"text":"` + text + `"}`}}}
	}
	data := t.TempDir()
	s := startServer(t, data, model, "--listen", hostIP+":0")
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	tnl, err := c.Beta.Tunnels.New(ctx, anthropic.BetaTunnelNewParams{DisplayName: anthropic.String("private wiki")})
	if err != nil {
		t.Fatal(err)
	}
	host := "wiki." + tnl.Domain
	model.Script(
		echo("toolu_1", "first"),
		// The red team's sandbox: what it can see, and whether it can use the tunnel itself.
		bashTurn(t, `env; tr '\0' '\n' < /proc/1/environ; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '; `+
			`grep -rsl 'ctt_' /workspace /tmp /etc /mnt 2>/dev/null | head -5; `+
			`curl -sS -m 5 "https://`+host+`/mcp" 2>&1; echo; echo sandbox-searched`),
		modeltest.Turn{Text: "Done."},
		echo("toolu_2", "rotated"), modeltest.Turn{Text: "Done."},
		echo("toolu_3", "again"), modeltest.Turn{Text: "Done."},
	)
	ca, err := proxy.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Tunnels.Certificates.New(ctx, tnl.ID, anthropic.BetaTunnelCertificateNewParams{CACertificatePEM: string(ca.CertPEM())}); err != nil {
		t.Fatal(err)
	}
	tok, err := c.Beta.Tunnels.RevealToken(ctx, tnl.ID, anthropic.BetaTunnelRevealTokenParams{})
	if err != nil {
		t.Fatal(err)
	}

	// The private server: its certificate from the user's CA, in the namespace.
	leaf, err := ca.Leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	bearer := "wiki-bearer-" + secretString("")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mcpSrv := startInNetns(t, ns, append(os.Environ(), tunnelMCPEnv+"="+certFile+"|"+keyFile+"|"+bearer+"|"+privateIP), self, "-test.run=^$")
	mcpAddr := mcpSrv.await(t, "mcp listening on ")
	// From this side, the server's address is nobody's.
	if conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", mcpAddr,
		&tls.Config{ServerName: host, RootCAs: certPool(ca)}); err == nil {
		conn.Close()
		t.Fatalf("the private server answers at %s outside its namespace", mcpAddr)
	}

	connect := func(token string) *nsProcess {
		t.Helper()
		p := startInNetns(t, ns, append(os.Environ(), tunnelTokenEnv+"="+token),
			filepath.Join(binDir, "corral"), "tunnel", "--server", s.url, "--insecure-http", "--route", "wiki="+mcpAddr)
		p.await(t, "corral tunnel: connected to ")
		return p
	}
	conn := connect(tok.TunnelToken)

	vault, err := c.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "wiki"})
	if err != nil {
		t.Fatal(err)
	}
	mcpURL := "https://" + host + "/mcp"
	if _, err := c.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: bearer, MCPServerURL: mcpURL}},
	}); err != nil {
		t.Fatal(err)
	}
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "tunnel", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		MCPServers: []anthropic.BetaManagedAgentsURLMCPServerParams{{Name: "wiki", URL: mcpURL}},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{
			{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}},
			{OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "wiki",
				DefaultConfig: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParams{
					PermissionPolicy: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParamsPermissionPolicyUnion{OfAlwaysAllow: &anthropic.BetaManagedAgentsAlwaysAllowPolicyParam{}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	envRes, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "tunnel"})
	if err != nil {
		t.Fatal(err)
	}
	// call runs a session whose model calls the private server's echo, and returns the result's text and
	// whether it is an error, and the session's events.
	var sandboxSaw string
	call := func(what string) (string, bool, string) {
		t.Helper()
		sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envRes.ID,
			VaultIDs: []string{vault.ID},
		})
		if err != nil {
			t.Fatal(err)
		}
		events, raw := sendAndWait(ctx, t, c, sess.ID, "Ask the wiki "+what+".")
		for _, r := range toolResults(events) {
			sandboxSaw += r.text
		}
		for _, ev := range events {
			if ev.Type == "agent.mcp_tool_result" {
				res := ev.AsAgentMCPToolResult()
				var text strings.Builder
				for _, b := range res.Content {
					text.WriteString(b.Text)
				}
				return text.String(), res.IsError, raw
			}
		}
		return "", true, raw
	}
	if text, isErr, raw := call("first"); isErr || text != "private echo: first" {
		t.Fatalf("through the tunnel: %q (error %v): %s\nthe private server: %s", text, isErr, raw, mcpSrv.stderr.String())
	}
	if !strings.Contains(sandboxSaw, "sandbox-searched") {
		t.Fatalf("the sandbox's search did not run: %s", sandboxSaw)
	}
	t.Logf("the sandbox's own request for the tunnel's host: %s", sandboxSaw[max(0, strings.LastIndex(sandboxSaw, "sandbox-searched")-300):])
	if strings.Contains(sandboxSaw, "private echo") {
		t.Errorf("the sandbox reached the private server itself: %s", sandboxSaw)
	}
	// The red team: neither the tunnel's token nor the private server's bearer is anywhere a sandbox, the model,
	// a client of the session or the connector can see; the server keeps the token sealed.
	var modelReqs strings.Builder
	for _, r := range model.Requests() {
		modelReqs.Write(r.Body)
	}
	places := map[string]string{
		"what bash saw in the sandbox": sandboxSaw,
		"the model's requests":         modelReqs.String(),
		"the tunnel (HTTP)":            rawGET(t, s, "/v1/tunnels/"+tnl.ID),
		"the tunnels (HTTP)":           rawGET(t, s, "/v1/tunnels?include_archived=true"),
		"its certificates (HTTP)":      rawGET(t, s, "/v1/tunnels/"+tnl.ID+"/certificates"),
		"the credentials (HTTP)":       rawGET(t, s, "/v1/vaults/"+vault.ID+"/credentials"),
		"the server's log":             s.stderr.String() + s.stdout.String(),
		"the connector's output":       conn.stderr.String(),
	}
	for path, b := range dataDirFiles(t, data) {
		places["the data directory's "+path] = string(b) + " "
	}
	forbidden := map[string]string{"the tunnel token": tok.TunnelToken, "the private server's bearer": bearer}
	assertNowhere(t, places, forbidden)

	// Rotation: the connector is dropped at once and stops on its refused token.
	rotated, err := c.Beta.Tunnels.RotateToken(ctx, tnl.ID, anthropic.BetaTunnelRotateTokenParams{Reason: anthropic.String("e2e")})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-conn.exited:
		t.Logf("the connector stopped %v after the rotation", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the connector still runs 10 s after its token was rotated: %s", conn.stderr.String())
	}
	if !strings.Contains(conn.stderr.String(), "refused the tunnel token") {
		t.Errorf("the connector's last words: %s", conn.stderr.String())
	}
	if text, isErr, raw := call("after the rotation"); !isErr || !strings.Contains(raw, "no connector of tunnel "+tnl.ID) {
		t.Errorf("without a connector: %q (error %v): %s", text, isErr, raw)
	}

	conn = connect(rotated.TunnelToken)
	if text, isErr, raw := call("again"); isErr || text != "private echo: again" {
		t.Fatalf("with the new token: %q (error %v): %s", text, isErr, raw)
	}

	if _, err := c.Beta.Tunnels.Archive(ctx, tnl.ID, anthropic.BetaTunnelArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the connector still runs 10 s after its tunnel was archived: %s", conn.stderr.String())
	}
}

func certPool(ca *proxy.CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Certificate())
	return p
}
