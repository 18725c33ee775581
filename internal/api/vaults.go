package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Sealer encrypts a credential's secret for storage. The API only seals: it never needs, and never gets, a way
// to read a secret back. *vault.Vault implements it.
type Sealer interface {
	Seal(credentialID, name string, plaintext []byte) (*store.SealedSecret, error)
}

// Vault and credential field limits.
const (
	maxVaultNameLen   = 255
	maxSecretLen      = 32 << 10
	maxURLLen         = 2048
	maxSecretNameLen  = 256
	maxCredentialHost = 16
)

// Names of the sealed secrets of a credential.
const (
	secretToken        = "token"
	secretAccessToken  = "access_token"
	secretRefreshToken = "refresh_token"
	secretClientSecret = "client_secret"
	secretValue        = "secret_value"
)

// Token endpoint auth types.
const (
	tokenAuthNone  = "none"
	tokenAuthBasic = "client_secret_basic"
	tokenAuthPost  = "client_secret_post"
)

// Vaults.

type vaultCreateRequest struct {
	DisplayName string            `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
}

type vaultUpdateRequest struct {
	DisplayName nullable[string]   `json:"display_name"`
	Metadata    map[string]*string `json:"metadata"`
}

func viewVault(v *apitype.Vault) *apitype.Vault {
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	return v
}

func (s *Server) vaultCreate(w http.ResponseWriter, r *http.Request) error {
	var req vaultCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := checkString("display_name", req.DisplayName, true, maxVaultNameLen); err != nil {
		return err
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return err
	}
	now := s.now()
	v := &apitype.Vault{Type: "vault", ID: apitype.NewID(apitype.PrefixVault), DisplayName: req.DisplayName,
		Metadata: req.Metadata, CreatedAt: now, UpdatedAt: now}
	viewVault(v)
	if err := s.store.VaultCreate(r.Context(), v); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

func (s *Server) vaultGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("vault_id")
	v, err := s.store.VaultGet(r.Context(), id)
	if err != nil {
		return lookup(err, "vault", id)
	}
	return writeJSON(w, http.StatusOK, viewVault(v))
}

func (s *Server) vaultUpdate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("vault_id")
	var req vaultUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	now := s.now()
	v, err := s.store.VaultUpdate(r.Context(), id, func(v *apitype.Vault) error {
		if v.ArchivedAt != nil {
			return invalid("", "vault %s is archived and cannot be updated", id)
		}
		if req.DisplayName.Set {
			if req.DisplayName.Null {
				return invalid("display_name", "cannot be cleared")
			}
			if err := checkString("display_name", req.DisplayName.Value, true, maxVaultNameLen); err != nil {
				return err
			}
			v.DisplayName = req.DisplayName.Value
		}
		if req.Metadata != nil {
			md, err := patchMetadata("metadata", v.Metadata, req.Metadata)
			if err != nil {
				return err
			}
			v.Metadata = md
		}
		v.UpdatedAt = now
		return nil
	})
	if err != nil {
		return lookup(err, "vault", id)
	}
	return writeJSON(w, http.StatusOK, viewVault(v))
}

func (s *Server) vaultList(w http.ResponseWriter, r *http.Request) error {
	p, limit, c, err := listParams(newQuery(r.URL), defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	p.Desc = true
	data, next, _, err := listByCreated(p, limit, c, false,
		func(p *store.ListParams) ([]apitype.Vault, error) { return s.store.VaultList(r.Context(), p) },
		func(v *apitype.Vault) (time.Time, string) { return v.CreatedAt, v.ID })
	if err != nil {
		return err
	}
	for i := range data {
		viewVault(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Vault]{Data: data, NextPage: next})
}

func (s *Server) vaultDelete(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("vault_id")
	if err := s.store.VaultDelete(r.Context(), id); err != nil {
		return lookup(err, "vault", id)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "vault_deleted"})
}

func (s *Server) vaultArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("vault_id")
	v, err := s.store.VaultArchive(r.Context(), &store.ArchiveParams{ID: id, At: s.now()})
	if err != nil {
		return lookup(err, "vault", id)
	}
	return writeJSON(w, http.StatusOK, viewVault(v))
}

// checkSessionVaults checks a new session's vault_ids: each names an existing, unarchived vault, once.
func (s *Server) checkSessionVaults(r *http.Request, ids []string) error {
	seen := map[string]bool{}
	for i, id := range ids {
		p := index("vault_ids", i)
		if err := checkString(p, id, true, 256); err != nil {
			return err
		}
		if seen[id] {
			return invalid(p, "vault %s is listed twice", id)
		}
		seen[id] = true
		v, err := s.store.VaultGet(r.Context(), id)
		if err != nil {
			return lookup(err, "vault", id)
		}
		if v.ArchivedAt != nil {
			return invalid(p, "vault %s is archived and cannot be attached to a new session", id)
		}
	}
	return nil
}

// Credentials.

type credentialCreateRequest struct {
	Auth        json.RawMessage   `json:"auth"`
	DisplayName *string           `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
}

