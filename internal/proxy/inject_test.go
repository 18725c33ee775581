package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
)

var placeholderRE = regexp.MustCompile(`^corral-secret-[0-9a-f]{32}$`)

type fixture struct {
	st  store.Store
	v   *vault.Vault
	ctx context.Context
}

// adapters open a fresh store of each adapter (PostgreSQL when CORRAL_TEST_POSTGRES is set).
var adapters = map[string]func(t *testing.T) store.Store{
	"sqlite": func(t *testing.T) store.Store {
		st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	},
	"postgres": func(t *testing.T) store.Store {
		st, err := postgres.Open(context.Background(), pgtest.NewDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	},
}

func newFixture(t *testing.T, st store.Store) *fixture {
	t.Helper()
	ctx := context.Background()
	v, err := vault.Open(ctx, st, vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{st: st, v: v, ctx: ctx}
}

func (f *fixture) vault(t *testing.T) string {
	t.Helper()
	now := apitype.Now()
	vl := &apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), DisplayName: "v", Metadata: map[string]string{},
		CreatedAt: now, UpdatedAt: now}
	if err := f.st.VaultCreate(f.ctx, vl); err != nil {
		t.Fatal(err)
	}
	return vl.ID
}

// credential creates a credential of auth in vault vid with its secret (secret_value, or token).
func (f *fixture) credential(t *testing.T, vid string, auth apitype.CredentialAuth, value string) string {
	t.Helper()
	now := apitype.Now()
	c := &apitype.Credential{Type: apitype.ObjectCredential, ID: apitype.NewID(apitype.PrefixCredential), VaultID: vid,
		Metadata: map[string]string{}, Auth: auth, CreatedAt: now, UpdatedAt: now}
	name, match := "secret_value", auth.SecretName
	if auth.Type != apitype.AuthEnvironmentVariable {
		name, match = "token", auth.MCPServerURL
	}
	sealed, err := f.v.Seal(c.ID, name, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.CredentialCreate(f.ctx, &store.CredentialCreateParams{Credential: c, MatchKey: match,
		Secrets: []store.SealedSecret{*sealed}}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

func (f *fixture) session(t *testing.T, vaults ...string) string {
	t.Helper()
	now := apitype.Now()
	s := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), EnvironmentID: "env_x",
		Status: apitype.StatusIdle, Agent: apitype.SessionAgent{Type: apitype.ObjectAgent, ID: "agent_x", Version: 1, Name: "a"},
		VaultIDs: vaults, Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if _, _, err := f.st.SessionCreate(f.ctx, &store.SessionCreateParams{Session: s}); err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func envAuth(name string, body bool, hosts ...string) apitype.CredentialAuth {
	n := &apitype.CredentialNetworking{Type: "unrestricted"}
	if len(hosts) > 0 {
		n = &apitype.CredentialNetworking{Type: "limited", AllowedHosts: hosts}
	}
	return apitype.CredentialAuth{Type: apitype.AuthEnvironmentVariable, SecretName: name,
		InjectionLocation: &apitype.InjectionLocation{Header: true, Body: body}, Networking: n}
}

// TestSecretsEgress reads a session's credentials through a real store (each adapter) and vault.
func TestSecretsEgress(t *testing.T) {
	t.Parallel()
	for name, open := range adapters {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testSecretsEgress(t, newFixture(t, open(t)))
		})
	}
}

func testSecretsEgress(t *testing.T, f *fixture) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSecrets(SecretsConfig{Store: f.st, Vault: f.v, CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2, archived := f.vault(t), f.vault(t), f.vault(t)
	f.credential(t, v1, envAuth("API_TOKEN", false, "api.example.com"), "value-of-api-token")
	f.credential(t, v1, envAuth("ANY_TOKEN", true), "value-of-any-token")
	f.credential(t, v1, apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: "https://mcp.example.com/"}, "bearer-not-an-env")
	gone := f.credential(t, v1, envAuth("GONE_TOKEN", false, "api.example.com"), "value-of-gone")
	if _, err := f.st.CredentialArchive(f.ctx, &store.CredentialArchiveParams{CredentialRef: store.CredentialRef{VaultID: v1, ID: gone}, At: apitype.Now()}); err != nil {
		t.Fatal(err)
	}
	f.credential(t, v2, envAuth("API_TOKEN", false, "evil.example.com"), "second-vault-same-name")
	f.credential(t, v2, envAuth("WILD_TOKEN", false, "*.example.org"), "value-of-wild")
	f.credential(t, archived, envAuth("ARCHIVED_TOKEN", false, "api.example.com"), "value-of-archived")
	if _, err := f.st.VaultArchive(f.ctx, &store.ArchiveParams{ID: archived, At: apitype.Now()}); err != nil {
		t.Fatal(err)
	}
	sess := f.session(t, v1, v2, archived)

	eg, err := src.Egress(f.ctx, &sandbox.Recipe{SessionID: sess})
	if err != nil {
		t.Fatal(err)
	}
	if len(eg.Env) != 3 || eg.Env["API_TOKEN"] == "" || eg.Env["ANY_TOKEN"] == "" || eg.Env["WILD_TOKEN"] == "" {
		t.Fatalf("Env = %v, want API_TOKEN, ANY_TOKEN and WILD_TOKEN", eg.Env)
	}
	seen := map[string]bool{}
	for k, ph := range eg.Env {
		if !placeholderRE.MatchString(ph) || seen[ph] {
			t.Errorf("%s = %q: not a fresh placeholder", k, ph)
		}
		seen[ph] = true
	}
	if !bytes.Equal(eg.CACertPEM, ca.CertPEM()) {
		t.Errorf("CACertPEM is not the CA's certificate")
	}
	in := eg.Intercept
	// ANY_TOKEN is unrestricted: every host is intercepted.
	for _, host := range []string{"api.example.com", "API.example.com.", "evil.example.com", "x.example.org", "anything.test"} {
		if !in.Intercepts(host, "443") {
			t.Errorf("Intercepts(%s) = false", host)
		}
	}
	if in.Intercepts(sandbox.LocalHost, "80") {
		t.Errorf("the proxy's own host is intercepted")
	}
	// API_TOKEN is the first vault's: sent to api.example.com, not to the second vault's evil.example.com.
	req := request(t, "https://api.example.com/", "Bearer "+eg.Env["API_TOKEN"], "")
	if err := in.Rewrite(req); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer value-of-api-token" {
		t.Errorf("api.example.com got %q", got)
	}
	req = request(t, "https://evil.example.com/", "Bearer "+eg.Env["API_TOKEN"], "")
	if err := in.Rewrite(req); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer "+eg.Env["API_TOKEN"] {
		t.Errorf("evil.example.com got %q, want the placeholder", got)
	}

	// Each sandbox gets placeholders of its own.
	eg2, err := src.Egress(f.ctx, &sandbox.Recipe{SessionID: sess})
	if err != nil {
		t.Fatal(err)
	}
	for k := range eg.Env {
		if eg.Env[k] == eg2.Env[k] {
			t.Errorf("%s has the same placeholder in two sandboxes", k)
		}
	}

	// Read again: an archived credential is no longer injected, a new secret value is, under the same
	// placeholders.
	apiID := credID(t, f, v1, "API_TOKEN")
	f.updateSecret(t, v1, apiID, "rotated-api-token")
	wild := credID(t, f, v2, "WILD_TOKEN")
	if _, err := f.st.CredentialArchive(f.ctx, &store.CredentialArchiveParams{CredentialRef: store.CredentialRef{VaultID: v2, ID: wild}, At: apitype.Now()}); err != nil {
		t.Fatal(err)
	}
	inj := in.(*Injector)
	rewrite := func(url, ph string) string {
		t.Helper()
		req := request(t, url, "Bearer "+ph, "")
		if err := inj.Rewrite(req); err != nil {
			t.Fatal(err)
		}
		return req.Header.Get("Authorization")
	}
	if got := rewrite("https://x.example.org/", eg.Env["WILD_TOKEN"]); got != "Bearer value-of-wild" {
		t.Fatalf("before the refresh: %q", got)
	}
	inj.mu.Lock()
	inj.loaded = time.Time{}
	inj.mu.Unlock()
	if got := rewrite("https://api.example.com/", eg.Env["API_TOKEN"]); got != "Bearer rotated-api-token" {
		t.Errorf("after a new secret_value: %q", got)
	}
	// An archived credential's placeholder, sent where it was meant to go, is refused with a message that
	// names the variable (and holds neither secret nor placeholder); elsewhere it goes out as sent.
	refused := func(url, ph, name string) {
		t.Helper()
		for _, auth := range []string{"Bearer " + ph, "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+ph))} {
			req := request(t, url, auth, "")
			err := inj.Rewrite(req)
			if !errors.Is(err, egress.ErrDenied) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "archived") {
				t.Errorf("%s with %s's revoked placeholder: %v; want a refusal naming it", url, name, err)
			} else if strings.Contains(err.Error(), ph) || strings.Contains(err.Error(), "value-of") {
				t.Errorf("the refusal shows a placeholder or a secret: %v", err)
			}
			if got := req.Header.Get("Authorization"); got != auth {
				t.Errorf("a refused request was rewritten: %q", got)
			}
		}
	}
	refused("https://x.example.org/", eg.Env["WILD_TOKEN"], "WILD_TOKEN")
	if got := rewrite("https://api.example.com/", eg.Env["WILD_TOKEN"]); got != "Bearer "+eg.Env["WILD_TOKEN"] {
		t.Errorf("an archived credential's placeholder at a host it was not meant for: %q", got)
	}
	if _, err := f.st.VaultArchive(f.ctx, &store.ArchiveParams{ID: v1, At: apitype.Now()}); err != nil {
		t.Fatal(err)
	}
	inj.mu.Lock()
	inj.loaded = time.Time{}
	inj.mu.Unlock()
	refused("https://api.example.com/", eg.Env["API_TOKEN"], "API_TOKEN")
	// The hosts of revoked credentials stay intercepted for this sandbox (so that their placeholders are
	// refused, not tunnelled out); the secrets of the others are still injected.
	if !inj.Intercepts("anything.test", "443") {
		t.Errorf("the archived vault's unrestricted credential's hosts are no longer intercepted")
	}
	if got := rewrite("https://anything.test/", "no placeholder"); got != "Bearer no placeholder" {
		t.Errorf("a request without a revoked placeholder: %q", got)
	}

	// No vault, or only archived ones: nothing to add.
	for _, s := range []string{f.session(t), f.session(t, archived)} {
		if eg, err := src.Egress(f.ctx, &sandbox.Recipe{SessionID: s}); err != nil || eg != nil {
			t.Errorf("session without credentials: %v, %v", eg, err)
		}
	}
	if _, err := src.Egress(f.ctx, &sandbox.Recipe{SessionID: "sesn_missing"}); err == nil {
		t.Errorf("Egress of a missing session: no error")
	}
}

