package api_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
	"github.com/corralhq/corral/internal/vault"
)

// revocations records the tunnels the API asked the connector hub to drop (api.TunnelRevoker).
type revocations struct {
	mu  sync.Mutex
	ids []string
}

func (r *revocations) Revoke(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
}

func (r *revocations) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.ids {
		if x == id {
			n++
		}
	}
	return n
}

// tunnelBackends runs a tunnel test over a real API server, with a vault, on each store backend: SQLite always,
// PostgreSQL when CORRAL_TEST_POSTGRES is set (pgtest skips with the reason otherwise).
func tunnelBackends(t *testing.T, tweak func(*api.Config), run func(t *testing.T, h *harness)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		run(t, newHarness(t, tweak))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, err := postgres.Open(ctxT(t), pgtest.NewDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		v, err := vault.Open(ctxT(t), st, vault.NewKey())
		if err != nil {
			t.Fatal(err)
		}
		h := harnessOver(t, st, func(c *api.Config) { c.Sealer = v }, tweak)
		h.vault = v
		run(t, h)
	})
}

// testCA is a certificate made for a test: its PEM, its DER and its private key's PEM.
type testCA struct {
	pem, keyPEM string
	der         []byte
	notAfter    time.Time
}

// newTestCA makes a self-signed certificate, a CA or not, valid from a day before notAfter until notAfter.
func newTestCA(t testing.TB, isCA bool, notAfter time.Time) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "private MCP CA"},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter, BasicConstraintsValid: true, IsCA: isCA,
		KeyUsage: x509.KeyUsageDigitalSignature}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		keyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})), der: der, notAfter: cert.NotAfter}
}

// jsonQuote quotes s as a JSON string.
func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (c testCA) fingerprint() string {
	sum := sha256.Sum256(c.der)
	return hex.EncodeToString(sum[:])
}

