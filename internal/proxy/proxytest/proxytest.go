// Package proxytest sets up the credential proxy (package proxy) for the sandbox suites: a vault and an egress
// CA of their own, and the session's environment_variable credentials in an in-memory store, so that each
// sandbox backend's test runs sandboxtest.RunSecrets against the real Secrets, Injector and CA.
package proxytest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

var _ sandboxtest.SecretsSetup = Setup

// Setup seals creds in a vault of a new master key, attaches the vault to every session and returns the
// proxy.Secrets over them (the operator's trusted pairs allowInternal), with the master key and the egress CA's
// private key, in every encoding a leak could show them in, as the strings no sandbox may reveal.
func Setup(t *testing.T, creds []sandboxtest.SecretCredential, allowInternal []string) (sandbox.EgressSource, map[string]string) {
	t.Helper()
	key := vault.NewKey()
	v, err := vault.New(key)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := proxy.NewCAFromKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	st := &memStore{vault: apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), CreatedAt: apitype.Now()},
		secrets: map[string][]store.SealedSecret{}}
	for _, c := range creds {
		cred := apitype.Credential{Type: apitype.ObjectCredential, ID: apitype.NewID(apitype.PrefixCredential), VaultID: st.vault.ID,
			Auth: apitype.CredentialAuth{Type: apitype.AuthEnvironmentVariable, SecretName: c.Name,
				InjectionLocation: &apitype.InjectionLocation{Header: true, Body: c.Body},
				Networking:        &apitype.CredentialNetworking{Type: "limited", AllowedHosts: c.Hosts}}}
		sealed, err := v.Seal(cred.ID, "secret_value", []byte(c.Value))
		if err != nil {
			t.Fatal(err)
		}
		st.creds = append(st.creds, cred)
		st.secrets[cred.ID] = []store.SealedSecret{*sealed}
	}
	src, err := proxy.NewSecrets(proxy.SecretsConfig{Store: st, Vault: v, CA: ca, AllowInternal: allowInternal})
	if err != nil {
		t.Fatal(err)
	}
	return src, KeyForms(key, caKey)
}

// KeyForms returns a master key and a CA key in the encodings a leak could show them in: base64 and hex of the
// master key; the CA key's PEM (SEC 1 and PKCS #8), its DER in base64 (whole, and the first line of a PEM
// body), and its scalar D in hex and base64.
func KeyForms(key vault.Key, caKey *ecdsa.PrivateKey) map[string]string {
	raw, _ := base64.StdEncoding.DecodeString(key.Encode())
	d, err := caKey.Bytes() // the scalar, fixed length
	if err != nil {
		panic(err)
	}
	out := map[string]string{
		"master key (base64)":     key.Encode(),
		"master key (base64url)":  base64.RawURLEncoding.EncodeToString(raw),
		"master key (hex)":        hex.EncodeToString(raw),
		"CA key D (hex)":          hex.EncodeToString(d),
		"CA key D (base64)":       base64.StdEncoding.EncodeToString(d),
		"CA key D (base64url)":    base64.RawURLEncoding.EncodeToString(d),
		"CA key D (hex, no zero)": hex.EncodeToString(bytes.TrimLeft(d, "\x00")),
	}
	if der, err := x509.MarshalECPrivateKey(caKey); err == nil {
		b64 := base64.StdEncoding.EncodeToString(der)
		out["CA key (SEC 1 PEM)"] = string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
		out["CA key (SEC 1 DER base64)"] = b64
		out["CA key (SEC 1 PEM first line)"] = b64[:64]
	}
	if der, err := x509.MarshalPKCS8PrivateKey(caKey); err == nil {
		b64 := base64.StdEncoding.EncodeToString(der)
		out["CA key (PKCS #8 PEM)"] = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
		out["CA key (PKCS #8 PEM first line)"] = b64[:64]
	}
	return out
}

// memStore is a proxy.CredentialStore of one vault that every session uses.
type memStore struct {
	vault   apitype.Vault
	creds   []apitype.Credential
	secrets map[string][]store.SealedSecret
}

func (s *memStore) SessionGet(_ context.Context, id string) (*apitype.Session, error) {
	return &apitype.Session{Type: apitype.ObjectSession, ID: id, VaultIDs: []string{s.vault.ID}}, nil
}

func (s *memStore) VaultGet(_ context.Context, id string) (*apitype.Vault, error) {
	if id != s.vault.ID {
		return nil, store.ErrNotFound
	}
	v := s.vault
	return &v, nil
}

func (s *memStore) CredentialList(_ context.Context, p *store.CredentialListParams) ([]apitype.Credential, error) {
	if p.VaultID != s.vault.ID {
		return nil, store.ErrNotFound
	}
	return append([]apitype.Credential(nil), s.creds...), nil
}

func (s *memStore) CredentialGet(_ context.Context, p *store.CredentialRef) (*apitype.Credential, error) {
	for _, c := range s.creds {
		if c.ID == p.ID && c.VaultID == p.VaultID {
			return &c, nil
		}
	}
	return nil, store.ErrNotFound
}

func (s *memStore) SecretList(_ context.Context, p *store.SecretListParams) ([]store.SealedSecret, error) {
	return append([]store.SealedSecret(nil), s.secrets[p.CredentialID]...), nil
}
