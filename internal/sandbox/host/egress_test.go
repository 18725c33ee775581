package host

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

func testCA(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func TestEnvFor(t *testing.T) {
	t.Parallel()
	if got := EnvFor(nil); !slices.Equal(got, SandboxEnv()) {
		t.Errorf("EnvFor(nil) = %v", got)
	}
	cert, _ := testCA(t)
	env := EnvFor(&sandbox.Egress{CACertPEM: cert, Env: map[string]string{
		"MY_TOKEN": "corral-secret-1", "PATH": "corral-secret-2", "HTTPS_PROXY": "corral-secret-3",
		"SSL_CERT_FILE": "corral-secret-4", "LD_PRELOAD": "corral-secret-5", "BASH_ENV": "corral-secret-6"}})
	for _, want := range []string{"MY_TOKEN=corral-secret-1", "SSL_CERT_FILE=" + CABundlePath, "NODE_EXTRA_CA_CERTS=" + CABundlePath,
		"REQUESTS_CA_BUNDLE=" + CABundlePath, "CURL_CA_BUNDLE=" + CABundlePath, "GIT_SSL_CAINFO=" + CABundlePath} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %v", want, env)
		}
	}
	for _, kv := range env {
		if strings.Contains(kv, "corral-secret-") && kv != "MY_TOKEN=corral-secret-1" {
			t.Errorf("a credential replaced a variable of the sandbox: %s", kv)
		}
	}
	// Without a CA, no CA variable.
	for _, kv := range EnvFor(&sandbox.Egress{Env: map[string]string{"A": "b"}}) {
		if strings.HasPrefix(kv, "SSL_CERT_FILE=") {
			t.Errorf("CA variable without a CA: %s", kv)
		}
	}
}

func TestCABundle(t *testing.T) {
	t.Parallel()
	cert, key := testCA(t)
	if b, err := CABundle(nil, nil); b != nil || err != nil {
		t.Errorf("CABundle(nil, nil) = %q, %v", b, err)
	}
	b, err := CABundle(nil, &sandbox.Egress{CACertPEM: cert})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), string(cert)) {
		t.Errorf("the bundle does not end with the CA")
	}
	if sys, err := os.ReadFile(SystemCABundle); err == nil && !strings.HasPrefix(string(b), string(sys)) {
		t.Errorf("the bundle does not start with the system bundle")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Errorf("the bundle does not parse")
	}
	for name, bad := range map[string][]byte{"key": key, "cert then key": append(append([]byte{}, cert...), key...),
		"text first": append([]byte("junk\n"), cert...), "empty": []byte(" \n")} {
		if _, err := CABundle(nil, &sandbox.Egress{CACertPEM: bad}); err == nil {
			t.Errorf("CABundle took %s", name)
		}
	}
}
