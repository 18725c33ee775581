package egress

import (
	"bufio"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// A sandbox must not hold more than MaxConns connections to its proxy, idle keep-alive ones included: each is a
// file descriptor and a goroutine of the server. A connection beyond the limit waits until one is closed.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	p, err := Listen(sock, -1, -1, Policy{}, nil)
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
