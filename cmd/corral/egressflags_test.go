package main

import (
	"crypto/x509"
	"encoding/pem"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEgressFlags(t *testing.T) {
	var f egressFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse([]string{"--egress-allow-internal", "git.corp:443, 10.0.0.5:8443,[::1]:9000"}); err != nil {
		t.Fatal(err)
	}
	o, err := f.parse()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.AllowInternal, ",") != "git.corp:443,10.0.0.5:8443,[::1]:9000" || o.RootCAs != nil {
		t.Errorf("parsed %+v", o)
	}
	for _, bad := range []string{"git.corp", "git.corp:0", ":443", "git.corp:https"} {
		if _, err := (&egressFlags{allowInternal: bad}).parse(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (&egressFlags{caFile: junk}).parse(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("junk CA file: %v", err)
	}
	if _, err := (&egressFlags{caFile: filepath.Join(dir, "missing.pem")}).parse(); err == nil {
		t.Error("missing CA file accepted")
	}
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err = (&egressFlags{caFile: ca}).parse()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Certificate().Verify(x509.VerifyOptions{Roots: o.RootCAs, DNSName: "127.0.0.1"}); err != nil || len(o.CAPEM) == 0 {
		t.Errorf("the CA file's certificate is not trusted: %v", err)
	}
}
