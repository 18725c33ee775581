package kubetest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the cluster's certificates and keys as PEM; write stores them as the command lines name them.
type pki struct {
	caCert, caKey         []byte
	apiserver, apiKey     []byte
	admin, adminKey       []byte
	kubeletClient, kcKey  []byte // the API server's client certificate towards the kubelet
	node, nodeKey         []byte // the kubelet's client certificate towards the API server
	kubeletServ, kservKey []byte
	saKey, saPub          []byte
}

// newPKI makes a fresh CA and every certificate the components need. The certificates live only as long as one
// cluster, so ECDSA P-256 keys and a validity of a few days are enough.
func newPKI(nodeIP net.IP, nodeName string) (*pki, error) {
	now := time.Now().Add(-time.Hour) // Tolerate a little clock skew between the components.
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "corral-kubetest-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &pki{caCert: pemCert(caDER)}
	if p.caKey, err = pemKey(caKey); err != nil {
		return nil, err
	}

	leaf := func(cn string, org []string, server bool, ips []net.IP, dns []string) (cert, key []byte, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn, Organization: org},
			NotBefore:    now,
			NotAfter:     now.Add(7 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		if server {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, k.Public(), caKey)
		if err != nil {
			return nil, nil, err
		}
		key, err = pemKey(k)
		return pemCert(der), key, err
	}
	loopback := net.IPv4(127, 0, 0, 1)
	masters := []string{"system:masters"}
	if p.apiserver, p.apiKey, err = leaf("kube-apiserver", nil, true,
		[]net.IP{loopback, nodeIP, net.ParseIP(kubernetesServiceIP)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	); err != nil {
		return nil, err
	}
	if p.admin, p.adminKey, err = leaf("kubetest-admin", masters, false, nil, nil); err != nil {
		return nil, err
	}
	if p.kubeletClient, p.kcKey, err = leaf("kube-apiserver-kubelet-client", masters, false, nil, nil); err != nil {
		return nil, err
	}
	if p.node, p.nodeKey, err = leaf("system:node:"+nodeName, []string{"system:nodes"}, false, nil, nil); err != nil {
		return nil, err
	}
	kubeletIPs, kubeletNames := []net.IP{nodeIP, loopback}, []string{nodeName, "localhost"}
	if p.kubeletServ, p.kservKey, err = leaf(nodeName, nil, true, kubeletIPs, kubeletNames); err != nil {
		return nil, err
	}

	// Service account tokens: the API server verifies with the public key and signs with the private one (RS256).
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	p.saKey = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)})
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	p.saPub = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	return p, nil
}

// write stores every file under dir with the names the component command lines use.
func (p *pki) write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt": p.caCert, "ca.key": p.caKey,
		"apiserver.crt": p.apiserver, "apiserver.key": p.apiKey,
		"admin.crt": p.admin, "admin.key": p.adminKey,
		"kubelet-client.crt": p.kubeletClient, "kubelet-client.key": p.kcKey,
		"node.crt": p.node, "node.key": p.nodeKey,
		"kubelet-serving.crt": p.kubeletServ, "kubelet-serving.key": p.kservKey,
		"sa.key": p.saKey, "sa.pub": p.saPub,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("kubetest: crypto/rand: %v", err)) // crypto/rand does not fail on Linux.
	}
	return n
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
