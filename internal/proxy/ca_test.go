package proxy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
)

// keyForms are the encodings a leaked CA key could be found in.
func keyForms(t *testing.T, ca *CA) map[string][]byte {
	t.Helper()
	sec1, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ca.key.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"D raw":          d,
		"D hex":          []byte(hex.EncodeToString(d)),
		"D base64":       []byte(base64.StdEncoding.EncodeToString(d)),
		"SEC 1 DER":      sec1,
		"SEC 1 PEM":      pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}),
		"SEC 1 base64":   []byte(base64.StdEncoding.EncodeToString(sec1)[:64]),
		"PKCS #8 DER":    pkcs8,
		"PKCS #8 PEM":    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		"PKCS #8 b64":    []byte(base64.StdEncoding.EncodeToString(pkcs8)[:64]),
		"PRIVATE KEY":    []byte("PRIVATE KEY"),
		"D base64 (url)": []byte(base64.RawURLEncoding.EncodeToString(d)),
	}
}

func mustVault(t *testing.T, keys ...vault.Key) *vault.Vault {
	t.Helper()
	v, err := vault.New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLoadCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "egress-ca.json")
	k1 := vault.NewKey()
	ca, created, err := LoadCA(path, mustVault(t, k1))
	if err != nil || !created {
		t.Fatalf("LoadCA on a new file: created %v, %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("CA file mode %v, want 0600", fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	for label, form := range keyForms(t, ca) {
		if bytes.Contains(raw, form) {
			t.Errorf("the CA file holds the key (%s)", label)
		}
	}
	if !bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString(ca.Certificate().Raw)[:60])) {
		t.Errorf("the CA file lacks the certificate")
	}
	cert := ca.Certificate()
	if !cert.IsCA || cert.PublicKeyAlgorithm != x509.ECDSA || time.Until(cert.NotAfter) < 9*365*24*time.Hour {
		t.Errorf("CA certificate: IsCA %v, %v, not after %v", cert.IsCA, cert.PublicKeyAlgorithm, cert.NotAfter)
	}

	again, created, err := LoadCA(path, mustVault(t, k1))
	if err != nil || created {
		t.Fatalf("LoadCA again: created %v, %v", created, err)
	}
	if !again.key.Equal(ca.key) || !bytes.Equal(again.CertPEM(), ca.CertPEM()) {
		t.Errorf("the reloaded CA differs")
	}

	if _, _, err := LoadCA(path, mustVault(t, vault.NewKey())); !errors.Is(err, vault.ErrUnknownKey) {
		t.Errorf("LoadCA with another master key: %v, want ErrUnknownKey", err)
	}

	// After a rotation the CA is rewrapped under the new primary: the old key is not needed again.
	k2 := vault.NewKey()
	if _, _, err := LoadCA(path, mustVault(t, k2, k1)); err != nil {
		t.Fatalf("LoadCA during a rotation: %v", err)
	}
	rotated, _, err := LoadCA(path, mustVault(t, k2))
	if err != nil {
		t.Fatalf("LoadCA with the new key only: %v", err)
	}
	if !rotated.key.Equal(ca.key) {
		t.Errorf("the rotated CA has another key")
	}

	// A tampered ciphertext does not open.
	var f caFile
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	f.Ciphertext[len(f.Ciphertext)-1] ^= 1
	b, _ = json.Marshal(f)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadCA(path, mustVault(t, k2)); !errors.Is(err, vault.ErrDecrypt) {
		t.Errorf("LoadCA of a tampered file: %v, want ErrDecrypt", err)
	}
}

// TestCAKeyNotInDataDir opens a real store and vault and creates the CA in the same data directory: no file
// there, the database included, holds the CA key in any form.
func TestCAKeyNotInDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := vault.Open(ctx, st, vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	ca, _, err := LoadCA(filepath.Join(dir, "egress-ca.json"), v)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	forms := keyForms(t, ca)
	n := 0
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := os.ReadFile(path)
		for label, form := range forms {
			if bytes.Contains(b, form) {
				t.Errorf("%s holds the CA key (%s)", filepath.Base(path), label)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("searched %d files; want the database and the CA file", n)
	}
}

func TestLeaf(t *testing.T) {
	t.Parallel()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	for _, host := range []string{"api.example.com", "127.0.0.1", "[::1]"} {
		l, err := ca.Leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		name := normHost(host)
		if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("leaf for %s does not verify: %v", host, err)
		}
		if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots}); err == nil {
			t.Errorf("leaf for %s verifies for another host", host)
		}
		if life := l.Leaf.NotAfter.Sub(l.Leaf.NotBefore); life > LeafLifetime+10*time.Minute || life < LeafLifetime {
			t.Errorf("leaf for %s lives %v", host, life)
		}
		if l.Leaf.IsCA {
			t.Errorf("leaf for %s is a CA", host)
		}
		if ip := len(l.Leaf.IPAddresses); (name == "api.example.com") != (ip == 0) {
			t.Errorf("leaf for %s: IP SANs %v, DNS SANs %v", host, l.Leaf.IPAddresses, l.Leaf.DNSNames)
		}
		again, _ := ca.Leaf(host)
		if again != l {
			t.Errorf("leaf for %s is not cached", host)
		}
	}
	for i := range leafCacheSize + 1 {
		if _, err := ca.Leaf(hex.EncodeToString([]byte{byte(i >> 8), byte(i)}) + ".example"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(ca.leaves); n > leafCacheSize {
		t.Errorf("leaf cache holds %d, bound %d", n, leafCacheSize)
	}
}