func credID(t *testing.T, f *fixture, vid, name string) string {
	t.Helper()
	list, err := f.st.CredentialList(f.ctx, &store.CredentialListParams{VaultID: vid})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.Auth.SecretName == name && c.ArchivedAt == nil {
			return c.ID
		}
	}
	t.Fatalf("no credential %s in %s", name, vid)
	return ""
}

// updateSecret gives a credential a new secret_value, as the API does.
func (f *fixture) updateSecret(t *testing.T, vid, id, value string) {
	t.Helper()
	_, err := f.st.CredentialUpdate(f.ctx, &store.CredentialUpdateParams{CredentialRef: store.CredentialRef{VaultID: vid, ID: id},
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			sealed, err := f.v.Seal(c.ID, "secret_value", []byte(value))
			if err != nil {
				return nil, err
			}
			return []store.SealedSecret{*sealed}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
}

func request(t *testing.T, url, auth, body string) *http.Request {
	t.Helper()
	var r io.Reader = http.NoBody
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(http.MethodPost, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if req.URL.Scheme == "https" { // as the egress proxy hands over a request read from TLS it terminated
		req.TLS = &tls.ConnectionState{HandshakeComplete: true}
	}
	return req
}

func testInjector(t *testing.T, creds ...*secret) *Injector {
	t.Helper()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	return newInjector(ca, creds, discard())
}

func newTestSecret(name, value string, header, body bool, hosts ...string) *secret {
	return newSecret(&apitype.Credential{ID: "vcrd_" + name, Auth: apitype.CredentialAuth{
		Type: apitype.AuthEnvironmentVariable, SecretName: name,
		InjectionLocation: &apitype.InjectionLocation{Header: header, Body: body},
		Networking:        &apitype.CredentialNetworking{Type: "limited", AllowedHosts: hosts}}}, []byte(value))
}

func TestRewrite(t *testing.T) {
	t.Parallel()
	hdr := newTestSecret("HDR", "header-value", true, false, "api.example.com")
	both := newTestSecret("BOTH", "both-value", true, true, "api.example.com", "*.example.net")
	bodyOnly := newTestSecret("BODY", "body-only-value", false, true, "api.example.com")
	in := testInjector(t, hdr, both, bodyOnly)
	for host, want := range map[string]bool{"api.example.com": true, "API.Example.com.": true, "x.example.net": true,
		"a.b.example.net": true, "example.net": false, "other.example.com": false, "api.example.com.evil.test": false,
		"xexample.net": false} {
		if got := in.Intercepts(host, "443"); got != want {
			t.Errorf("Intercepts(%s) = %v, want %v", host, got, want)
		}
	}
	ph := func(s *secret) string { return string(s.placeholder) }

	body := "h=" + ph(hdr) + "&b=" + ph(both) + "&o=" + ph(bodyOnly)
	req := request(t, "https://api.example.com/x", "Bearer "+ph(hdr), body)
	req.Header.Set("X-Both", ph(both))
	req.Header.Set("X-Body-Only", ph(bodyOnly))
	req.Header.Set("Accept-Encoding", "gzip")
	if err := in.Rewrite(req); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer header-value" {
		t.Errorf("Authorization = %q", got)
	}
	if got := req.Header.Get("X-Both"); got != "both-value" {
		t.Errorf("X-Both = %q", got)
	}
	if got := req.Header.Get("X-Body-Only"); got != ph(bodyOnly) {
		t.Errorf("a body-only credential was injected in a header: %q", got)
	}
	if req.Header.Get("Accept-Encoding") != "" {
		t.Errorf("Accept-Encoding kept: the answer could not be scrubbed")
	}
	b, _ := io.ReadAll(req.Body)
	if want := "h=" + ph(hdr) + "&b=both-value&o=body-only-value"; string(b) != want || req.ContentLength != int64(len(want)) {
		t.Errorf("body = %q (length %d), want %q", b, req.ContentLength, want)
	}

	// Basic authorization: the placeholder inside the base64.
	req = request(t, "https://api.example.com/", "Basic "+base64.StdEncoding.EncodeToString([]byte("me:"+ph(hdr))), "")
	if err := in.Rewrite(req); err != nil {
		t.Fatal(err)
	}
	if got, want := req.Header.Get("Authorization"), "Basic "+base64.StdEncoding.EncodeToString([]byte("me:header-value")); got != want {
		t.Errorf("Basic = %q, want %q", got, want)
	}

	// Another host: nothing replaced, even under a wildcard of another credential's domain.
	for _, url := range []string{"https://other.example.com/", "https://example.net/", "https://api.example.com.evil.test/"} {
		req = request(t, url, "Bearer "+ph(hdr), body)
		if err := in.Rewrite(req); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(req.Body)
		if req.Header.Get("Authorization") != "Bearer "+ph(hdr) || string(b) != body {
			t.Errorf("%s: rewritten: %q, %q", url, req.Header.Get("Authorization"), b)
		}
	}
	req = request(t, "https://x.example.net/", "", "b="+ph(both))
	if err := in.Rewrite(req); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(req.Body); string(b) != "b=both-value" {
		t.Errorf("wildcard host: body %q", b)
	}

	// A body over the cap, or content-encoded, goes out as sent.
	big := strings.Repeat("x", MaxBodyInjection) + ph(both)
	req = request(t, "https://api.example.com/", "", big)
	if err := in.Rewrite(req); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(req.Body); string(b) != big {
		t.Errorf("a body over the cap was changed (%d bytes, want %d)", len(b), len(big))
	}
	req = request(t, "https://api.example.com/", "", "b="+ph(both))
	req.Header.Set("Content-Encoding", "gzip")
	if err := in.Rewrite(req); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(req.Body); string(b) != "b="+ph(both) {
		t.Errorf("a content-encoded body was changed: %q", b)
	}

	if _, err := in.Certificate("other.example.com"); err == nil {
		t.Errorf("Certificate for a host no credential allows")
	}
	if c, err := in.Certificate("api.example.com"); err != nil || c.Leaf.DNSNames[0] != "api.example.com" {
		t.Errorf("Certificate(api.example.com): %v", err)
	}
}

func TestScrubResponse(t *testing.T) {
	t.Parallel()
	s := newTestSecret("HDR", "header-value-0123456789", true, false, "api.example.com")
	in := testInjector(t, s)
	ph := string(s.placeholder)
	// The Basic encoding Rewrite made is scrubbed too.
	req := request(t, "https://api.example.com/", "Basic "+base64.StdEncoding.EncodeToString([]byte("me:"+ph)), "")
	if err := in.Rewrite(req); err != nil {
		t.Fatal(err)
	}
	sentBasic := strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
	body := "a header-value-0123456789 b " + sentBasic + " c header-value-0123456789"
	resp := &http.Response{Header: http.Header{"X-Echo": {"header-value-0123456789"}, "Content-Length": {"99"}},
		ContentLength: int64(len(body)), Body: io.NopCloser(iotest.OneByteReader(strings.NewReader(body)))}
	in.ScrubResponse(req, resp)
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	wantBasic := base64.StdEncoding.EncodeToString([]byte("me:" + ph))
	if want := "a " + ph + " b " + wantBasic + " c " + ph; string(got) != want {
		t.Errorf("scrubbed body = %q, want %q", got, want)
	}
	if resp.Header.Get("X-Echo") != ph || resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
		t.Errorf("scrubbed header %q, length %d %q", resp.Header.Get("X-Echo"), resp.ContentLength, resp.Header.Get("Content-Length"))
	}
	// Revoked, the secret is never sent again, but an upstream that echoes what it was sent before still has
	// it scrubbed from its answers.
	in.creds = []*secret{s.revoke()}
	if err := in.Rewrite(request(t, "https://api.example.com/", "Bearer "+ph, "")); err == nil {
		t.Error("a revoked placeholder was sent")
	}
	resp = &http.Response{Header: http.Header{"X-Echo": {"header-value-0123456789"}}, Body: io.NopCloser(strings.NewReader(body))}
	in.ScrubResponse(req, resp)
	if b, _ := io.ReadAll(resp.Body); strings.Contains(string(b), "header-value-0123456789") || strings.Contains(string(b), sentBasic) ||
		resp.Header.Get("X-Echo") != ph {
		t.Errorf("a revoked secret is not scrubbed from an answer: %q, %q", b, resp.Header.Get("X-Echo"))
	}
	// Another host's answer is left alone.
	other := request(t, "https://other.example.com/", "", "")
	resp = &http.Response{Header: http.Header{"X-Echo": {"header-value-0123456789"}}, Body: io.NopCloser(strings.NewReader(body))}
	in.ScrubResponse(other, resp)
	if b, _ := io.ReadAll(resp.Body); string(b) != body || resp.Header.Get("X-Echo") != "header-value-0123456789" {
		t.Errorf("another host's answer was changed")
	}
}

func TestReplaceReader(t *testing.T) {
	t.Parallel()
	old := [][]byte{[]byte("secret-one"), []byte("s2")}
	nw := [][]byte{[]byte("P1"), []byte("PLACEHOLDER-2")}
	for _, in := range []string{"", "nothing", "secret-one", "xsecret-onesecret-ones2s2y", "secret-on", "ssecret-one2"} {
		want := strings.NewReplacer("secret-one", "P1", "s2", "PLACEHOLDER-2").Replace(in)
		for name, src := range map[string]io.Reader{"whole": strings.NewReader(in), "bytes": iotest.OneByteReader(strings.NewReader(in)),
			"half": iotest.HalfReader(strings.NewReader(in))} {
			r := &replaceReader{src: src, old: old, new: nw, keep: len("secret-one") - 1}
			got, err := io.ReadAll(r)
			if err != nil || string(got) != want {
				t.Errorf("%s %q: %q, %v; want %q", name, in, got, err, want)
			}
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
