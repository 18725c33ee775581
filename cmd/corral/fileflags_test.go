package main

import (
	"context"
	"flag"
	"net"
	"strings"
	"testing"
	"time"
)

// TestFileFlagsS3: the S3 flags reach the adapter's configuration, half a configuration is refused, and an
// endpoint that does not answer fails the start instead of falling back to the local directory.
func TestFileFlagsS3(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) *fileFlags {
		t.Helper()
		var f fileFlags
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &f
	}
	f := parse("--files-s3-endpoint", "https://s3.example.com", "--files-s3-bucket", "b", "--files-s3-prefix",
		"corral/", "--files-s3-region", "eu-west-3")
	if c := f.s3; c.Endpoint != "https://s3.example.com" || c.Bucket != "b" || c.Prefix != "corral/" ||
		c.Region != "eu-west-3" {
		t.Fatalf("config %+v", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{{"--files-s3-endpoint", "127.0.0.1:1"}, {"--files-s3-bucket", "b"}} {
		if _, err := parse(args...).open(ctx, t.TempDir(), nil); err == nil ||
			!strings.Contains(err.Error(), "go together") {
			t.Errorf("%v: %v, want the flags' pairing refused", args, err)
		}
	}
	// A port nothing listens on (taken, then released).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if _, err := parse("--files-s3-endpoint", "http://"+addr, "--files-s3-bucket", "b").open(ctx, t.TempDir(),
		nil); err == nil {
		t.Error("a storage that does not answer was accepted")
	}
}
