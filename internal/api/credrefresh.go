package api

import (
	"encoding/json"

	"github.com/corralhq/corral/internal/apitype"
)

// The refresh configuration of an mcp_oauth credential: how the MCP proxy gets a new access token.

type refreshIn struct {
	ClientID          *string         `json:"client_id"`
	RefreshToken      *string         `json:"refresh_token"`
	TokenEndpoint     *string         `json:"token_endpoint"`
	TokenEndpointAuth json.RawMessage `json:"token_endpoint_auth"`
	Resource          *string         `json:"resource"`
	Scope             *string         `json:"scope"`
}

type tokenEndpointAuthIn struct {
	Type         apitype.TokenEndpointAuthType `json:"type"`
	ClientSecret *string                       `json:"client_secret"`
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
	case apitype.TokenAuthNone:
		if ta.ClientSecret != nil {
			return nil, nil, invalid(path(ap, "client_secret"), `not a field of "none"`)
		}
	case apitype.TokenAuthClientSecretBasic, apitype.TokenAuthClientSecretPost:
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
		if ta.Type != apitype.TokenAuthClientSecretBasic && ta.Type != apitype.TokenAuthClientSecretPost {
			return nil, invalid(path(ap, "type"), `must be "client_secret_basic" or "client_secret_post"`)
		}
		if cur.TokenEndpointAuth.Type == apitype.TokenAuthNone {
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
