// This file is the validation of MCP credentials (mcp_oauth_validate) by the MCP proxy; the package doc is in doc.go.

package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/store"
)

// ErrNotMCPCredential is returned (wrapped) by Validate for a credential that is not static_bearer or mcp_oauth.
var ErrNotMCPCredential = errors.New("not an MCP credential")

// Validate probes a credential against its MCP server: initialize, then tools/list, with its token (refreshed
// first if it expires soon, and again on a 401 if it can be). The answer says which step failed with the
// server's answer, and how a refresh went with the token endpoint's answer, both scrubbed of the credential's
// secrets; a refresh that succeeded is sealed back. The server is reached as any public destination or an
// internal one the operator trusts. ErrNotFound for an unknown credential, ErrNotMCPCredential for another type.
func (m *MCP) Validate(ctx context.Context, vaultID, credentialID string) (*apitype.CredentialValidation, error) {
	c, err := m.cfg.Store.CredentialGet(ctx, &store.CredentialRef{VaultID: vaultID, ID: credentialID})
	if err != nil {
		return nil, err
	}
	if c.Auth.Type != apitype.AuthMCPOAuth && c.Auth.Type != apitype.AuthStaticBearer {
		return nil, fmt.Errorf("%w: credential %s is %s", ErrNotMCPCredential, c.ID, c.Auth.Type)
	}
	if c.ArchivedAt != nil {
		return nil, fmt.Errorf("%w: credential %s is archived", ErrNotMCPCredential, c.ID)
	}
	b := &bearer{m: m, vaultID: vaultID, id: credentialID}
	if err := b.load(ctx); err != nil {
		return nil, err
	}
	out := &apitype.CredentialValidation{Type: apitype.ObjectCredentialValidation, CredentialID: c.ID, VaultID: c.VaultID,
		HasRefreshToken: b.refresh != "", ValidatedAt: apitype.Now()}
	u, err := url.Parse(c.Auth.MCPServerURL)
	if err != nil || u.Host == "" {
		out.Status = apitype.ValidationInvalid
		out.MCPProbe = &apitype.MCPProbe{Method: "initialize"}
		return out, nil
	}
	policy := egress.Policy{AllowAll: true, AllowInternal: slices.Clone(m.cfg.AllowInternal)}
	conn := &mcpConn{m: m, server: apitype.MCPServer{Type: apitype.MCPServerURL, Name: u.Host, URL: c.Auth.MCPServerURL}, cred: b,
		policy: policy, record: true}
	err = conn.dialer(ctx, u)
	defer conn.close()

	conn.mu.Lock()
	method := "initialize"
	if err == nil {
		err = conn.connect(ctx)
	}
	if err == nil {
		method = "tools/list"
		conn.authFailed.Store(false)
		for _, lerr := range conn.sess.Tools(ctx, nil) {
			if lerr != nil {
				err = conn.fail(ctx, lerr)
				break
			}
		}
	}
	conn.mu.Unlock()

	b.mu.Lock()
	refreshed, lastRefresh := b.refreshes, b.lastRefresh
	b.mu.Unlock()
	switch {
	case lastRefresh != nil:
		st := apitype.RefreshFailed
		var resp *apitype.HTTPResponse
		if lastRefresh.Status == 0 {
			st = apitype.RefreshConnectError
		} else {
			resp = &apitype.HTTPResponse{StatusCode: lastRefresh.Status, ContentType: lastRefresh.ContentType,
				Body: lastRefresh.Body, BodyTruncated: lastRefresh.BodyTruncated}
		}
		out.Refresh = &apitype.CredentialRefreshed{Status: st, HTTPResponse: resp}
	case refreshed > 0:
		out.Refresh = &apitype.CredentialRefreshed{Status: apitype.RefreshSucceeded}
	case err != nil && conn.authFailed.Load() && !out.HasRefreshToken:
		out.Refresh = &apitype.CredentialRefreshed{Status: apitype.RefreshNoRefreshToken}
	}
	if err == nil {
		out.Status = apitype.ValidationValid
		return out, nil
	}
	out.MCPProbe = &apitype.MCPProbe{Method: method, HTTPResponse: conn.failed.Load()}
	out.Status = apitype.ValidationUnknown
	if me, ok := errors.AsType[*mcp.Error](err); ok && me.Kind == mcp.KindAuthentication {
		out.Status = apitype.ValidationInvalid
	}
	return out, nil
}