// TestTunnelsSDK: the tunnel endpoints through the official SDK on each store backend: create with and without a
// display name, each with its own domain under the operator's base domain; get; list (newest first, paged,
// archived ones on demand); the token revealed (the same twice) and rotated (a new id and value, revealed since,
// the connector hub told); CA certificates added (fingerprint and expiry from the certificate), at most two
// active, archived (idempotent) to make room, got and listed; the tunnel archived (idempotent, its certificates
// with it, the hub told), after which its token is neither revealed nor rotated and it takes no certificate.
// No get or list answer holds a token or a PEM.
func TestTunnelsSDK(t *testing.T) {
	t.Parallel()
	revoked := &revocations{}
	tunnelBackends(t, func(c *api.Config) {
		c.TunnelDomain = "Tunnels.Example.TEST."
		c.Tunnels = revoked
	}, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.client.Beta.Tunnels
		// raw gets a path and asserts that no secret of the test shows in the answer.
		var secrets []string
		raw := func(path string) string {
			t.Helper()
			status, _, body := h.do("GET", path, "")
			if status != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, status, body)
			}
			for _, s := range append(secrets, "BEGIN CERTIFICATE", "PRIVATE KEY") {
				if strings.Contains(string(body), s) {
					t.Fatalf("GET %s shows a secret or a PEM (%.12s…): %s", path, s, body)
				}
			}
			return string(body)
		}

		named, err := c.New(ctx, anthropic.BetaTunnelNewParams{DisplayName: anthropic.String("prod MCP")})
		if err != nil {
			t.Fatal(err)
		}
		label := regexp.MustCompile(`^[a-z2-7]{16}\.tunnels\.example\.test$`)
		if !strings.HasPrefix(named.ID, apitype.PrefixTunnel) || named.Type != "tunnel" || named.DisplayName != "prod MCP" ||
			!label.MatchString(named.Domain) || named.CreatedAt.IsZero() || !strings.Contains(named.RawJSON(), `"archived_at":null`) {
			t.Fatalf("created %s", named.RawJSON())
		}
		bare, err := c.New(ctx, anthropic.BetaTunnelNewParams{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(bare.RawJSON(), `"display_name":null`) || !label.MatchString(bare.Domain) || bare.Domain == named.Domain {
			t.Fatalf("created without a name %s (the other's domain %s)", bare.RawJSON(), named.Domain)
		}
		got, err := c.Get(ctx, named.ID, anthropic.BetaTunnelGetParams{})
		if err != nil || got.ID != named.ID || got.Domain != named.Domain || got.DisplayName != "prod MCP" || !got.CreatedAt.Equal(named.CreatedAt) {
			t.Fatalf("get: %v %s", err, got.RawJSON())
		}

		// The token: the same twice, until rotated.
		tok, err := c.RevealToken(ctx, named.ID, anthropic.BetaTunnelRevealTokenParams{})
		if err != nil {
			t.Fatal(err)
		}
		if tok.Type != "tunnel_token" || !strings.HasPrefix(tok.ID, apitype.PrefixTunnelToken) || !strings.HasPrefix(tok.TunnelToken, "ctt_") ||
			len(tok.TunnelToken) < 40 {
			t.Fatalf("revealed %s", tok.RawJSON())
		}
		again, err := c.RevealToken(ctx, named.ID, anthropic.BetaTunnelRevealTokenParams{})
		if err != nil || again.ID != tok.ID || again.TunnelToken != tok.TunnelToken {
			t.Fatalf("revealed again: %v %s, first %s", err, again.RawJSON(), tok.RawJSON())
		}
		other, err := c.RevealToken(ctx, bare.ID, anthropic.BetaTunnelRevealTokenParams{})
		if err != nil || other.TunnelToken == tok.TunnelToken || other.ID == tok.ID {
			t.Fatalf("the other tunnel's token: %v %s", err, other.RawJSON())
		}
		hashOf := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
		if byHash, err := h.store.TunnelByTokenHash(ctx, hashOf(tok.TunnelToken)); err != nil || byHash.ID != named.ID || byHash.TokenID != tok.ID {
			t.Fatalf("the tunnel by its token's hash: %v %+v", err, byHash)
		}
		rot, err := c.RotateToken(ctx, named.ID, anthropic.BetaTunnelRotateTokenParams{Reason: anthropic.String("leaked in a log")})
		if err != nil {
			t.Fatal(err)
		}
		if rot.ID == tok.ID || rot.TunnelToken == tok.TunnelToken || !strings.HasPrefix(rot.ID, apitype.PrefixTunnelToken) {
			t.Fatalf("rotated %s, was %s", rot.RawJSON(), tok.RawJSON())
		}
		if revoked.count(named.ID) != 1 {
			t.Errorf("the hub was told %d times to drop the rotated tunnel's connectors, want 1", revoked.count(named.ID))
		}
		now, err := c.RevealToken(ctx, named.ID, anthropic.BetaTunnelRevealTokenParams{})
		if err != nil || now.ID != rot.ID || now.TunnelToken != rot.TunnelToken {
			t.Fatalf("revealed after the rotation: %v %s, want %s", err, now.RawJSON(), rot.RawJSON())
		}
		if byHash, err := h.store.TunnelByTokenHash(ctx, hashOf(tok.TunnelToken)); err == nil {
			t.Fatalf("the rotated token still finds its tunnel: %+v", byHash)
		}
		if byHash, err := h.store.TunnelByTokenHash(ctx, hashOf(rot.TunnelToken)); err != nil || byHash.ID != named.ID {
			t.Fatalf("the new token does not find its tunnel: %v %+v", err, byHash)
		}
		secrets = append(secrets, tok.TunnelToken, rot.TunnelToken, other.TunnelToken)

		// Paging, newest first.
		third, err := c.New(ctx, anthropic.BetaTunnelNewParams{DisplayName: anthropic.String("third")})
		if err != nil {
			t.Fatal(err)
		}
		p1, err := c.List(ctx, anthropic.BetaTunnelListParams{Limit: anthropic.Int(2)})
		if err != nil || len(p1.Data) != 2 || p1.NextPage == "" || p1.Data[0].ID != third.ID || p1.Data[1].ID != bare.ID {
			t.Fatalf("first page: %v %+v", err, p1)
		}
		p2, err := c.List(ctx, anthropic.BetaTunnelListParams{Limit: anthropic.Int(2), Page: anthropic.String(p1.NextPage)})
		if err != nil || len(p2.Data) != 1 || p2.NextPage != "" || p2.Data[0].ID != named.ID {
			t.Fatalf("second page: %v %+v", err, p2)
		}
		var all []string
		for tn := range c.ListAutoPaging(ctx, anthropic.BetaTunnelListParams{Limit: anthropic.Int(1)}).All() {
			all = append(all, tn.ID)
		}
		if !slices.Equal(all, []string{third.ID, bare.ID, named.ID}) {
			t.Fatalf("auto-paged %v", all)
		}

		// Certificates.
		certs := c.Certificates
		ca1, ca2, ca3 := newTestCA(t, true, time.Now().Add(365*24*time.Hour)), newTestCA(t, true, time.Now().Add(30*24*time.Hour)),
			newTestCA(t, true, time.Now().Add(90*24*time.Hour))
		add := func(ca testCA) *anthropic.BetaTunnelCertificate {
			t.Helper()
			crt, err := certs.New(ctx, named.ID, anthropic.BetaTunnelCertificateNewParams{CACertificatePEM: ca.pem})
			if err != nil {
				t.Fatalf("add a certificate: %v", err)
			}
			if !strings.HasPrefix(crt.ID, apitype.PrefixTunnelCert) || crt.Type != "tunnel_certificate" || crt.TunnelID != named.ID ||
				crt.Fingerprint != ca.fingerprint() || !crt.ExpiresAt.Equal(ca.notAfter) || crt.CreatedAt.IsZero() ||
				!strings.Contains(crt.RawJSON(), `"archived_at":null`) || strings.Contains(crt.RawJSON(), "BEGIN") {
				t.Fatalf("added %s; want the fingerprint %s and expiry %s", crt.RawJSON(), ca.fingerprint(), ca.notAfter)
			}
			return crt
		}
		c1, c2 := add(ca1), add(ca2)
		_, err = certs.New(ctx, named.ID, anthropic.BetaTunnelCertificateNewParams{CACertificatePEM: ca3.pem})
		if aerr := wantAPIError(t, err, http.StatusConflict, apitype.ErrConflict); !strings.Contains(aerr.Message, "2 active certificates") ||
			!strings.Contains(aerr.Message, "archive one first") {
			t.Errorf("a third active certificate: %q", aerr.Message)
		}
		status, hdr, _ := h.do("POST", "/v1/tunnels/"+named.ID+"/certificates", `{"ca_certificate_pem":`+jsonQuote(ca3.pem)+`}`)
		if status != http.StatusConflict || hdr.Get("x-should-retry") != "false" {
			t.Errorf("a third active certificate: %d, x-should-retry %q (the SDKs retry a 409 without false)", status, hdr.Get("x-should-retry"))
		}
		arch1, err := certs.Archive(ctx, c1.ID, anthropic.BetaTunnelCertificateArchiveParams{TunnelID: named.ID})
		if err != nil || arch1.ArchivedAt.IsZero() || arch1.Fingerprint != c1.Fingerprint {
			t.Fatalf("archive a certificate: %v %s", err, arch1.RawJSON())
		}
		arch1b, err := certs.Archive(ctx, c1.ID, anthropic.BetaTunnelCertificateArchiveParams{TunnelID: named.ID})
		if err != nil || !arch1b.ArchivedAt.Equal(arch1.ArchivedAt) {
			t.Fatalf("archive it again: %v %s, first %s", err, arch1b.RawJSON(), arch1.RawJSON())
		}
		c3 := add(ca3)
		g, err := certs.Get(ctx, c2.ID, anthropic.BetaTunnelCertificateGetParams{TunnelID: named.ID})
		if err != nil || g.Fingerprint != c2.Fingerprint || !g.ExpiresAt.Equal(ca2.notAfter) || !g.ArchivedAt.IsZero() {
			t.Fatalf("get a certificate: %v %s", err, g.RawJSON())
		}
		_, err = certs.Get(ctx, c2.ID, anthropic.BetaTunnelCertificateGetParams{TunnelID: bare.ID})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
		ids := func(p anthropic.BetaTunnelCertificateListParams) []string {
			t.Helper()
			var out []string
			for crt := range certs.ListAutoPaging(ctx, named.ID, p).All() {
				out = append(out, crt.ID)
			}
			return out
		}
		if got := ids(anthropic.BetaTunnelCertificateListParams{}); !slices.Equal(got, []string{c3.ID, c2.ID}) {
			t.Errorf("active certificates %v, want %v", got, []string{c3.ID, c2.ID})
		}
		if got := ids(anthropic.BetaTunnelCertificateListParams{IncludeArchived: anthropic.Bool(true), Limit: anthropic.Int(1)}); !slices.Equal(got, []string{c3.ID, c2.ID, c1.ID}) {
			t.Errorf("all certificates, one a page: %v", got)
		}
		raw("/v1/tunnels/" + named.ID + "/certificates?include_archived=true")
		raw("/v1/tunnels/" + named.ID + "/certificates/" + c2.ID)
		raw("/v1/tunnels/" + named.ID)
		raw("/v1/tunnels?include_archived=true")
		if rec, err := h.store.TunnelCertificateGet(ctx, named.ID, c2.ID); err != nil || !strings.Contains(rec.PEM, "BEGIN CERTIFICATE") {
			t.Fatalf("the stored certificate: %v %+v", err, rec)
		}

		// Archive the tunnel: its certificates with it, idempotent, and it is no longer listed by default.
		archived, err := c.Archive(ctx, named.ID, anthropic.BetaTunnelArchiveParams{})
		if err != nil || archived.ArchivedAt.IsZero() || archived.Domain != named.Domain {
			t.Fatalf("archive: %v %s", err, archived.RawJSON())
		}
		if revoked.count(named.ID) != 2 {
			t.Errorf("the hub was told %d times to drop the tunnel's connectors, want 2 (rotation, archive)", revoked.count(named.ID))
		}
		archivedAgain, err := c.Archive(ctx, named.ID, anthropic.BetaTunnelArchiveParams{})
		if err != nil || !archivedAgain.ArchivedAt.Equal(archived.ArchivedAt) {
			t.Fatalf("archive again: %v %s, first %s", err, archivedAgain.RawJSON(), archived.RawJSON())
		}
		if got := ids(anthropic.BetaTunnelCertificateListParams{}); len(got) != 0 {
			t.Errorf("active certificates of an archived tunnel: %v", got)
		}
		for crt := range certs.ListAutoPaging(ctx, named.ID, anthropic.BetaTunnelCertificateListParams{IncludeArchived: anthropic.Bool(true)}).All() {
			if crt.ArchivedAt.IsZero() {
				t.Errorf("certificate %s of the archived tunnel is not archived: %s", crt.ID, crt.RawJSON())
			}
		}
		if g, err := certs.Archive(ctx, c2.ID, anthropic.BetaTunnelCertificateArchiveParams{TunnelID: named.ID}); err != nil || g.ArchivedAt.IsZero() {
			t.Errorf("archive a certificate the tunnel's archive archived: %v %s", err, g.RawJSON())
		}
		listed, err := c.List(ctx, anthropic.BetaTunnelListParams{})
		if err != nil || slices.ContainsFunc(listed.Data, func(x anthropic.BetaTunnel) bool { return x.ID == named.ID }) || len(listed.Data) != 2 {
			t.Fatalf("list without the archived: %v %+v", err, listed.Data)
		}
		listed, err = c.List(ctx, anthropic.BetaTunnelListParams{IncludeArchived: anthropic.Bool(true)})
		if err != nil || len(listed.Data) != 3 || listed.Data[2].ID != named.ID || listed.Data[2].ArchivedAt.IsZero() {
			t.Fatalf("list with the archived: %v %+v", err, listed.Data)
		}

		// What an archived tunnel refuses: 400 tunnel_archived.
		refusedArchived := func(what string, err error) {
			t.Helper()
			aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
			if !strings.Contains(aerr.RawJSON(), `"error_code":"tunnel_archived"`) || !strings.Contains(aerr.Message, "archived") {
				t.Errorf("%s on an archived tunnel: %s", what, aerr.RawJSON())
			}
		}
		_, err = c.RevealToken(ctx, named.ID, anthropic.BetaTunnelRevealTokenParams{})
		refusedArchived("reveal", err)
		_, err = c.RotateToken(ctx, named.ID, anthropic.BetaTunnelRotateTokenParams{})
		refusedArchived("rotate", err)
		_, err = certs.New(ctx, named.ID, anthropic.BetaTunnelCertificateNewParams{CACertificatePEM: ca1.pem})
		refusedArchived("add a certificate", err)
		if byHash, err := h.store.TunnelByTokenHash(ctx, hashOf(rot.TunnelToken)); err != nil || byHash.ArchivedAt == nil {
			t.Fatalf("the archived tunnel by its last token: %v %+v", err, byHash)
		}
	})
}

