package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
)

// recorder keeps every response body the SDK receives, so a test can search all of them.
type recorder struct {
	mu     sync.Mutex
	bodies [][]byte
	next   http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

func (r *recorder) all() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte{}, r.bodies...)
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// vaultHarness is an API server with a vault over a given store, an SDK client that records every response,
// and the server's log.
type vaultHarness struct {
	t      *testing.T
	store  store.Store
	vault  *vault.Vault
	client anthropic.Client
	srv    *httptest.Server
	rec    *recorder
	log    *syncBuffer
}

func newVaultHarness(t *testing.T, st store.Store) *vaultHarness {
	t.Helper()
	v, err := vault.Open(context.Background(), st, vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	srv := httptest.NewServer(newAPI(t, api.Config{
		Store:  st,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Keys:   &api.KeyAuth{Static: testKey, Store: st},
		Sealer: v,
	}).Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	rec := &recorder{next: srv.Client().Transport}
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(srv.URL),
		option.WithAPIKey(testKey), option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: rec}))
	return &vaultHarness{t: t, store: st, vault: v, client: client, srv: srv, rec: rec, log: logs}
}

func openSQLite(t *testing.T) (store.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "corral.db")
	st, err := sqlite.Open(context.Background(), "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, path
}

// raw sends a request with the test key through the recording client.
func (h *vaultHarness) raw(method, path, body string) (int, []byte) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctxT(h.t), method, h.srv.URL+path, strings.NewReader(body)) // fail, never hang
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: h.rec}).Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (h *vaultHarness) newVault(ctx context.Context, name string) *anthropic.BetaManagedAgentsVault {
	h.t.Helper()
	v, err := h.client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: name})
	if err != nil {
		h.t.Fatalf("create vault: %v", err)
	}
	return v
}

// secrets are the plaintexts the credential tests store; none may come back.
type secrets struct {
	bearer, access, refresh, client, env, rotated string
}

func newSecrets() secrets {
	n := func(what string) string { return "S3CRET-" + what + "-" + apitype.NewID("")[4:] }
	return secrets{n("bearer"), n("access"), n("refresh"), n("client"), n("env"), n("rotated")}
}

func (s secrets) list() []string {
	return []string{s.bearer, s.access, s.refresh, s.client, s.env, s.rotated}
}

// createCredentials creates one credential of each auth type in vaultID and returns them.
func (h *vaultHarness) createCredentials(ctx context.Context, vaultID string, sec secrets) (bearer, oauth, env *anthropic.BetaManagedAgentsCredential) {
	h.t.Helper()
	var err error
	bearer, err = h.client.Beta.Vaults.Credentials.New(ctx, vaultID, anthropic.BetaVaultCredentialNewParams{
		DisplayName: anthropic.String("docs bearer"),
		Metadata:    map[string]string{"team": "docs"},
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: sec.bearer, MCPServerURL: "https://docs.example.com/mcp"}},
	})
	if err != nil {
		h.t.Fatalf("create static_bearer: %v", err)
	}
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	oauth, err = h.client.Beta.Vaults.Credentials.New(ctx, vaultID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthCreateParams{
			AccessToken: sec.access, MCPServerURL: "https://tracker.example.com/mcp", ExpiresAt: anthropic.Time(expires),
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshParams{
				ClientID: "client-1", RefreshToken: sec.refresh, TokenEndpoint: "https://auth.example.com/token",
				Scope: anthropic.String("read write"),
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshParamsTokenEndpointAuthUnion{
					OfClientSecretBasic: &anthropic.BetaManagedAgentsTokenEndpointAuthBasicParam{ClientSecret: sec.client}},
			},
		}},
	})
	if err != nil {
		h.t.Fatalf("create mcp_oauth: %v", err)
	}
	env, err = h.client.Beta.Vaults.Credentials.New(ctx, vaultID, anthropic.BetaVaultCredentialNewParams{
		DisplayName: anthropic.String("stripe"),
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfEnvironmentVariable: &anthropic.BetaManagedAgentsEnvironmentVariableCreateParams{
			SecretName: "STRIPE_KEY", SecretValue: sec.env,
			Networking: anthropic.BetaManagedAgentsCredentialNetworkingParamsUnion{OfLimited: &anthropic.BetaManagedAgentsLimitedCredentialNetworkingParams{
				AllowedHosts: []string{"api.stripe.com", "*.stripe.com"}}},
			InjectionLocation: anthropic.BetaManagedAgentsInjectionLocationParams{Body: anthropic.Bool(true)},
		}},
	})
	if err != nil {
		h.t.Fatalf("create environment_variable: %v", err)
	}
	return bearer, oauth, env
}

