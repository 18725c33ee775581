// This file selects a session's credential for an MCP server and keeps its tokens current (bearer).

package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// credential picks the session's credential for an MCP server: the first active static_bearer or mcp_oauth
// credential, in the order of the session's unarchived vaults, whose mcp_server_url matches url. Nil if none.
func (m *MCP) credential(ctx context.Context, sess *apitype.Session, serverURL string) (*bearer, error) {
	want := normMCPURL(serverURL)
	for _, vid := range sess.VaultIDs {
		v, err := m.cfg.Store.VaultGet(ctx, vid)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("proxy: vault %s: %w", vid, err)
		}
		if v.ArchivedAt != nil {
			continue
		}
		list, err := m.cfg.Store.CredentialList(ctx, &store.CredentialListParams{VaultID: vid})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("proxy: credentials of vault %s: %w", vid, err)
		}
		for i := range list {
			c := &list[i]
			if c.ArchivedAt != nil || (c.Auth.Type != apitype.AuthStaticBearer && c.Auth.Type != apitype.AuthMCPOAuth) ||
				normMCPURL(c.Auth.MCPServerURL) != want {
				continue
			}
			b := &bearer{m: m, vaultID: vid, id: c.ID}
			if err := b.load(ctx); err != nil {
				return nil, err
			}
			return b, nil
		}
	}
	return nil, nil
}

// normMCPURL is the form two MCP server URLs are compared in: scheme and host lowercased, the default port and
// a trailing slash dropped.
func normMCPURL(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return s
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	scheme := strings.ToLower(u.Scheme)
	if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	out := scheme + "://" + host + strings.TrimSuffix(u.EscapedPath(), "/")
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out
}

// bearer is a session's credential for one MCP server: its current token, and for mcp_oauth what refreshing
// it needs. The secrets are read from the vault when loaded and after each refresh.
type bearer struct {
	m           *MCP
	vaultID, id string

	mu       sync.Mutex
	cred     *apitype.Credential
	token    string
	refresh  string // the refresh token, "" if none
	secret   string // the client secret, "" if none
	seen     []string
	loadedAt time.Time
	lastErr  string // the last refresh failure, scrubbed
	// refreshes counts successful refreshes; lastRefresh is the last failure as the token endpoint gave it.
	refreshes   int
	lastRefresh *RefreshError
}

// load reads the credential and its secrets from the store.
func (b *bearer) load(ctx context.Context) error {
	c, err := b.m.cfg.Store.CredentialGet(ctx, &store.CredentialRef{VaultID: b.vaultID, ID: b.id})
	if err != nil {
		return fmt.Errorf("proxy: credential %s: %w", b.id, err)
	}
	sealed, err := b.m.cfg.Store.SecretList(ctx, &store.SecretListParams{CredentialID: b.id})
	if err != nil {
		return fmt.Errorf("proxy: secrets of credential %s: %w", b.id, err)
	}
	vals := map[string]string{}
	for i := range sealed {
		v, err := b.m.cfg.Vault.Open(&sealed[i])
		if err != nil {
			return fmt.Errorf("proxy: credential %s: %w", b.id, err)
		}
		vals[sealed[i].Name] = string(v)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cred, b.loadedAt = c, time.Now()
	b.token = vals[secretBearerToken]
	if c.Auth.Type == apitype.AuthMCPOAuth {
		b.token = vals[secretAccessToken]
	}
	b.refresh, b.secret = vals[secretRefreshToken], vals[secretClientSecret]
	for _, s := range []string{b.token, b.refresh, b.secret} {
		if s != "" && !slices.Contains(b.seen, s) {
			b.seen = append(b.seen, s)
		}
	}
	return nil
}

// refreshable reports whether the credential can be refreshed (mcp_oauth with a refresh block and token).
func (b *bearer) refreshable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cred.Auth.Type == apitype.AuthMCPOAuth && b.cred.Auth.Refresh != nil && b.refresh != ""
}

// refreshMargin is how long before its expiry a token is refreshed.
const refreshMargin = time.Minute

// current returns the token to send, refreshing an mcp_oauth token that expires within refreshMargin first
// (a failed refresh sends the old token: the server decides).
func (b *bearer) current(ctx context.Context) (string, error) {
	b.mu.Lock()
	stale := time.Since(b.loadedAt) > RefreshEvery
	b.mu.Unlock()
	if stale {
		// A credential updated (a new token), archived or deleted meanwhile: its current state applies.
		if err := b.load(ctx); err != nil {
			return "", err
		}
	}
	b.mu.Lock()
	tok, exp, archived := b.token, b.cred.Auth.ExpiresAt, b.cred.ArchivedAt != nil
	b.mu.Unlock()
	if archived || tok == "" {
		return "", errors.New("the session's credential for this server was archived")
	}
	if exp != nil && time.Until(*exp) < refreshMargin && b.refreshable() {
		if fresh, err := b.refreshAfter(ctx, tok); err == nil {
			return fresh, nil
		}
	}
	return tok, nil
}

func (b *bearer) refreshError() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastErr
}

// scrub replaces every secret this credential has held in s.
func (b *bearer) scrub(s string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, v := range b.seen {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// refreshAfter refreshes the token unless it is no longer old (another caller refreshed it meanwhile), and
// returns the current one. Refreshes of one credential run one at a time across the proxy's connections, and a
// caller that waited for another's refresh takes its result instead of making a request of its own.
func (b *bearer) refreshAfter(ctx context.Context, old string) (string, error) {
	mu := b.m.refreshLock(b.id)
	mu.Lock()
	defer mu.Unlock()
	// Another connection (or process) may have refreshed the credential: read it again first.
	if err := b.load(ctx); err != nil {
		return "", err
	}
	b.mu.Lock()
	cur, exp := b.token, b.cred.Auth.ExpiresAt
	b.mu.Unlock()
	if cur != old && (exp == nil || time.Until(*exp) > refreshMargin) {
		return cur, nil
	}
	fresh, err := b.m.refreshCredential(ctx, b)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.lastErr = scrubAll(err.Error(), b.seen)
		if re, ok := errors.AsType[*RefreshError](err); ok {
			b.lastRefresh = re
		} else {
			b.lastRefresh = &RefreshError{Err: b.lastErr}
		}
		return "", errors.New(b.lastErr)
	}
	b.lastErr, b.lastRefresh = "", nil
	b.refreshes++
	return fresh, nil
}

// reloaded reads the credential again and returns its token if it is no longer old.
func (b *bearer) reloaded(ctx context.Context, old string) (string, error) {
	if err := b.load(ctx); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token == old || b.token == "" || b.cred.ArchivedAt != nil {
		return "", errors.New("the credential has no newer token")
	}
	return b.token, nil
}
