// This file is the refresh of mcp_oauth credentials for the MCP proxy; the package doc is in doc.go.

package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/store"
)

// maxTokenResponse bounds a token endpoint's answer.
const maxTokenResponse = 1 << 20

// tokenResponse is a token endpoint's answer (RFC 6749 section 5.1).
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    *int64 `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Error        string `json:"error"`
	ErrorDesc    string `json:"error_description"`
}

// RefreshError is a failed refresh: the token endpoint could not be reached (Status 0) or answered with an
// error. Body is the endpoint's answer scrubbed of the credential's secrets.
type RefreshError struct {
	Status        int
	ContentType   string
	Body          string
	BodyTruncated bool
	Err           string
}

func (e *RefreshError) Error() string {
	if e.Status == 0 {
		return "the token endpoint could not be reached: " + e.Err
	}
	return fmt.Sprintf("the token endpoint answered %d: %s", e.Status, e.Err)
}

// refreshCredential exchanges b's refresh token at the credential's token_endpoint (client authentication none,
// client_secret_basic or client_secret_post; resource and scope passed through) and seals the new access token
// (and the new refresh token, if the endpoint rotated it) back into the vault with the new expiry. b's lock is
// not held; the credential's refresh lock is.
func (m *MCP) refreshCredential(ctx context.Context, b *bearer) (string, error) {
	b.mu.Lock()
	r := b.cred.Auth.Refresh
	rt, secret, secrets := b.refresh, b.secret, append([]string(nil), b.seen...)
	b.mu.Unlock()
	if r == nil || rt == "" {
		return "", errors.New("the credential has no refresh token")
	}
	tr, err := m.exchange(ctx, r, rt, secret, secrets)
	if err != nil {
		m.refreshFailed(ctx, b)
		return "", err
	}
	var exp *time.Time
	if tr.ExpiresIn != nil && *tr.ExpiresIn > 0 {
		t := time.Now().Add(time.Duration(*tr.ExpiresIn) * time.Second).UTC().Truncate(time.Second)
		exp = &t
	}
	_, err = m.cfg.Store.CredentialUpdate(ctx, &store.CredentialUpdateParams{
		CredentialRef: store.CredentialRef{VaultID: b.vaultID, ID: b.id},
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			if c.ArchivedAt != nil {
				return nil, errors.New("the credential was archived")
			}
			c.Auth.ExpiresAt = exp
			c.UpdatedAt = apitype.Now()
			at, err := m.cfg.Vault.Seal(c.ID, secretAccessToken, []byte(tr.AccessToken))
			if err != nil {
				return nil, err
			}
			out := []store.SealedSecret{*at}
			if tr.RefreshToken != "" {
				rt, err := m.cfg.Vault.Seal(c.ID, secretRefreshToken, []byte(tr.RefreshToken))
				if err != nil {
					return nil, err
				}
				out = append(out, *rt)
			}
			return out, nil
		},
	})
	if err != nil {
		return "", fmt.Errorf("the refreshed token could not be stored: %w", err)
	}
	if err := b.load(ctx); err != nil {
		return "", err
	}
	m.cfg.Logger.Info("mcp_oauth credential refreshed", "credential", b.id, "expires_at", exp)
	return tr.AccessToken, nil
}

// exchange makes the refresh_token grant request.
func (m *MCP) exchange(ctx context.Context, r *apitype.OAuthRefresh, refreshToken, clientSecret string, secrets []string) (*tokenResponse, error) {
	u, err := url.Parse(r.TokenEndpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, &RefreshError{Err: "the token_endpoint is not an http(s) URL"}
	}
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}}
	if r.Resource != nil && *r.Resource != "" {
		form.Set("resource", *r.Resource)
	}
	if r.Scope != nil && *r.Scope != "" {
		form.Set("scope", *r.Scope)
	}
	auth := r.TokenEndpointAuth.Type
	if auth != apitype.TokenAuthClientSecretBasic {
		form.Set("client_id", r.ClientID)
	}
	if auth == apitype.TokenAuthClientSecretPost {
		form.Set("client_secret", clientSecret)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, &RefreshError{Err: "the token_endpoint is not a valid URL"}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if auth == "client_secret_basic" {
		req.SetBasicAuth(url.QueryEscape(r.ClientID), url.QueryEscape(clientSecret))
	}
	// The token endpoint is reached like any public destination of the server, or an internal one the operator
	// trusts; never a redirect.
	hc := &http.Client{Transport: m.transport(egress.Policy{AllowAll: true, AllowInternal: m.cfg.AllowInternal}), Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &RefreshError{Err: scrubAll(err.Error(), secrets)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse+1))
	if err != nil {
		return nil, &RefreshError{Err: scrubAll(err.Error(), secrets)}
	}
	var tr tokenResponse
	jsonErr := json.Unmarshal(body, &tr)
	if resp.StatusCode != http.StatusOK || jsonErr != nil || tr.AccessToken == "" {
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		text, cut := scrubBody(body, 4096, append(secrets, tr.AccessToken, tr.RefreshToken))
		msg := "no access_token in the answer"
		if tr.Error != "" {
			msg = tr.Error
		}
		return nil, &RefreshError{Status: resp.StatusCode, ContentType: ct, Body: text, BodyTruncated: cut, Err: scrubAll(msg, secrets)}
	}
	return &tr, nil
}

// refreshFailed tells the organization's webhooks that a credential's refresh failed (its sessions' MCP calls
// fail until someone fixes it). A failure to record it is logged: the refresh's own error is what matters.
func (m *MCP) refreshFailed(ctx context.Context, b *bearer) {
	ev := apitype.NewWebhookEvent("vault_credential.refresh_failed", b.id, "", time.Now())
	ev.Data.VaultID = b.vaultID
	if err := m.cfg.Store.WebhookEventAppend(context.WithoutCancel(ctx), []apitype.WebhookEvent{ev}); err != nil {
		m.cfg.Logger.Warn("record webhook event", "type", ev.Data.Type, "credential", b.id, "err", err)
	}
}