func TestVaultsThroughSDK(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, _ := openSQLite(t)
	h := newVaultHarness(t, st)
	vs := h.client.Beta.Vaults

	v, err := vs.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "team vault", Metadata: map[string]string{"a": "1", "b": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.ID, apitype.PrefixVault) || v.Type != "vault" || v.DisplayName != "team vault" ||
		v.Metadata["a"] != "1" || !v.ArchivedAt.IsZero() || v.CreatedAt.IsZero() || v.UpdatedAt.IsZero() {
		t.Fatalf("created vault: %s", v.RawJSON())
	}
	got, err := vs.Get(ctx, v.ID, anthropic.BetaVaultGetParams{})
	if err != nil || got.ID != v.ID || got.DisplayName != "team vault" {
		t.Fatalf("get: %v %+v", err, got)
	}
	upd, err := vs.Update(ctx, v.ID, anthropic.BetaVaultUpdateParams{DisplayName: anthropic.String("renamed"),
		Metadata: map[string]string{"a": "", "c": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	if upd.DisplayName != "renamed" || len(upd.Metadata) != 2 || upd.Metadata["b"] != "2" || upd.Metadata["c"] != "3" {
		t.Fatalf("update: %s", upd.RawJSON())
	}

	// Validation.
	_, err = vs.New(ctx, anthropic.BetaVaultNewParams{DisplayName: ""})
	wantAPIError(t, err, 400, "invalid_request_error")
	_, err = vs.New(ctx, anthropic.BetaVaultNewParams{DisplayName: strings.Repeat("x", 256)})
	wantAPIError(t, err, 400, "invalid_request_error")
	_, err = vs.Get(ctx, "vlt_missing", anthropic.BetaVaultGetParams{})
	wantAPIError(t, err, 404, "not_found_error")

	// Pagination, newest first, and include_archived.
	var ids []string
	for i := range 5 {
		ids = append(ids, h.newVault(ctx, fmt.Sprintf("v%d", i)).ID)
	}
	arch, err := vs.Archive(ctx, ids[1], anthropic.BetaVaultArchiveParams{})
	if err != nil || arch.ArchivedAt.IsZero() {
		t.Fatalf("archive: %v %+v", err, arch)
	}
	_, err = vs.Update(ctx, ids[1], anthropic.BetaVaultUpdateParams{DisplayName: anthropic.String("x")})
	wantAPIError(t, err, 400, "invalid_request_error")

	page, err := vs.List(ctx, anthropic.BetaVaultListParams{Limit: anthropic.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.NextPage == "" || page.Data[0].ID != ids[4] || page.Data[1].ID != ids[3] {
		t.Fatalf("first page: %s", page.RawJSON())
	}
	var listed []string
	iter := vs.ListAutoPaging(ctx, anthropic.BetaVaultListParams{Limit: anthropic.Int(2)})
	for iter.Next() {
		listed = append(listed, iter.Current().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{ids[4], ids[3], ids[2], ids[0], v.ID}
	if strings.Join(listed, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %v, want %v (archived excluded)", listed, want)
	}
	listed = nil
	iter = vs.ListAutoPaging(ctx, anthropic.BetaVaultListParams{Limit: anthropic.Int(2), IncludeArchived: anthropic.Bool(true)})
	for iter.Next() {
		listed = append(listed, iter.Current().ID)
	}
	if err := iter.Err(); err != nil || len(listed) != 6 || listed[3] != ids[1] {
		t.Fatalf("listed with archived: %v %v", listed, err)
	}
	_, err = vs.List(ctx, anthropic.BetaVaultListParams{Limit: anthropic.Int(101)})
	wantAPIError(t, err, 400, "invalid_request_error")

	del, err := vs.Delete(ctx, ids[0], anthropic.BetaVaultDeleteParams{})
	if err != nil || del.ID != ids[0] || del.Type != "vault_deleted" {
		t.Fatalf("delete: %v %+v", err, del)
	}
	_, err = vs.Get(ctx, ids[0], anthropic.BetaVaultGetParams{})
	wantAPIError(t, err, 404, "not_found_error")
	_, err = vs.Delete(ctx, ids[0], anthropic.BetaVaultDeleteParams{})
	wantAPIError(t, err, 404, "not_found_error")
	_, err = vs.Archive(ctx, ids[0], anthropic.BetaVaultArchiveParams{})
	wantAPIError(t, err, 404, "not_found_error")
}

func TestCredentialsThroughSDK(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, _ := openSQLite(t)
	h := newVaultHarness(t, st)
	cs := h.client.Beta.Vaults.Credentials
	sec := newSecrets()
	v := h.newVault(ctx, "creds")
	bearer, oauth, env := h.createCredentials(ctx, v.ID, sec)

	if !strings.HasPrefix(bearer.ID, apitype.PrefixCredential) || bearer.Type != "vault_credential" || bearer.VaultID != v.ID ||
		bearer.DisplayName != "docs bearer" || bearer.Metadata["team"] != "docs" || bearer.Auth.Type != "static_bearer" ||
		bearer.Auth.MCPServerURL != "https://docs.example.com/mcp" || !bearer.ArchivedAt.IsZero() {
		t.Fatalf("static_bearer: %s", bearer.RawJSON())
	}
	if a := oauth.Auth; a.Type != "mcp_oauth" || a.MCPServerURL != "https://tracker.example.com/mcp" || a.ExpiresAt.IsZero() ||
		a.Refresh.ClientID != "client-1" || a.Refresh.TokenEndpoint != "https://auth.example.com/token" ||
		a.Refresh.TokenEndpointAuth.Type != "client_secret_basic" || a.Refresh.Scope != "read write" {
		t.Fatalf("mcp_oauth: %s", oauth.RawJSON())
	}
	if a := env.Auth; a.Type != "environment_variable" || a.SecretName != "STRIPE_KEY" || !a.InjectionLocation.Body ||
		!a.InjectionLocation.Header || a.Networking.Type != "limited" || strings.Join(a.Networking.AllowedHosts, ",") != "api.stripe.com,*.stripe.com" {
		t.Fatalf("environment_variable: %s", env.RawJSON())
	}
	var nodn map[string]any
	decodeRaw(t, oauth.RawJSON(), &nodn)
	if dn, ok := nodn["display_name"]; !ok || dn != nil {
		t.Fatalf("display_name of a credential created without one: %v (present %v)", dn, ok)
	}

	// The secrets are sealed in the store under the credential's id: the vault opens them.
	for _, c := range []struct {
		id   string
		want map[string]string
	}{
		{bearer.ID, map[string]string{"token": sec.bearer}},
		{oauth.ID, map[string]string{"access_token": sec.access, "refresh_token": sec.refresh, "client_secret": sec.client}},
		{env.ID, map[string]string{"secret_value": sec.env}},
	} {
		sealed, err := st.SecretList(ctx, &store.SecretListParams{CredentialID: c.id})
		if err != nil {
			t.Fatal(err)
		}
		if len(sealed) != len(c.want) {
			t.Fatalf("%s: %d sealed secrets, want %d", c.id, len(sealed), len(c.want))
		}
		for _, s := range sealed {
			pt, err := h.vault.Open(&s)
			if err != nil || string(pt) != c.want[s.Name] {
				t.Fatalf("%s/%s does not open to its secret: %v", c.id, s.Name, err)
			}
		}
	}

	got, err := cs.Get(ctx, env.ID, anthropic.BetaVaultCredentialGetParams{VaultID: v.ID})
	if err != nil || got.Auth.SecretName != "STRIPE_KEY" {
		t.Fatalf("get: %v %+v", err, got)
	}
	_, err = cs.Get(ctx, env.ID, anthropic.BetaVaultCredentialGetParams{VaultID: h.newVault(ctx, "other").ID})
	wantAPIError(t, err, 404, "not_found_error")
	_, err = cs.Get(ctx, "vcrd_missing", anthropic.BetaVaultCredentialGetParams{VaultID: v.ID})
	wantAPIError(t, err, 404, "not_found_error")

	// Updates: a new secret (sealed anew), non-secret fields, metadata patch.
	upd, err := cs.Update(ctx, bearer.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		DisplayName: anthropic.String("docs"), Metadata: map[string]string{"team": "", "owner": "me"},
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerUpdateParams{
			Token: anthropic.String(sec.rotated)}}})
	if err != nil {
		t.Fatal(err)
	}
	if upd.DisplayName != "docs" || len(upd.Metadata) != 1 || upd.Metadata["owner"] != "me" || upd.Auth.MCPServerURL != bearer.Auth.MCPServerURL {
		t.Fatalf("update static_bearer: %s", upd.RawJSON())
	}
	sealed, err := st.SecretList(ctx, &store.SecretListParams{CredentialID: bearer.ID})
	if err != nil || len(sealed) != 1 {
		t.Fatalf("sealed after update: %v %d", err, len(sealed))
	}
	if pt, err := h.vault.Open(&sealed[0]); err != nil || string(pt) != sec.rotated {
		t.Fatalf("the updated token is not the one sealed: %v", err)
	}
	upd, err = cs.Update(ctx, env.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfEnvironmentVariable: &anthropic.BetaManagedAgentsEnvironmentVariableUpdateParams{
			Networking:        anthropic.BetaManagedAgentsCredentialNetworkingParamsUnion{OfUnrestricted: &anthropic.BetaManagedAgentsUnrestrictedCredentialNetworkingParams{}},
			InjectionLocation: anthropic.BetaManagedAgentsInjectionLocationUpdateParams{Header: anthropic.Bool(false)},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if a := upd.Auth; a.Networking.Type != "unrestricted" || a.InjectionLocation.Header || !a.InjectionLocation.Body || a.SecretName != "STRIPE_KEY" {
		t.Fatalf("update environment_variable: %s", upd.RawJSON())
	}
	_, err = cs.Update(ctx, env.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfEnvironmentVariable: &anthropic.BetaManagedAgentsEnvironmentVariableUpdateParams{
			InjectionLocation: anthropic.BetaManagedAgentsInjectionLocationUpdateParams{Body: anthropic.Bool(false)},
		}}})
	wantAPIError(t, err, 400, "invalid_request_error") // neither body nor header left
	newExpiry := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	upd, err = cs.Update(ctx, oauth.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthUpdateParams{
			AccessToken: anthropic.String(sec.rotated), ExpiresAt: anthropic.Time(newExpiry),
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshUpdateParams{Scope: anthropic.String(""),
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshUpdateParamsTokenEndpointAuthUnion{
					OfClientSecretPost: &anthropic.BetaManagedAgentsTokenEndpointAuthPostUpdateParam{ClientSecret: anthropic.String(sec.rotated + "c")}}},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if a := upd.Auth; !a.ExpiresAt.Equal(newExpiry) || a.Refresh.Scope != "" || a.Refresh.TokenEndpointAuth.Type != "client_secret_basic" ||
		a.Refresh.ClientID != "client-1" {
		t.Fatalf("update mcp_oauth (the token endpoint auth keeps its type; scope cleared): %s", upd.RawJSON())
	}

	// Immutable fields and the auth type: a clear 400 in the envelope, nothing changed.
	for _, c := range []struct {
		name, id, body, wantMsg string
	}{
		{"mcp_server_url", bearer.ID, `{"auth":{"type":"static_bearer","mcp_server_url":"https://evil.example.com/"}}`, "auth.mcp_server_url"},
		{"secret_name", env.ID, `{"auth":{"type":"environment_variable","secret_name":"OTHER"}}`, "auth.secret_name"},
		{"type", bearer.ID, `{"auth":{"type":"mcp_oauth","access_token":"x"}}`, "auth.type"},
		{"oauth url", oauth.ID, `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://other/"}}`, "auth.mcp_server_url"},
		{"client_id", oauth.ID, `{"auth":{"type":"mcp_oauth","refresh":{"client_id":"other"}}}`, "auth.refresh.client_id"},
		{"type missing", bearer.ID, `{"auth":{"token":"x"}}`, "auth.type"},
		{"field of another type", bearer.ID, `{"auth":{"type":"static_bearer","secret_value":"x"}}`, "auth.secret_value"},
	} {
		status, body := h.raw("POST", "/v1/vaults/"+v.ID+"/credentials/"+c.id, c.body)
		var env envelope
		_ = json.Unmarshal(body, &env)
		if status != 400 || env.Type != "error" || env.Error.Type != "invalid_request_error" ||
			!strings.HasPrefix(env.Error.Message, c.wantMsg) || !strings.HasPrefix(env.RequestID, "req_") {
			t.Errorf("%s: %d %s", c.name, status, body)
		}
	}
	_, err = cs.Update(ctx, bearer.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfEnvironmentVariable: &anthropic.BetaManagedAgentsEnvironmentVariableUpdateParams{
			SecretValue: anthropic.String("x")}}})
	wantAPIError(t, err, 400, "invalid_request_error")
	got, err = cs.Get(ctx, bearer.ID, anthropic.BetaVaultCredentialGetParams{VaultID: v.ID})
	if err != nil || got.Auth.Type != "static_bearer" || got.Auth.MCPServerURL != "https://docs.example.com/mcp" {
		t.Fatalf("after refused updates: %v %+v", err, got.Auth)
	}

	// Create validation and the one-active-credential-per-server rule.
	for name, body := range map[string]string{
		"no auth":          `{}`,
		"unknown type":     `{"auth":{"type":"basic","token":"x"}}`,
		"no token":         `{"auth":{"type":"static_bearer","mcp_server_url":"https://a/"}}`,
		"bad url":          `{"auth":{"type":"static_bearer","mcp_server_url":"ftp://a/","token":"x"}}`,
		"userinfo url":     `{"auth":{"type":"static_bearer","mcp_server_url":"https://u:p@a/","token":"x"}}`,
		"bad env name":     `{"auth":{"type":"environment_variable","secret_name":"1X","secret_value":"x","networking":{"type":"unrestricted"}}}`,
		"no networking":    `{"auth":{"type":"environment_variable","secret_name":"X","secret_value":"x"}}`,
		"host with port":   `{"auth":{"type":"environment_variable","secret_name":"X","secret_value":"x","networking":{"type":"limited","allowed_hosts":["a.com:443"]}}}`,
		"no hosts":         `{"auth":{"type":"environment_variable","secret_name":"X","secret_value":"x","networking":{"type":"limited","allowed_hosts":[]}}}`,
		"past expiry":      `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://a/","access_token":"x","expires_at":"2020-01-01T00:00:00Z"}}`,
		"refresh no token": `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://a/","access_token":"x","refresh":{"client_id":"c","token_endpoint":"https://t/","token_endpoint_auth":{"type":"none"}}}}`,
		"basic no secret":  `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://a/","access_token":"x","refresh":{"client_id":"c","refresh_token":"r","token_endpoint":"https://t/","token_endpoint_auth":{"type":"client_secret_basic"}}}}`,
		"long name":        `{"display_name":"` + strings.Repeat("n", 256) + `","auth":{"type":"static_bearer","mcp_server_url":"https://a/","token":"x"}}`,
	} {
		if status, body := h.raw("POST", "/v1/vaults/"+v.ID+"/credentials", body); status != 400 {
			t.Errorf("%s: %d %s, want 400", name, status, body)
		}
	}
	_, err = cs.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{
		OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{Token: "t", MCPServerURL: "https://docs.example.com/mcp"}}})
	wantAPIError(t, err, 409, "conflict_error")
	_, err = cs.New(ctx, "vlt_missing", anthropic.BetaVaultCredentialNewParams{Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{
		OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{Token: "t", MCPServerURL: "https://x/"}}})
	wantAPIError(t, err, 404, "not_found_error")

	// List: newest first, paged, archived excluded unless asked for.
	arch, err := cs.Archive(ctx, oauth.ID, anthropic.BetaVaultCredentialArchiveParams{VaultID: v.ID})
	if err != nil || arch.ArchivedAt.IsZero() || arch.Auth.MCPServerURL != oauth.Auth.MCPServerURL {
		t.Fatalf("archive: %v %+v", err, arch)
	}
	if sealed, err := st.SecretList(ctx, &store.SecretListParams{CredentialID: oauth.ID}); err != nil || len(sealed) != 0 {
		t.Fatalf("an archived credential keeps %d secrets (%v)", len(sealed), err)
	}
	_, err = cs.Update(ctx, oauth.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID, DisplayName: anthropic.String("x")})
	wantAPIError(t, err, 400, "invalid_request_error")
	collect := func(p anthropic.BetaVaultCredentialListParams) []string {
		t.Helper()
		var out []string
		iter := cs.ListAutoPaging(ctx, v.ID, p)
		for iter.Next() {
			out = append(out, iter.Current().ID)
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := collect(anthropic.BetaVaultCredentialListParams{Limit: anthropic.Int(1)}); strings.Join(got, ",") != env.ID+","+bearer.ID {
		t.Fatalf("list: %v", got)
	}
	if got := collect(anthropic.BetaVaultCredentialListParams{Limit: anthropic.Int(2), IncludeArchived: anthropic.Bool(true)}); strings.Join(got, ",") != env.ID+","+oauth.ID+","+bearer.ID {
		t.Fatalf("list with archived: %v", got)
	}
	page, err := cs.List(ctx, v.ID, anthropic.BetaVaultCredentialListParams{Limit: anthropic.Int(1)})
	if err != nil || len(page.Data) != 1 || page.NextPage == "" {
		t.Fatalf("first page: %v %s", err, page.RawJSON())
	}
	_, err = cs.List(ctx, "vlt_missing", anthropic.BetaVaultCredentialListParams{})
	wantAPIError(t, err, 404, "not_found_error")

	// Delete.
	del, err := cs.Delete(ctx, bearer.ID, anthropic.BetaVaultCredentialDeleteParams{VaultID: v.ID})
	if err != nil || del.ID != bearer.ID || del.Type != "vault_credential_deleted" {
		t.Fatalf("delete: %v %+v", err, del)
	}
	_, err = cs.Get(ctx, bearer.ID, anthropic.BetaVaultCredentialGetParams{VaultID: v.ID})
	wantAPIError(t, err, 404, "not_found_error")
	if sealed, err := st.SecretList(ctx, &store.SecretListParams{CredentialID: bearer.ID}); err != nil || len(sealed) != 0 {
		t.Fatalf("a deleted credential keeps %d secrets (%v)", len(sealed), err)
	}

	// An archived vault takes no new credentials, and its credentials are archived with it.
	if _, err := h.client.Beta.Vaults.Archive(ctx, v.ID, anthropic.BetaVaultArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	_, err = cs.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{
		OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{Token: "t", MCPServerURL: "https://new/"}}})
	wantAPIError(t, err, 400, "invalid_request_error")
	if got, err := cs.Get(ctx, env.ID, anthropic.BetaVaultCredentialGetParams{VaultID: v.ID}); err != nil || got.ArchivedAt.IsZero() {
		t.Fatalf("credential of an archived vault: %v %+v", err, got)
	}

	assertNoSecret(t, h, sec)
}

// assertNoSecret searches every response the client received and the server's log for each secret.
func assertNoSecret(t *testing.T, h *vaultHarness, sec secrets) {
	t.Helper()
	bodies := h.rec.all()
	if len(bodies) < 10 {
		t.Fatalf("only %d responses recorded", len(bodies))
	}
	logs := h.log.Bytes()
	for _, s := range sec.list() {
		for i, b := range bodies {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("response %d carries a secret: %s", i, b)
			}
		}
		if bytes.Contains(logs, []byte(s)) {
			t.Errorf("the server log carries a secret")
		}
	}
}

// TestSecretsNeverInResponses sends secrets in requests that fail in every way a request can, and searches every
// answer and the log for them.
func TestSecretsNeverInResponses(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, _ := openSQLite(t)
	h := newVaultHarness(t, st)
	sec := newSecrets()
	v := h.newVault(ctx, "v")
	bearer, oauth, env := h.createCredentials(ctx, v.ID, sec)
	s := sec.rotated
	base := "/v1/vaults/" + v.ID + "/credentials"
	for _, r := range []struct{ method, path, body string }{
		{"POST", base, `{"auth":{"type":"static_bearer","mcp_server_url":"not a url","token":"` + s + `"}}`},
		{"POST", base, `{"auth":{"type":"static_bearer","mcp_server_url":"https://docs.example.com/mcp","token":"` + s + `"}}`}, // 409
		{"POST", base, `{"auth":{"type":"static_bearer","mcp_server_url":"https://x/","token":"` + s + `","extra":1}}`},
		{"POST", base, `{"auth":{"type":"static_bearer","mcp_server_url":"https://x/","token":["` + s + `"]}}`},
		{"POST", base, `{"auth":{"type":"static_bearer","mcp_server_url":"https://x/","token":"` + s + `"`},
		{"POST", base, `{"auth":{"type":"` + s + `","token":"` + s + `"}}`},
		{"POST", base, `{"auth":{"type":"environment_variable","secret_name":"A","secret_value":"` + s + `","networking":{"type":"limited","allowed_hosts":["bad host"]}}}`},
		{"POST", base, `{"auth":{"type":"environment_variable","secret_name":"A","secret_value":"` + strings.Repeat(s, 2000) + `","networking":{"type":"unrestricted"}}}`},
		{"POST", base + "/" + bearer.ID, `{"auth":{"type":"mcp_oauth","access_token":"` + s + `"}}`},
		{"POST", base + "/" + bearer.ID, `{"auth":{"type":"` + s + `","token":"` + s + `"}}`},
		{"POST", base + "/" + bearer.ID, `{"auth":{"type":"static_bearer","token":""},"metadata":{"k":"` + strings.Repeat(s, 30) + `"}}`},
		{"POST", base + "/" + env.ID, `{"auth":{"type":"environment_variable","secret_value":"` + s + `","secret_name":"B"}}`},
		{"POST", base + "/" + oauth.ID, `{"auth":{"type":"mcp_oauth","refresh":{"refresh_token":"` + s + `","client_id":"x"}}}`},
		{"POST", base + "/vcrd_missing", `{"auth":{"type":"static_bearer","token":"` + s + `"}}`},
		{"POST", "/v1/vaults/vlt_missing/credentials", `{"auth":{"type":"static_bearer","mcp_server_url":"https://y/","token":"` + s + `"}}`},
	} {
		if status, _ := h.raw(r.method, r.path, r.body); status < 400 {
			t.Errorf("%s %s %.80s: status %d, want an error", r.method, r.path, r.body, status)
		}
	}
	// And the successful reads of every credential.
	for _, id := range []string{bearer.ID, oauth.ID, env.ID} {
		if _, err := h.client.Beta.Vaults.Credentials.Get(ctx, id, anthropic.BetaVaultCredentialGetParams{VaultID: v.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.client.Beta.Vaults.Credentials.List(ctx, v.ID, anthropic.BetaVaultCredentialListParams{}); err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, h, sec)
}

// TestSQLiteFileHoldsNoSecret reads the raw bytes of the database file and its WAL: no secret is there, while
// a non-secret field of the same credentials is (so the search would find a plaintext).
func TestSQLiteFileHoldsNoSecret(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, path := openSQLite(t)
	h := newVaultHarness(t, st)
	sec := newSecrets()
	v := h.newVault(ctx, "v")
	bearer, _, _ := h.createCredentials(ctx, v.ID, sec)
	if _, err := h.client.Beta.Vaults.Credentials.Update(ctx, bearer.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerUpdateParams{
			Token: anthropic.String(sec.rotated)}}}); err != nil {
		t.Fatal(err)
	}
	search := func(when string) {
		t.Helper()
		var all []byte
		for _, f := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
			b, err := os.ReadFile(f)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		if !bytes.Contains(all, []byte("STRIPE_KEY")) || !bytes.Contains(all, []byte("docs.example.com")) {
			t.Fatalf("%s: the database files (%d bytes) do not even hold the credentials' non-secret fields", when, len(all))
		}
		for _, s := range sec.list() {
			if bytes.Contains(all, []byte(s)) {
				t.Errorf("%s: the database files hold a secret in plaintext", when)
			}
		}
	}
	search("before close")
	if err := st.Close(); err != nil { // checkpoints the WAL into the main file
		t.Fatal(err)
	}
	search("after close")
}

// TestPostgresRowsHoldNoSecret reads every row of every table of the schema as text: no secret is there.
func TestPostgresRowsHoldNoSecret(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDSN(t)
	ctx := ctxT(t)
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newVaultHarness(t, st)
	sec := newSecrets()
	v := h.newVault(ctx, "v")
	bearer, _, _ := h.createCredentials(ctx, v.ID, sec)
	if _, err := h.client.Beta.Vaults.Credentials.Update(ctx, bearer.ID, anthropic.BetaVaultCredentialUpdateParams{VaultID: v.ID,
		Auth: anthropic.BetaVaultCredentialUpdateParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerUpdateParams{
			Token: anthropic.String(sec.rotated)}}}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 5 {
		t.Fatalf("tables %v: %v", tables, err)
	}
	var all strings.Builder
	for _, table := range tables {
		// Every column as text (bytea as hex, searched for below in both forms).
		rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT t::text FROM %s t`, pgx.Identifier{table}.Sanitize()))
		if err != nil {
			t.Fatal(err)
		}
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			all.WriteString(s + "\n")
		}
	}
	dump := all.String()
	if !strings.Contains(dump, "STRIPE_KEY") || !strings.Contains(dump, "docs.example.com") {
		t.Fatalf("the rows (%d bytes) do not even hold the credentials' non-secret fields", len(dump))
	}
	for _, s := range sec.list() {
		if strings.Contains(dump, s) || strings.Contains(dump, fmt.Sprintf("%x", s)) {
			t.Errorf("the database rows hold a secret in plaintext")
		}
	}
}

func TestSessionVaultIDs(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, _ := openSQLite(t)
	h := newVaultHarness(t, st)
	hh := &harness{t: t, store: st, client: h.client}
	agentID, envID := hh.seed(ctx)
	live := h.newVault(ctx, "live")
	archived := h.newVault(ctx, "archived")
	if _, err := h.client.Beta.Vaults.Archive(ctx, archived.ID, anthropic.BetaVaultArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	create := func(ids ...string) (*anthropic.BetaManagedAgentsSession, error) {
		return h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
			EnvironmentID: envID, VaultIDs: ids,
		})
	}
	s, err := create(live.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.VaultIDs) != 1 || s.VaultIDs[0] != live.ID {
		t.Fatalf("vault_ids %v", s.VaultIDs)
	}
	aerr := wantAPIError(t, func() error { _, err := create(live.ID, archived.ID); return err }(), 400, "invalid_request_error")
	if !strings.Contains(aerr.Message, "vault_ids[1]") || !strings.Contains(aerr.Message, "archived") {
		t.Errorf("archived vault: %s", aerr.Message)
	}
	aerr = wantAPIError(t, func() error { _, err := create("vlt_missing"); return err }(), 404, "not_found_error")
	if !strings.Contains(aerr.Message, "vlt_missing") {
		t.Errorf("unknown vault: %s", aerr.Message)
	}
	wantAPIError(t, func() error { _, err := create(live.ID, live.ID); return err }(), 400, "invalid_request_error")
	wantAPIError(t, func() error { _, err := create(""); return err }(), 400, "invalid_request_error")
	list, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{})
	if err != nil || len(list.Data) != 1 {
		t.Fatalf("refused creates made sessions: %v %d", err, len(list.Data))
	}
}

// TestCredentialsWithoutSealer: a server without a vault key refuses to store a secret rather than keep it
// in the clear.
func TestCredentialsWithoutSealer(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	h := newHarness(t, func(c *api.Config) { c.Sealer = nil })
	v, err := h.client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "v"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.client.Beta.Vaults.Credentials.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{
		OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{Token: "t", MCPServerURL: "https://x/"}}})
	wantAPIError(t, err, 500, "api_error")
	list, err := h.client.Beta.Vaults.Credentials.List(ctx, v.ID, anthropic.BetaVaultCredentialListParams{})
	if err != nil || len(list.Data) != 0 {
		t.Fatalf("a credential was stored without a sealer: %v %d", err, len(list.Data))
	}
}

// TestGoldenVault pins the wire shape of a vault and of a credential of each auth type.
func TestGoldenVault(t *testing.T) {
	t.Parallel()
	st, _ := openSQLite(t)
	h := newVaultHarness(t, st)
	post := func(path, body string) []byte {
		t.Helper()
		status, b := h.raw("POST", path, body)
		if status != 200 {
			t.Fatalf("POST %s: %d %s", path, status, b)
		}
		return b
	}
	vb := post("/v1/vaults", `{"display_name":"golden vault","metadata":{"team":"infra"}}`)
	golden(t, "vault", vb)
	var v struct{ ID string }
	decodeRaw(t, string(vb), &v)
	base := "/v1/vaults/" + v.ID + "/credentials"
	golden(t, "credential_static_bearer", post(base,
		`{"display_name":"docs","auth":{"type":"static_bearer","mcp_server_url":"https://docs.example.com/mcp","token":"secret-1"}}`))
	golden(t, "credential_mcp_oauth", post(base, `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://tracker.example.com/mcp",
		"access_token":"secret-2","expires_at":"2999-01-01T00:00:00Z","refresh":{"client_id":"client-1","refresh_token":"secret-3",
		"token_endpoint":"https://auth.example.com/token","token_endpoint_auth":{"type":"client_secret_post","client_secret":"secret-4"},
		"scope":"read"}}}`))
	golden(t, "credential_environment_variable", post(base, `{"auth":{"type":"environment_variable","secret_name":"API_KEY",
		"secret_value":"secret-5","networking":{"type":"limited","allowed_hosts":["api.example.com"]}}}`))
}
