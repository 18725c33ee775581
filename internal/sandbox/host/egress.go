package host

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/sandbox"
)

// CABundlePath is where a sandbox whose egress terminates TLS (sandbox.Egress.CACertPEM) finds the CA bundle it
// trusts: the host's system bundle followed by the egress CA's certificate. CAEnv points the usual tools at it.
const CABundlePath = "/.corral/ca.pem"

// SystemCABundle is the host's CA bundle that CABundle starts with, when it exists.
var SystemCABundle = "/etc/ssl/certs/ca-certificates.crt"

// CABundleOverlays are the paths in a sandbox at which its CA bundle replaces the system bundle, for the tools
// that read no CAEnv variable: SystemCABundle, if it is a regular file of the /etc the sandbox sees (the
// image's, or without one (root nil) the host's).
func CABundleOverlays(root *ImageRoot) []string {
	if root != nil {
		if root.CAOverlay {
			return []string{SystemCABundle}
		}
		return nil
	}
	if fi, err := os.Lstat(SystemCABundle); err != nil || !fi.Mode().IsRegular() || !strings.HasPrefix(SystemCABundle, "/etc/") {
		return nil
	}
	return []string{SystemCABundle}
}

// CAEnv are the variables that name the CA bundle for common TLS stacks: OpenSSL and Go (SSL_CERT_FILE), curl,
// Python requests, Node and git.
var CAEnv = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO"}

// proxyEnv are the variables the agent sets itself (main.go) when it bridges the proxy.
var proxyEnv = []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY"}

// EnvFor is the whole environment a sandbox with egress eg starts with: SandboxEnv, the CA variables when eg
// has a CA, and eg.Env (credential placeholders, never a secret). A variable of eg.Env that the sandbox
// defines itself, or that steers the dynamic loader or the shell, is left out: a credential cannot replace
// PATH or the proxy.
func EnvFor(eg *sandbox.Egress) []string {
	env := SandboxEnv()
	if eg == nil {
		return env
	}
	reserved := map[string]bool{"BASH_ENV": true, "ENV": true, "IFS": true, "SHELLOPTS": true, "HISTFILE": true}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		reserved[k] = true
	}
	for _, k := range slices.Concat(CAEnv, proxyEnv) {
		reserved[k] = true
	}
	if len(eg.CACertPEM) > 0 {
		for _, k := range CAEnv {
			env = append(env, k+"="+CABundlePath)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(eg.Env)) {
		if reserved[k] || strings.HasPrefix(k, "LD_") || k == "" || strings.ContainsAny(k, "=\x00") {
			continue
		}
		env = append(env, k+"="+eg.Env[k])
	}
	return env
}

// CABundle returns the CA bundle of a sandbox with egress eg on the image root (nil: the host's /usr and
// /etc): the system bundle (the image's, or the host's), then eg.CACertPEM; nil if eg has no CA. It refuses a
// CACertPEM that holds anything but certificates, so that a key can never be copied into a sandbox by mistake.
func CABundle(root *ImageRoot, eg *sandbox.Egress) ([]byte, error) {
	if eg == nil || len(eg.CACertPEM) == 0 {
		return nil, nil
	}
	if err := onlyCertificates(eg.CACertPEM); err != nil {
		return nil, err
	}
	var sys []byte
	if root != nil {
		sys = root.SystemCA
	} else {
		var err error
		if sys, err = os.ReadFile(SystemCABundle); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("ca bundle: %w", err)
		}
	}
	var b bytes.Buffer
	b.Write(sys)
	if len(sys) > 0 && sys[len(sys)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString("# Corral egress CA: TLS to credential hosts is terminated in the sandbox's proxy\n")
	b.Write(eg.CACertPEM)
	return b.Bytes(), nil
}

// onlyCertificates checks that pemData is one or more PEM certificates and nothing else, not even text
// between them.
func onlyCertificates(pemData []byte) error {
	rest := bytes.TrimSpace(pemData)
	if len(rest) == 0 {
		return errors.New("ca bundle: empty CA certificate")
	}
	for len(rest) > 0 {
		if !bytes.HasPrefix(rest, []byte("-----BEGIN CERTIFICATE-----")) {
			return errors.New("ca bundle: the egress CA must be PEM certificates only")
		}
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil || blk.Type != "CERTIFICATE" || len(blk.Headers) > 0 {
			return errors.New("ca bundle: the egress CA must be PEM certificates only")
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("ca bundle: egress CA: %w", err)
		}
		rest = bytes.TrimSpace(rest)
	}
	return nil
}
