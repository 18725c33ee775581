package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Bridge accepts TCP connections on listenAddr (inside the sandbox's own network namespace) and forwards each
// to the Unix socket at socketPath, the host's egress proxy. It returns when ctx is done.
func Bridge(ctx context.Context, listenAddr, socketPath string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listenAddr, err)
	}
	serveBridge(ctx, ln, socketPath)
	return nil
}

// serveBridge forwards the connections of ln to the Unix socket at socketPath until ctx is done.
func serveBridge(ctx context.Context, ln net.Listener, socketPath string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			u, err := net.DialTimeout("unix", socketPath, 5*time.Second)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); closeWrite(u); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); closeWrite(c); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