type credentialUpdateRequest struct {
	Auth        nullable[json.RawMessage] `json:"auth"`
	DisplayName nullable[string]          `json:"display_name"`
	Metadata    map[string]*string        `json:"metadata"`
}

// credAuthIn is «CredAuthIn» and «CredAuthUpdate», every type's fields together; each type checks that only its
// own are present. Secrets are pointers so that "omitted" and "empty" differ.
type credAuthIn struct {
	Type              string             `json:"type"`
	MCPServerURL      *string            `json:"mcp_server_url"`
	Token             *string            `json:"token"`
	AccessToken       *string            `json:"access_token"`
	ExpiresAt         nullable[string]   `json:"expires_at"`
	Refresh           json.RawMessage    `json:"refresh"`
	SecretName        *string            `json:"secret_name"`
	SecretValue       *string            `json:"secret_value"`
	Networking        json.RawMessage    `json:"networking"`
	InjectionLocation *injectionLocation `json:"injection_location"`
}

type injectionLocation struct {
	Body   *bool `json:"body"`
	Header *bool `json:"header"`
}

type refreshIn struct {
	ClientID          *string         `json:"client_id"`
	RefreshToken      *string         `json:"refresh_token"`
	TokenEndpoint     *string         `json:"token_endpoint"`
	TokenEndpointAuth json.RawMessage `json:"token_endpoint_auth"`
	Resource          *string         `json:"resource"`
	Scope             *string         `json:"scope"`
}

type tokenEndpointAuthIn struct {
	Type         string  `json:"type"`
	ClientSecret *string `json:"client_secret"`
}

func viewCredential(c *apitype.Credential) *apitype.Credential {
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	return c
}

// plain is a secret to seal: its name and value.
type plain struct {
	name, value string
}

// only refuses the fields of other auth types: fields maps each present field's name to whether it is set.
func only(p, typ string, fields map[string]bool, allowed ...string) error {
	for name, set := range fields {
		if set && !slices.Contains(allowed, name) {
			return invalid(path(p, name), "not a field of %s credentials", typ)
		}
	}
	return nil
}

func (a *credAuthIn) present() map[string]bool {
	return map[string]bool{
		"mcp_server_url": a.MCPServerURL != nil, "token": a.Token != nil, "access_token": a.AccessToken != nil,
		"expires_at": a.ExpiresAt.Set, "refresh": !isNull(a.Refresh), "secret_name": a.SecretName != nil,
		"secret_value": a.SecretValue != nil, "networking": !isNull(a.Networking),
		"injection_location": a.InjectionLocation != nil,
	}
}

