package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// A sandbox must not hold more than MaxConns connections to its proxy, idle keep-alive ones included: each is a
// file descriptor and a goroutine of the server. A connection beyond the limit waits until one is closed.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	p, err := Listen(Config{Path: sock, UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Each request is refused (not an absolute URL), and its connection is kept alive.
	const req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	ask := func(c net.Conn) error {
		if _, err := c.Write([]byte(req)); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	conns := make([]net.Conn, 0, MaxConns)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range MaxConns {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if err := ask(c); err != nil {
			t.Fatal(err)
		}
	}
	extra, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	answered := make(chan error, 1)
	go func() { answered <- ask(extra) }()
	select {
	case err := <-answered:
		t.Fatalf("connection %d was served while %d idle ones are open (err %v)", MaxConns+1, MaxConns, err)
	case <-time.After(300 * time.Millisecond):
	}
	conns[0].Close()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the waiting connection, once a slot was free: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not served once a slot was free")
	}
	// At the limit again, with a connection waiting: Close still returns.
	waiting, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs while a connection waits for a slot")
	}
}

// When the destination closes its side of a CONNECT tunnel, the sandbox's side sees the end of the stream while
// it may still send: the proxy half-closes, it does not wait for the sandbox to close first.
func TestConnectHalfClose(t *testing.T) {
	t.Parallel()
	dst, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	go func() {
		c, err := dst.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("hello"))
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c) // the sandbox's side may still send
		c.Close()
	}()
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	p, err := Listen(Config{Path: sock, UID: -1, GID: -1, Policy: Policy{Hosts: []string{dst.Addr().String()},
		AllowInternal: []string{dst.Addr().String()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", dst.Addr()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "hello" {
		t.Errorf("through the tunnel: %q, %v; want hello and the end of the stream", got, err)
	}
}

// A 2xx reply to CONNECT carries no Transfer-Encoding and no Content-Length (RFC 9110, 9.3.6): the bytes that
// follow its blank line are the tunnel's, plain or intercepted. Read raw from the socket.
func TestConnectReplyHeaders(t *testing.T) {
	t.Parallel()
	dst, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	go func() {
		for {
			c, err := dst.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("server-first"))
			c.Close()
		}
	}()
	cert, _ := selfSigned(t)
	for name, eg := range map[string]*sandbox.Egress{
		"tunnel":      {AllowInternal: []string{dst.Addr().String()}},
		"intercepted": {AllowInternal: []string{dst.Addr().String()}, Intercept: &fakeInterceptor{hosts: map[string]bool{"127.0.0.1": true}, cert: cert}},
	} {
		sock := filepath.Join(t.TempDir(), "proxy.sock")
		p, err := Listen(Config{Path: sock, UID: -1, GID: -1, Policy: Policy{AllowAll: true}, Egress: eg})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", dst.Addr()); err != nil {
			t.Fatal(err)
		}
		// The server speaks first; an intercepted tunnel waits clientFirst for a ClientHello before it splices.
		_ = c.SetReadDeadline(time.Now().Add(clientFirst + 10*time.Second))
		raw, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		head, body, ok := strings.Cut(string(raw), "\r\n\r\n")
		if !ok || !strings.HasPrefix(head, "HTTP/1.1 200 ") {
			t.Fatalf("%s: reply %q", name, raw)
		}
		for _, line := range strings.Split(head, "\r\n")[1:] {
			if k, _, _ := strings.Cut(line, ":"); strings.EqualFold(k, "Transfer-Encoding") || strings.EqualFold(k, "Content-Length") {
				t.Errorf("%s: the 200 to CONNECT carries %q", name, line)
			}
		}
		if body != "server-first" {
			t.Errorf("%s: after the reply: %q, want the tunnel's bytes untouched", name, body)
		}
	}
}
