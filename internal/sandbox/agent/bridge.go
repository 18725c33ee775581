package agent

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// serveBridge forwards the connections of ln to the proxy at addr on network ("unix": a socket bound into the
// sandbox; "tcp": the proxy's endpoint for a sandbox on another machine) until ctx is done.
func serveBridge(ctx context.Context, ln net.Listener, network, addr string) {
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
			u, err := net.DialTimeout(network, addr, 5*time.Second)
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
