package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

// Lifetimes of the egress CA and of the leaf certificates it mints.
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	LeafLifetime = 24 * time.Hour
	// leafRenew is how long before its expiry a cached leaf is replaced.
	leafRenew = time.Hour
	// leafCacheSize bounds the cached leaves; a full cache is emptied.
	leafCacheSize = 1024
)

// caSecretID and caSecretName bind the CA key's ciphertext to its use (the vault's associated data): the
// sealed key does not open as any credential's secret, nor a credential's as the CA key.
const (
	caSecretID   = "corral_egress_ca"
	caSecretName = "ecdsa_p256_private_key"
)

// CA is the per-server certificate authority that the egress proxy signs intercepted TLS with. Sandboxes
// trust its certificate (CertPEM); its key stays in the server's memory and, at rest, in a file sealed with
// the vault. It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// caFile is the file a CA is kept in: the certificate in PEM, the key sealed with the vault.
type caFile struct {
	Version    int    `json:"version"`
	CertPEM    string `json:"certificate"`
	KeyID      string `json:"key_id"`
	WrappedKey []byte `json:"wrapped_key"`
	Ciphertext []byte `json:"ciphertext"`
}

// NewCA returns a fresh CA (ECDSA P-256, valid CALifetime) that lives in memory only.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress ca: %w", err)
	}
	return NewCAFromKey(key)
}

// NewCAFromKey returns a CA with a new self-signed certificate (valid CALifetime) for a P-256 key the caller
// holds: a test that must know the key to look for it, or an operator's own key.
func NewCAFromKey(key *ecdsa.PrivateKey) (*CA, error) {
	if key == nil || key.Curve != elliptic.P256() {
		return nil, errors.New("egress ca: the key must be ECDSA P-256")
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Corral egress CA", Organization: []string{"Corral"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress ca: %w", err)
	}
	return newCA(der, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress ca: %w", err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("egress ca: the certificate does not match the key")
	}
	return &CA{cert: cert, key: key, leaves: map[string]*tls.Certificate{},
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads the CA kept at path, its key opened with v; if there is no file, it creates a CA and writes it
// there (mode 0600) and reports created. A key wrapped under an older master key of v is rewrapped under the
// primary and the file rewritten, so that a rotated-out master key is not needed again.
//
// The key is sealed with the vault rather than kept in plain PEM: the data directory holds no usable CA key
// without the master key (a copied data directory or backup signs nothing), and the database never sees it.
func LoadCA(path string, v *vault.Vault) (ca *CA, created bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		ca, err := NewCA()
		if err != nil {
			return nil, false, err
		}
		if err := ca.write(path, v, os.O_EXCL); err != nil {
			return nil, false, err
		}
		return ca, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("egress ca: %w", err)
	}
	var f caFile
	if err := json.Unmarshal(b, &f); err != nil || f.Version != 1 {
		return nil, false, fmt.Errorf("egress ca: %s is not a Corral CA file (version 1)", path)
	}
	blk, _ := pem.Decode([]byte(f.CertPEM))
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, false, fmt.Errorf("egress ca: %s holds no certificate", path)
	}
	sealed := &store.SealedSecret{CredentialID: caSecretID, Name: caSecretName, KeyID: f.KeyID,
		WrappedKey: f.WrappedKey, Ciphertext: f.Ciphertext}
	raw, err := v.Open(sealed)
	if err != nil {
		return nil, false, fmt.Errorf("egress ca: open the key of %s (sealed under master key %s; start once with "+
			"that key among the vault keys to rewrap it, or remove the file to make a new CA): %w", path, f.KeyID, err)
	}
	key, err := x509.ParseECPrivateKey(raw)
	clear(raw)
	if err != nil {
		return nil, false, fmt.Errorf("egress ca: key of %s: %w", path, err)
	}
	ca, err = newCA(blk.Bytes, key)
	if err != nil {
		return nil, false, err
	}
	if time.Until(ca.cert.NotAfter) < 30*24*time.Hour {
		return nil, false, fmt.Errorf("egress ca: the CA of %s expires on %s; remove the file to make a new one",
			path, ca.cert.NotAfter.Format(time.DateOnly))
	}
	if f.KeyID != v.PrimaryKeyID() {
		if err := ca.write(path, v, os.O_TRUNC); err != nil {
			return nil, false, err
		}
	}
	return ca, false, nil
}

// write seals the CA's key with v and writes the CA file at path (mode 0600): created (flag os.O_EXCL) or
// replaced through a temporary file (os.O_TRUNC).
func (c *CA) write(path string, v *vault.Vault, flag int) error {
	raw, err := x509.MarshalECPrivateKey(c.key)
	if err != nil {
		return fmt.Errorf("egress ca: %w", err)
	}
	sealed, err := v.Seal(caSecretID, caSecretName, raw)
	clear(raw)
	if err != nil {
		return fmt.Errorf("egress ca: %w", err)
	}
	b, err := json.MarshalIndent(caFile{Version: 1, CertPEM: string(c.certPEM), KeyID: sealed.KeyID,
		WrappedKey: sealed.WrappedKey, Ciphertext: sealed.Ciphertext}, "", "\t")
	if err != nil {
		return fmt.Errorf("egress ca: %w", err)
	}
	dst := path
	if flag != os.O_EXCL {
		dst = path + ".new"
		_ = os.Remove(dst)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("egress ca: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && dst != path {
		err = os.Rename(dst, path)
	}
	if err != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("egress ca: write %s: %w", path, err)
	}
	return nil
}

// CertPEM is the CA's certificate in PEM: what a sandbox trusts. It never holds the key.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// Certificate is the CA's certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Leaf returns a certificate for host signed by the CA, valid LeafLifetime, with host as its only subject
// alternative name (an IP SAN for an IP literal). Leaves are cached per host until shortly before they expire.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return nil, errors.New("egress ca: no host")
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && now.Before(l.Leaf.NotAfter.Add(-leafRenew)) {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress ca: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(LeafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(c.cert.NotAfter) {
		tmpl.NotAfter = c.cert.NotAfter
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("egress ca: leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress ca: %w", err)
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(c.leaves) >= leafCacheSize {
		clear(c.leaves)
	}
	c.leaves[host] = l
	return l, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}
