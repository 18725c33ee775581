package api

import (
	"encoding/json"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// The auth of a credential, decoded per auth type: credAuthTypes holds each type's fields, its decoder of a new
// credential's «CredAuthIn» and its applier of a «CredAuthUpdate» to a stored one.

// Credential field limits.
const (
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

// credAuthIn is «CredAuthIn» and «CredAuthUpdate», every type's fields together; each type checks that only its
// own are present. Secrets are pointers so that "omitted" and "empty" differ.
type credAuthIn struct {
	Type              apitype.CredentialAuthType `json:"type"`
	MCPServerURL      *string                    `json:"mcp_server_url"`
	Token             *string                    `json:"token"`
	AccessToken       *string                    `json:"access_token"`
	ExpiresAt         nullable[string]           `json:"expires_at"`
	Refresh           json.RawMessage            `json:"refresh"`
	SecretName        *string                    `json:"secret_name"`
	SecretValue       *string                    `json:"secret_value"`
	Networking        json.RawMessage            `json:"networking"`
	InjectionLocation *injectionLocation         `json:"injection_location"`
}

type injectionLocation struct {
	Body   *bool `json:"body"`
	Header *bool `json:"header"`
}

// plain is a secret to seal: its name and value.
type plain struct {
	name, value string
}

// only refuses the fields of other auth types: fields maps each present field's name to whether it is set.
func only(p string, typ apitype.CredentialAuthType, fields map[string]bool, allowed ...string) error {
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

// credAuthType decodes and checks one credential auth type.
type credAuthType struct {
	// fields are the fields of credAuthIn the type takes, besides type; any other is a 400.
	fields []string
	// create builds a new credential's auth from in and returns the secrets to seal and the match key (what must
	// be unique among the vault's active credentials).
	create func(p string, in *credAuthIn, now time.Time) (apitype.CredentialAuth, []plain, string, error)
	// update applies in to the stored auth cur and returns the secrets to seal.
	update func(p string, in *credAuthIn, cur *apitype.CredentialAuth, now time.Time) ([]plain, error)
}

// credAuthTypes is every credential auth type, by its name.
var credAuthTypes = map[apitype.CredentialAuthType]credAuthType{
	apitype.AuthStaticBearer: {fields: []string{"mcp_server_url", "token"},
		create: createStaticBearer, update: updateStaticBearer},
	apitype.AuthMCPOAuth: {fields: []string{"mcp_server_url", "access_token", "expires_at", "refresh"},
		create: createMCPOAuth, update: updateMCPOAuth},
	apitype.AuthEnvironmentVariable: {fields: []string{"secret_name", "secret_value", "networking", "injection_location"},
		create: createEnvVar, update: updateEnvVar},
}

// errAuthType answers an auth type that is not in credAuthTypes. The value is not echoed: an unknown one may be
// anything, a pasted secret included.
func errAuthType(p string) error {
	return invalid(path(p, "type"), `must be "mcp_oauth", "static_bearer" or "environment_variable"`)
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
	if in.Type == "" {
		return apitype.CredentialAuth{}, nil, "", invalid(path(p, "type"), "required")
	}
	t, ok := credAuthTypes[in.Type]
	if !ok {
		return apitype.CredentialAuth{}, nil, "", errAuthType(p)
	}
	if err := only(p, in.Type, in.present(), t.fields...); err != nil {
		return apitype.CredentialAuth{}, nil, "", err
	}
	return t.create(p, &in, now)
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
		if _, ok := credAuthTypes[in.Type]; !ok {
			return nil, errAuthType(p)
		}
		return nil, invalid(path(p, "type"), "cannot change a credential from %s to %s; create a new credential instead",
			cur.Type, in.Type)
	}
	t, ok := credAuthTypes[cur.Type]
	if !ok {
		return nil, invalid(path(p, "type"), "credential has an unknown auth type %s", cur.Type)
	}
	if err := only(p, in.Type, in.present(), t.fields...); err != nil {
		return nil, err
	}
	return t.update(p, &in, cur, now)
}

// static_bearer: a bearer token for an MCP server.

func createStaticBearer(p string, in *credAuthIn, _ time.Time) (apitype.CredentialAuth, []plain, string, error) {
	if err := checkCredentialURL(path(p, "mcp_server_url"), deref(in.MCPServerURL)); err != nil {
		return apitype.CredentialAuth{}, nil, "", err
	}
	if err := checkSecret(path(p, "token"), in.Token, true); err != nil {
		return apitype.CredentialAuth{}, nil, "", err
	}
	out := apitype.CredentialAuth{Type: in.Type, MCPServerURL: *in.MCPServerURL}
	return out, []plain{{secretToken, *in.Token}}, "mcp:" + out.MCPServerURL, nil
}

func updateStaticBearer(p string, in *credAuthIn, cur *apitype.CredentialAuth, _ time.Time) ([]plain, error) {
	if err := immutable(path(p, "mcp_server_url"), in.MCPServerURL, cur.MCPServerURL); err != nil {
		return nil, err
	}
	if err := checkSecret(path(p, "token"), in.Token, false); err != nil {
		return nil, err
	}
	if in.Token != nil {
		return []plain{{secretToken, *in.Token}}, nil
	}
	return nil, nil
}

// mcp_oauth: an OAuth access token for an MCP server, with an expiry and how to refresh it (credrefresh.go).

func createMCPOAuth(p string, in *credAuthIn, now time.Time) (apitype.CredentialAuth, []plain, string, error) {
	fail := func(err error) (apitype.CredentialAuth, []plain, string, error) {
		return apitype.CredentialAuth{}, nil, "", err
	}
	if err := checkCredentialURL(path(p, "mcp_server_url"), deref(in.MCPServerURL)); err != nil {
		return fail(err)
	}
	if err := checkSecret(path(p, "access_token"), in.AccessToken, true); err != nil {
		return fail(err)
	}
	out := apitype.CredentialAuth{Type: in.Type, MCPServerURL: *in.MCPServerURL}
	secrets := []plain{{secretAccessToken, *in.AccessToken}}
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
}

func updateMCPOAuth(p string, in *credAuthIn, cur *apitype.CredentialAuth, now time.Time) ([]plain, error) {
	if err := immutable(path(p, "mcp_server_url"), in.MCPServerURL, cur.MCPServerURL); err != nil {
		return nil, err
	}
	if err := checkSecret(path(p, "access_token"), in.AccessToken, false); err != nil {
		return nil, err
	}
	var secrets []plain
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
	return secrets, nil
}

// environment_variable: a secret a sandbox sees only as a placeholder, which the egress proxy replaces with it on
// requests to the credential's allowed hosts.

func createEnvVar(p string, in *credAuthIn, _ time.Time) (apitype.CredentialAuth, []plain, string, error) {
	fail := func(err error) (apitype.CredentialAuth, []plain, string, error) {
		return apitype.CredentialAuth{}, nil, "", err
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
	out := apitype.CredentialAuth{Type: in.Type, SecretName: *in.SecretName, Networking: n}
	loc := apitype.InjectionLocation{Header: true}
	if err := applyInjection(path(p, "injection_location"), &loc, in.InjectionLocation); err != nil {
		return fail(err)
	}
	out.InjectionLocation = &loc
	return out, []plain{{secretValue, *in.SecretValue}}, "env:" + out.SecretName, nil
}

func updateEnvVar(p string, in *credAuthIn, cur *apitype.CredentialAuth, _ time.Time) ([]plain, error) {
	if err := immutable(path(p, "secret_name"), in.SecretName, cur.SecretName); err != nil {
		return nil, err
	}
	if err := checkSecret(path(p, "secret_value"), in.SecretValue, false); err != nil {
		return nil, err
	}
	var secrets []plain
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
	return secrets, nil
}