// TestTunnelsBadInput: what the tunnel endpoints refuse, with the status and error type of each, and the message
// naming what is wrong.
func TestTunnelsBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	tn, err := h.client.Beta.Tunnels.New(ctx, anthropic.BetaTunnelNewParams{})
	if err != nil {
		t.Fatal(err)
	}
	ca := newTestCA(t, true, time.Now().Add(24*time.Hour))
	leaf := newTestCA(t, false, time.Now().Add(24*time.Hour))
	expired := newTestCA(t, true, time.Now().Add(-time.Hour))
	certs := "/v1/tunnels/" + tn.ID + "/certificates"
	pemBody := func(s string) string { return `{"ca_certificate_pem":` + jsonQuote(s) + `}` }
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		typ                      apitype.ErrorType
		msg                      string
	}{
		{"display_name empty", "POST", "/v1/tunnels", `{"display_name":""}`, 400, apitype.ErrInvalidRequest, "display_name: must be 1 to 255"},
		{"display_name too long", "POST", "/v1/tunnels", `{"display_name":` + jsonQuote(strings.Repeat("n", 256)) + `}`, 400, apitype.ErrInvalidRequest, "display_name: longer than 255"},
		{"display_name with NUL", "POST", "/v1/tunnels", `{"display_name":"a\u0000b"}`, 400, apitype.ErrInvalidRequest, "display_name: must not contain NUL"},
		{"unknown field", "POST", "/v1/tunnels", `{"domain":"mine.example.com"}`, 400, apitype.ErrInvalidRequest, "domain: unknown field"},
		{"limit too large", "GET", "/v1/tunnels?limit=1001", "", 400, apitype.ErrInvalidRequest, "limit"},
		{"bad page", "GET", "/v1/tunnels?page=garbage", "", 400, apitype.ErrInvalidRequest, "page"},
		{"reason too long", "POST", "/v1/tunnels/" + tn.ID + "/rotate_token", `{"reason":` + jsonQuote(strings.Repeat("r", 1025)) + `}`, 400, apitype.ErrInvalidRequest, "reason"},
		{"no PEM", "POST", certs, `{}`, 400, apitype.ErrInvalidRequest, "ca_certificate_pem: required"},
		{"PEM with a private key", "POST", certs, pemBody(ca.pem + ca.keyPEM), 400, apitype.ErrInvalidRequest, "private key"},
		{"a private key alone", "POST", certs, pemBody(ca.keyPEM), 400, apitype.ErrInvalidRequest, "private key"},
		{"two certificates", "POST", certs, pemBody(ca.pem + expired.pem), 400, apitype.ErrInvalidRequest, "2 PEM blocks"},
		{"not PEM", "POST", certs, pemBody("MIIB this is no certificate"), 400, apitype.ErrInvalidRequest, "not PEM"},
		{"text around the block", "POST", certs, pemBody("my CA:\n" + ca.pem), 400, apitype.ErrInvalidRequest, "outside its PEM block"},
		{"a broken block before the certificate", "POST", certs, pemBody("-----BEGIN NOTE-----\n" + ca.pem), 400, apitype.ErrInvalidRequest, "outside its PEM block"},
		{"a broken certificate before the certificate", "POST", certs, pemBody("-----BEGIN CERTIFICATE-----\n!!\n" + ca.pem), 400, apitype.ErrInvalidRequest, "outside its PEM block"},
		{"not x509", "POST", certs, pemBody(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")}))), 400, apitype.ErrInvalidRequest, "not an X.509 certificate"},
		{"not a CA", "POST", certs, pemBody(leaf.pem), 400, apitype.ErrInvalidRequest, "not a CA certificate"},
		{"expired CA", "POST", certs, pemBody(expired.pem), 400, apitype.ErrInvalidRequest, "expired"},
		{"over 8 KB", "POST", certs, pemBody(ca.pem + strings.Repeat("\n", 8192)), 400, apitype.ErrInvalidRequest, "8 KB"},
		{"get an unknown tunnel", "GET", "/v1/tunnels/tnl_nope", "", 404, apitype.ErrNotFound, `tunnel "tnl_nope" not found`},
		{"archive an unknown tunnel", "POST", "/v1/tunnels/tnl_nope/archive", "", 404, apitype.ErrNotFound, "tnl_nope"},
		{"reveal an unknown tunnel's token", "POST", "/v1/tunnels/tnl_nope/reveal_token", "", 404, apitype.ErrNotFound, "tnl_nope"},
		{"rotate an unknown tunnel's token", "POST", "/v1/tunnels/tnl_nope/rotate_token", "{}", 404, apitype.ErrNotFound, "tnl_nope"},
		{"a certificate for an unknown tunnel", "POST", "/v1/tunnels/tnl_nope/certificates", pemBody(ca.pem), 404, apitype.ErrNotFound, "tnl_nope"},
		{"an unknown tunnel's certificates", "GET", "/v1/tunnels/tnl_nope/certificates", "", 404, apitype.ErrNotFound, "tnl_nope"},
		{"an unknown certificate", "GET", certs + "/tcrt_nope", "", 404, apitype.ErrNotFound, "tcrt_nope"},
		{"archive an unknown certificate", "POST", certs + "/tcrt_nope/archive", "", 404, apitype.ErrNotFound, "tcrt_nope"},
	} {
		status, _, body := h.do(tc.method, tc.path, tc.body)
		var env envelope
		decodeRaw(t, string(body), &env)
		if status != tc.status || env.Error.Type != tc.typ || !strings.Contains(env.Error.Message, tc.msg) {
			t.Errorf("%s: %d %s %q, want %d %s with %q", tc.name, status, env.Error.Type, env.Error.Message, tc.status, tc.typ, tc.msg)
		}
	}
	// Nothing refused was stored: the tunnel has no certificate, and it is the only one.
	l, err := h.client.Beta.Tunnels.Certificates.List(ctx, tn.ID, anthropic.BetaTunnelCertificateListParams{IncludeArchived: anthropic.Bool(true)})
	if err != nil || len(l.Data) != 0 {
		t.Fatalf("certificates after the refusals: %v %+v", err, l.Data)
	}
	tl, err := h.client.Beta.Tunnels.List(ctx, anthropic.BetaTunnelListParams{IncludeArchived: anthropic.Bool(true)})
	if err != nil || len(tl.Data) != 1 {
		t.Fatalf("tunnels after the refusals: %v %+v", err, tl.Data)
	}
	// The default base domain.
	if !strings.HasSuffix(tn.Domain, "."+apitype.DefaultTunnelDomain) {
		t.Errorf("domain %s, not under %s", tn.Domain, apitype.DefaultTunnelDomain)
	}
}

// TestTunnelsWithoutSealer: a server without a vault key cannot keep a tunnel's token, so it creates no tunnel.
func TestTunnelsWithoutSealer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.Sealer = nil })
	_, err := h.client.Beta.Tunnels.New(ctxT(t), anthropic.BetaTunnelNewParams{DisplayName: anthropic.String("x")})
	if aerr := wantAPIError(t, err, http.StatusInternalServerError, apitype.ErrAPI); !strings.Contains(aerr.Message, "vault key") {
		t.Errorf("message %q", aerr.Message)
	}
	l, err := h.client.Beta.Tunnels.List(ctxT(t), anthropic.BetaTunnelListParams{})
	if err != nil || len(l.Data) != 0 {
		t.Fatalf("tunnels: %v %+v", err, l.Data)
	}
}

// TestTunnelDomainConfig: a base domain that is no domain name is refused by New.
func TestTunnelDomainConfig(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, d := range []string{"under_score.example", "-a.example", "a..b", strings.Repeat("x", 64) + ".example", "sp ace.example"} {
		if _, err := api.New(api.Config{Store: h.store, TunnelDomain: d}); err == nil {
			t.Errorf("TunnelDomain %q accepted", d)
		}
	}
	if _, err := api.New(api.Config{Store: h.store, TunnelDomain: "tunnels.corp.example."}); err != nil {
		t.Errorf("a good domain refused: %v", err)
	}
}
