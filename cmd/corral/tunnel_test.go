package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestTunnelFlags: corral tunnel refuses an http:// server other than loopback (its token would cross the
// network in the clear) unless --insecure-http says so, and needs a server, a route and the token.
func TestTunnelFlags(t *testing.T) {
	t.Setenv(tunnelTokenEnv, "ctt_test")
	for _, c := range []struct {
		args []string
		want string // in the error; "" = it starts connecting (and stops with the context)
	}{
		{[]string{"--server", "http://10.1.2.3:8080", "--route", "wiki=10.0.0.5:443"}, "in the clear: use https (or --insecure-http)"},
		{[]string{"--server", "http://10.1.2.3:8080", "--insecure-http", "--route", "wiki=10.0.0.5:443"}, ""},
		{[]string{"--server", "http://127.0.0.1:1", "--route", "wiki=10.0.0.5:443"}, ""},
		{[]string{"--server", "https://corral.example", "--route", "wiki=10.0.0.5:443"}, ""},
		{[]string{"--server", "ftp://corral.example", "--route", "wiki=10.0.0.5:443"}, "is not an http(s) URL"},
		{[]string{"--server", "https://corral.example"}, "needs --server and at least one --route"},
		{[]string{"--server", "https://corral.example", "--route", "wiki"}, "is not NAME=HOST:PORT"},
		{[]string{"--server", "https://corral.example", "--route", "wiki=a:1", "--route", "wiki=b:2"}, `route "wiki" given twice`},
	} {
		ctx, cancel := context.WithCancel(context.Background()) // as a signal ends it
		time.AfterFunc(300*time.Millisecond, cancel)
		var errOut strings.Builder
		err := runTunnel(ctx, &stdio{out: &strings.Builder{}, err: &errOut}, c.args)
		cancel()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error()+errOut.String(), c.want)):
			t.Errorf("%v: %v %s, want %q", c.args, err, errOut.String(), c.want)
		}
	}
}
