package proxy_test

import (
	"context"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/sandbox"
)

type fixed sandbox.Egress

func (f *fixed) Egress(context.Context, *sandbox.Recipe) (*sandbox.Egress, error) {
	if f == nil {
		return nil, nil
	}
	e := sandbox.Egress(*f)
	return &e, nil
}

func TestJoin(t *testing.T) {
	pool := x509.NewCertPool()
	local := http.NotFoundHandler()
	git := &fixed{AllowInternal: []string{"git.corp:443"}, RootCAs: pool, Local: local}
	inject := &fixed{AllowInternal: []string{"git.corp:443", "api.corp:8443"}, RootCAs: pool,
		Env: map[string]string{"SSL_CERT_FILE": "/etc/corral/ca.pem"}, CACertPEM: []byte("cert")}
	e, err := proxy.Join(git, (*fixed)(nil), inject).Egress(context.Background(), &sandbox.Recipe{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(e.AllowInternal, ",") != "git.corp:443,api.corp:8443" || e.RootCAs != pool || e.Local == nil ||
		e.Env["SSL_CERT_FILE"] != "/etc/corral/ca.pem" || string(e.CACertPEM) != "cert" || e.Intercept != nil {
		t.Errorf("joined: %+v", e)
	}
	for name, pair := range map[string][2]*fixed{
		"two Locals":       {{Local: local}, {Local: http.NotFoundHandler()}},
		"two CAs":          {{CACertPEM: []byte("a")}, {CACertPEM: []byte("b")}},
		"conflicting Env":  {{Env: map[string]string{"X": "1"}}, {Env: map[string]string{"X": "2"}}},
		"different RootCA": {{RootCAs: pool}, {RootCAs: func() *x509.CertPool { p, _ := x509.SystemCertPool(); return p }()}},
	} {
		if _, err := proxy.Join(pair[0], pair[1]).Egress(context.Background(), &sandbox.Recipe{}); err == nil {
			t.Errorf("%s: joined", name)
		}
	}
}