// checkSecret validates a secret's presence and size. Its value never appears in a message.
func checkSecret(p string, v *string, required bool) error {
	if v == nil {
		if required {
			return invalid(p, "required")
		}
		return nil
	}
	if *v == "" {
		return invalid(p, "must not be empty")
	}
	if len(*v) > maxSecretLen {
		return invalid(p, "longer than %d bytes", maxSecretLen)
	}
	return nil
}

// checkCredentialURL validates a credential's URL field: an http(s) URL of bounded length without userinfo.
func checkCredentialURL(p, v string) error {
	if err := checkURL(p, v); err != nil {
		return err
	}
	if len(v) > maxURLLen {
		return invalid(p, "longer than %d characters", maxURLLen)
	}
	if u, _ := url.Parse(v); u.User != nil {
		return invalid(p, "must not carry credentials (user:password@)")
	}
	return nil
}

// checkEnvName validates an environment variable name: a letter or _, then letters, digits and _.
func checkEnvName(p, v string) error {
	if v == "" {
		return invalid(p, "required")
	}
	if len(v) > maxSecretNameLen {
		return invalid(p, "longer than %d characters", maxSecretNameLen)
	}
	for i := range len(v) {
		c := v[i]
		if c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return invalid(p, "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
	}
	return nil
}

// checkCredentialHost validates an allowed_hosts entry of a credential: a bare host name, an IPv4 address or a
// "*." wildcard; no URL, port, path or IPv6 address.
func checkCredentialHost(p, h string) error {
	if strings.Contains(h, ":") || !validHost(h) {
		return invalid(p, "invalid host %q: want a bare host name, an IPv4 address or *.domain", h)
	}
	if ip := net.ParseIP(strings.TrimPrefix(h, "*.")); ip != nil && strings.HasPrefix(h, "*.") {
		return invalid(p, "invalid host %q: a wildcard takes a domain, not an address", h)
	}
	return nil
}

func parseCredNetworking(p string, raw json.RawMessage) (*apitype.CredentialNetworking, error) {
	var in struct {
		Type         apitype.NetworkingType `json:"type"`
		AllowedHosts []string               `json:"allowed_hosts"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	switch in.Type {
	case apitype.NetworkingUnrestricted:
		if in.AllowedHosts != nil {
			return nil, invalid(path(p, "allowed_hosts"), "not a field of unrestricted networking")
		}
		return &apitype.CredentialNetworking{Type: apitype.NetworkingUnrestricted}, nil
	case apitype.NetworkingLimited:
		if len(in.AllowedHosts) == 0 || len(in.AllowedHosts) > maxCredentialHost {
			return nil, invalid(path(p, "allowed_hosts"), "between 1 and %d hosts", maxCredentialHost)
		}
		for i, h := range in.AllowedHosts {
			if err := checkCredentialHost(index(path(p, "allowed_hosts"), i), h); err != nil {
				return nil, err
			}
		}
		return &apitype.CredentialNetworking{Type: apitype.NetworkingLimited, AllowedHosts: append([]string{}, in.AllowedHosts...)}, nil
	case "":
		return nil, invalid(path(p, "type"), "required")
	}
	return nil, invalid(path(p, "type"), `must be "unrestricted" or "limited"`)
}

// parseExpiry parses expires_at, which must be in the future.
func parseExpiry(p, v string, now time.Time) (*time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, invalid(p, "must be an RFC 3339 timestamp")
	}
	if !t.After(now) {
		return nil, invalid(p, "must be in the future")
	}
	t = t.UTC()
	return &t, nil
}

// parseCredAuth validates «CredAuthIn» for a new credential id and returns the auth, the secrets to seal and
// the match key (what must be unique among the vault's active credentials).
func parseCredAuth(p string, raw json.RawMessage, now time.Time) (apitype.CredentialAuth, []plain, string, error) {
	var in credAuthIn
	if isNull(raw) {
		return apitype.CredentialAuth{}, nil, "", invalid(p, "required")
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return apitype.CredentialAuth{}, nil, "", err
	}
	out := apitype.CredentialAuth{Type: in.Type}
	var secrets []plain
	fail := func(err error) (apitype.CredentialAuth, []plain, string, error) {
		return apitype.CredentialAuth{}, nil, "", err
	}
	switch in.Type {
	case apitype.AuthStaticBearer:
		if err := only(p, in.Type, in.present(), "mcp_server_url", "token"); err != nil {
			return fail(err)
		}
		if err := checkCredentialURL(path(p, "mcp_server_url"), deref(in.MCPServerURL)); err != nil {
			return fail(err)
		}
		if err := checkSecret(path(p, "token"), in.Token, true); err != nil {
			return fail(err)
		}
		out.MCPServerURL = *in.MCPServerURL
		secrets = append(secrets, plain{secretToken, *in.Token})
		return out, secrets, "mcp:" + out.MCPServerURL, nil
	case apitype.AuthMCPOAuth:
		if err := only(p, in.Type, in.present(), "mcp_server_url", "access_token", "expires_at", "refresh"); err != nil {
			return fail(err)
		}
		if err := checkCredentialURL(path(p, "mcp_server_url"), deref(in.MCPServerURL)); err != nil {
			return fail(err)
		}
		if err := checkSecret(path(p, "access_token"), in.AccessToken, true); err != nil {
			return fail(err)
		}
		out.MCPServerURL = *in.MCPServerURL
		secrets = append(secrets, plain{secretAccessToken, *in.AccessToken})
		if in.ExpiresAt.Set && !in.ExpiresAt.Null {
			t, err := parseExpiry(path(p, "expires_at"), in.ExpiresAt.Value, now)
			if err != nil {
				return fail(err)
			}
			out.ExpiresAt = t
		}
		if !isNull(in.Refresh) {
			ref, more, err := parseRefresh(path(p, "refresh"), in.Refresh)
			if err != nil {
				return fail(err)
			}
			out.Refresh = ref
			secrets = append(secrets, more...)
		}
		return out, secrets, "mcp:" + out.MCPServerURL, nil
	case apitype.AuthEnvironmentVariable:
		if err := only(p, in.Type, in.present(), "secret_name", "secret_value", "networking", "injection_location"); err != nil {
			return fail(err)
		}
		if err := checkEnvName(path(p, "secret_name"), deref(in.SecretName)); err != nil {
			return fail(err)
		}
		if err := checkSecret(path(p, "secret_value"), in.SecretValue, true); err != nil {
			return fail(err)
		}
		if isNull(in.Networking) {
			return fail(invalid(path(p, "networking"), "required"))
		}
		n, err := parseCredNetworking(path(p, "networking"), in.Networking)
		if err != nil {
			return fail(err)
		}
		out.SecretName, out.Networking = *in.SecretName, n
		loc := apitype.InjectionLocation{Header: true}
		if err := applyInjection(path(p, "injection_location"), &loc, in.InjectionLocation); err != nil {
			return fail(err)
		}
		out.InjectionLocation = &loc
		secrets = append(secrets, plain{secretValue, *in.SecretValue})
		return out, secrets, "env:" + out.SecretName, nil
	case "":
		return fail(invalid(path(p, "type"), "required"))
	}
	return fail(invalid(path(p, "type"), `must be "mcp_oauth", "static_bearer" or "environment_variable"`))
}

// applyInjection applies an injection_location (omitted fields keep their value); one must stay enabled.
func applyInjection(p string, loc *apitype.InjectionLocation, in *injectionLocation) error {
	if in == nil {
		return nil
	}
	if in.Body != nil {
		loc.Body = *in.Body
	}
	if in.Header != nil {
		loc.Header = *in.Header
	}
	if !loc.Body && !loc.Header {
		return invalid(p, "at least one of body and header must be true")
	}
	return nil
}

func parseRefresh(p string, raw json.RawMessage) (*apitype.OAuthRefresh, []plain, error) {
	var in refreshIn
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, nil, err
	}
	if err := checkString(path(p, "client_id"), deref(in.ClientID), true, maxURLLen); err != nil {
		return nil, nil, err
	}
	if err := checkSecret(path(p, "refresh_token"), in.RefreshToken, true); err != nil {
		return nil, nil, err
	}
	if err := checkCredentialURL(path(p, "token_endpoint"), deref(in.TokenEndpoint)); err != nil {
		return nil, nil, err
	}
	if isNull(in.TokenEndpointAuth) {
		return nil, nil, invalid(path(p, "token_endpoint_auth"), "required")
	}
	ap := path(p, "token_endpoint_auth")
	var ta tokenEndpointAuthIn
	if err := strictUnmarshal(ap, in.TokenEndpointAuth, &ta); err != nil {
		return nil, nil, err
	}
	secrets := []plain{{secretRefreshToken, *in.RefreshToken}}
	switch ta.Type {
	case tokenAuthNone:
		if ta.ClientSecret != nil {
			return nil, nil, invalid(path(ap, "client_secret"), `not a field of "none"`)
		}
	case tokenAuthBasic, tokenAuthPost:
		if err := checkSecret(path(ap, "client_secret"), ta.ClientSecret, true); err != nil {
			return nil, nil, err
		}
		secrets = append(secrets, plain{secretClientSecret, *ta.ClientSecret})
	case "":
		return nil, nil, invalid(path(ap, "type"), "required")
	default:
		return nil, nil, invalid(path(ap, "type"), `must be "none", "client_secret_basic" or "client_secret_post"`)
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"resource", in.Resource}, {"scope", in.Scope}} {
		if f.v != nil {
			if err := checkString(path(p, f.name), *f.v, false, maxURLLen); err != nil {
				return nil, nil, err
			}
		}
	}
	out := &apitype.OAuthRefresh{ClientID: *in.ClientID, TokenEndpoint: *in.TokenEndpoint,
		TokenEndpointAuth: apitype.TokenEndpointAuth{Type: ta.Type}}
	if in.Resource != nil && *in.Resource != "" {
		out.Resource = in.Resource
	}
	if in.Scope != nil && *in.Scope != "" {
		out.Scope = in.Scope
	}
	return out, secrets, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// immutable refuses a change of an immutable field: the same value is accepted, another is a 400.
func immutable(p string, given *string, current string) error {
	if given != nil && *given != current {
		return invalid(p, "cannot be changed after the credential is created; create a new credential instead")
	}
	return nil
}

// updateCredAuth applies «CredAuthUpdate» to the stored auth and returns the secrets to seal.
func updateCredAuth(p string, raw json.RawMessage, cur *apitype.CredentialAuth, now time.Time) ([]plain, error) {
	var in credAuthIn
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	if in.Type == "" {
		return nil, invalid(path(p, "type"), "required")
	}
	if in.Type != cur.Type {
		if !slices.Contains([]string{apitype.AuthMCPOAuth, apitype.AuthStaticBearer, apitype.AuthEnvironmentVariable}, in.Type) {
			// Not echoed: an unknown value may be anything, a pasted secret included.
			return nil, invalid(path(p, "type"), `must be "mcp_oauth", "static_bearer" or "environment_variable"`)
		}
		return nil, invalid(path(p, "type"), "cannot change a credential from %s to %s; create a new credential instead",
			cur.Type, in.Type)
	}
	var secrets []plain
	switch cur.Type {
	case apitype.AuthStaticBearer:
		if err := only(p, in.Type, in.present(), "mcp_server_url", "token"); err != nil {
			return nil, err
		}
		if err := immutable(path(p, "mcp_server_url"), in.MCPServerURL, cur.MCPServerURL); err != nil {
			return nil, err
		}
		if err := checkSecret(path(p, "token"), in.Token, false); err != nil {
			return nil, err
		}
		if in.Token != nil {
			secrets = append(secrets, plain{secretToken, *in.Token})
		}
	case apitype.AuthMCPOAuth:
		if err := only(p, in.Type, in.present(), "mcp_server_url", "access_token", "expires_at", "refresh"); err != nil {
			return nil, err
		}
		if err := immutable(path(p, "mcp_server_url"), in.MCPServerURL, cur.MCPServerURL); err != nil {
			return nil, err
		}
		if err := checkSecret(path(p, "access_token"), in.AccessToken, false); err != nil {
			return nil, err
		}
		if in.AccessToken != nil {
			secrets = append(secrets, plain{secretAccessToken, *in.AccessToken})
		}
		if in.ExpiresAt.Set {
			if in.ExpiresAt.Null {
				cur.ExpiresAt = nil
			} else {
				t, err := parseExpiry(path(p, "expires_at"), in.ExpiresAt.Value, now)
				if err != nil {
					return nil, err
				}
				cur.ExpiresAt = t
			}
		}
		if !isNull(in.Refresh) {
			more, err := updateRefresh(path(p, "refresh"), in.Refresh, cur.Refresh)
			if err != nil {
				return nil, err
			}
			secrets = append(secrets, more...)
		}
	case apitype.AuthEnvironmentVariable:
		if err := only(p, in.Type, in.present(), "secret_name", "secret_value", "networking", "injection_location"); err != nil {
			return nil, err
		}
		if err := immutable(path(p, "secret_name"), in.SecretName, cur.SecretName); err != nil {
			return nil, err
		}
		if err := checkSecret(path(p, "secret_value"), in.SecretValue, false); err != nil {
			return nil, err
		}
		if in.SecretValue != nil {
			secrets = append(secrets, plain{secretValue, *in.SecretValue})
		}
		if !isNull(in.Networking) {
			n, err := parseCredNetworking(path(p, "networking"), in.Networking)
			if err != nil {
				return nil, err
			}
			cur.Networking = n
		}
		loc := apitype.InjectionLocation{Header: true}
		if cur.InjectionLocation != nil {
			loc = *cur.InjectionLocation
		}
		if err := applyInjection(path(p, "injection_location"), &loc, in.InjectionLocation); err != nil {
			return nil, err
		}
		cur.InjectionLocation = &loc
	default:
		return nil, invalid(path(p, "type"), "credential has an unknown auth type %s", cur.Type)
	}
	return secrets, nil
}

// updateRefresh applies a refresh update: refresh_token, scope ("" clears) and the client secret of the current
// token endpoint auth, which keeps its type. client_id, token_endpoint and resource are immutable.
func updateRefresh(p string, raw json.RawMessage, cur *apitype.OAuthRefresh) ([]plain, error) {
	var in refreshIn
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	if cur == nil {
		return nil, invalid(p, "the credential has no refresh configuration; create a new credential with one")
	}
	if err := immutable(path(p, "client_id"), in.ClientID, cur.ClientID); err != nil {
		return nil, err
	}
	if err := immutable(path(p, "token_endpoint"), in.TokenEndpoint, cur.TokenEndpoint); err != nil {
		return nil, err
	}
	if err := immutable(path(p, "resource"), in.Resource, deref(cur.Resource)); err != nil {
		return nil, err
	}
	var secrets []plain
	if err := checkSecret(path(p, "refresh_token"), in.RefreshToken, false); err != nil {
		return nil, err
	}
	if in.RefreshToken != nil {
		secrets = append(secrets, plain{secretRefreshToken, *in.RefreshToken})
	}
	if in.Scope != nil {
		if err := checkString(path(p, "scope"), *in.Scope, false, maxURLLen); err != nil {
			return nil, err
		}
		if *in.Scope == "" {
			cur.Scope = nil
		} else {
			sc := *in.Scope
			cur.Scope = &sc
		}
	}
	if !isNull(in.TokenEndpointAuth) {
		ap := path(p, "token_endpoint_auth")
		var ta tokenEndpointAuthIn
		if err := strictUnmarshal(ap, in.TokenEndpointAuth, &ta); err != nil {
			return nil, err
		}
		if ta.Type != tokenAuthBasic && ta.Type != tokenAuthPost {
			return nil, invalid(path(ap, "type"), `must be "client_secret_basic" or "client_secret_post"`)
		}
		if cur.TokenEndpointAuth.Type == tokenAuthNone {
			return nil, invalid(ap, "the credential authenticates to its token endpoint with none; it has no client secret to replace")
		}
		if err := checkSecret(path(ap, "client_secret"), ta.ClientSecret, false); err != nil {
			return nil, err
		}
		if ta.ClientSecret != nil {
			secrets = append(secrets, plain{secretClientSecret, *ta.ClientSecret})
		}
	}
	return secrets, nil
}

// seal seals a credential's secrets.
func (s *Server) seal(credentialID string, secrets []plain) ([]store.SealedSecret, error) {
	if len(secrets) > 0 && s.sealer == nil {
		return nil, errNoSealer
	}
	out := make([]store.SealedSecret, 0, len(secrets))
	for _, p := range secrets {
		sealed, err := s.sealer.Seal(credentialID, p.name, []byte(p.value))
		if err != nil {
			return nil, fmt.Errorf("seal %s of %s: %w", p.name, credentialID, err)
		}
		out = append(out, *sealed)
	}
	return out, nil
}

var errNoSealer = &apiError{status: http.StatusInternalServerError, typ: apitype.ErrAPI,
	msg: "this server has no vault key configured; it cannot store credentials"}

func (s *Server) credentialCreate(w http.ResponseWriter, r *http.Request) error {
	vaultID := r.PathValue("vault_id")
	var req credentialCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	now := s.now()
	auth, secrets, match, err := parseCredAuth("auth", req.Auth, now)
	if err != nil {
		return err
	}
	c := &apitype.Credential{Type: "vault_credential", ID: apitype.NewID(apitype.PrefixCredential), VaultID: vaultID,
		Metadata: req.Metadata, Auth: auth, CreatedAt: now, UpdatedAt: now}
	if req.DisplayName != nil {
		if err := checkString("display_name", *req.DisplayName, false, maxVaultNameLen); err != nil {
			return err
		}
		if *req.DisplayName != "" {
			c.DisplayName = req.DisplayName
		}
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return err
	}
	viewCredential(c)
	v, err := s.store.VaultGet(r.Context(), vaultID)
	if err != nil {
		return lookup(err, "vault", vaultID)
	}
	if v.ArchivedAt != nil {
		return invalid("", "vault %s is archived; it takes no new credentials", vaultID)
	}
	sealed, err := s.seal(c.ID, secrets)
	if err != nil {
		return err
	}
	err = s.store.CredentialCreate(r.Context(), &store.CredentialCreateParams{Credential: c, MatchKey: match, Secrets: sealed})
	switch {
	case errors.Is(err, store.ErrConflict):
		if auth.Type == apitype.AuthEnvironmentVariable {
			return conflict("vault %s already has an active credential for the environment variable %s", vaultID, auth.SecretName)
		}
		return conflict("vault %s already has an active credential for the MCP server %s", vaultID, auth.MCPServerURL)
	case err != nil:
		return lookup(err, "vault", vaultID)
	}
	return writeJSON(w, http.StatusOK, c)
}

func (s *Server) credentialGet(w http.ResponseWriter, r *http.Request) error {
	ref := &store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	c, err := s.store.CredentialGet(r.Context(), ref)
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	return writeJSON(w, http.StatusOK, viewCredential(c))
}

func (s *Server) credentialUpdate(w http.ResponseWriter, r *http.Request) error {
	ref := store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	var req credentialUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	now := s.now()
	c, err := s.store.CredentialUpdate(r.Context(), &store.CredentialUpdateParams{CredentialRef: ref,
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			if c.ArchivedAt != nil {
				return nil, invalid("", "credential %s is archived and cannot be updated", ref.ID)
			}
			var secrets []plain
			if req.Auth.Set && !req.Auth.Null {
				var err error
				if secrets, err = updateCredAuth("auth", req.Auth.Value, &c.Auth, now); err != nil {
					return nil, err
				}
			}
			if req.DisplayName.Set {
				if req.DisplayName.Null || req.DisplayName.Value == "" {
					c.DisplayName = nil
				} else {
					if err := checkString("display_name", req.DisplayName.Value, false, maxVaultNameLen); err != nil {
						return nil, err
					}
					d := req.DisplayName.Value
					c.DisplayName = &d
				}
			}
			if req.Metadata != nil {
				md, err := patchMetadata("metadata", c.Metadata, req.Metadata)
				if err != nil {
					return nil, err
				}
				c.Metadata = md
			}
			c.UpdatedAt = now
			return s.seal(c.ID, secrets)
		}})
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	return writeJSON(w, http.StatusOK, viewCredential(c))
}

func (s *Server) credentialList(w http.ResponseWriter, r *http.Request) error {
	vaultID := r.PathValue("vault_id")
	p, limit, c, err := listParams(newQuery(r.URL), defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	p.Desc = true
	data, next, _, err := listByCreated(p, limit, c, false,
		func(p *store.ListParams) ([]apitype.Credential, error) {
			return s.store.CredentialList(r.Context(), &store.CredentialListParams{ListParams: *p, VaultID: vaultID})
		},
		func(c *apitype.Credential) (time.Time, string) { return c.CreatedAt, c.ID })
	if err != nil {
		return lookup(err, "vault", vaultID)
	}
	for i := range data {
		viewCredential(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Credential]{Data: data, NextPage: next})
}

func (s *Server) credentialDelete(w http.ResponseWriter, r *http.Request) error {
	ref := &store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	if err := s.store.CredentialDelete(r.Context(), ref); err != nil {
		return lookup(err, "credential", ref.ID)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": ref.ID, "type": "vault_credential_deleted"})
}

func (s *Server) credentialArchive(w http.ResponseWriter, r *http.Request) error {
	ref := store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	c, err := s.store.CredentialArchive(r.Context(), &store.CredentialArchiveParams{CredentialRef: ref, At: s.now()})
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	return writeJSON(w, http.StatusOK, viewCredential(c))
}

// CredentialValidator probes an MCP credential against its server (the MCP proxy, which can open its secrets;
// the API cannot). The answer holds nothing secret.
type CredentialValidator interface {
	Validate(ctx context.Context, vaultID, credentialID string) (*apitype.CredentialValidation, error)
}

// credentialValidate answers mcp_oauth_validate for a static_bearer or mcp_oauth credential.
func (s *Server) credentialValidate(w http.ResponseWriter, r *http.Request) error {
	ref := &store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	c, err := s.store.CredentialGet(r.Context(), ref)
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	if c.Auth.Type != apitype.AuthMCPOAuth && c.Auth.Type != apitype.AuthStaticBearer {
		return invalid("", "credential %s is an %s credential; only mcp_oauth and static_bearer credentials can be validated", c.ID, c.Auth.Type)
	}
	if c.ArchivedAt != nil {
		return invalid("", "credential %s is archived", c.ID)
	}
	if s.validator == nil {
		return &apiError{status: http.StatusInternalServerError, typ: apitype.ErrAPI,
			msg: "this server has no MCP proxy configured; it cannot validate credentials"}
	}
	v, err := s.validator.Validate(r.Context(), ref.VaultID, ref.ID)
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	return writeJSON(w, http.StatusOK, v)
}
