package proxy

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/store"
)

// TokenSecretName is the name under which the API seals a repository resource's authorization_token
// (api.SecretAuthorizationToken).
const TokenSecretName = "authorization_token"

// Store is what Git reads: the sessions (for their current resources) and the resources' sealed tokens.
type Store interface {
	SessionGet(ctx context.Context, id string) (*apitype.Session, error)
	ResourceSecretGet(ctx context.Context, p *store.ResourceSecretRef) (*store.SealedSecret, error)
}

// Opener opens sealed secrets (*vault.Vault).
type Opener interface {
	Open(s *store.SealedSecret) ([]byte, error)
}

// Defaults.
const (
	// DefaultMaxRequestBytes bounds the body of one request from a sandbox (a push's pack).
	DefaultMaxRequestBytes = 2 << 30
	// DefaultRequestTimeout bounds one request to the repository, body transfer included.
	DefaultRequestTimeout = time.Hour
)

// GitConfig configures a Git endpoint.
type GitConfig struct {
	Store Store
	Vault Opener
	// AllowInternal are the host:port pairs the operator trusts although they are internal addresses
	// (corral serve --egress-allow-internal): a repository there may be reached.
	AllowInternal []string
	// RootCAs verify the repositories' TLS certificates; nil means the system roots. (The operator's extra CAs
	// go into a copy of the system pool: see cmd/corral's egress flags.)
	RootCAs *x509.CertPool
	// Authorization is the Authorization header sent with a token; default BasicToken (GitHub's form).
	Authorization func(token string) string
	// MaxRequestBytes bounds a request body from a sandbox; default DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// RequestTimeout bounds one forwarded request; default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives the refusals and the failures (never a token); default discards.
	Logger *slog.Logger
}

// Git is the git endpoint of every session, and the source of the repositories' tokens for the clones. It is a
// sandbox.EgressSource (PoolConfig.Egress) and a workspace.Tokens (workspace.Config.Tokens).
type Git struct {
	cfg GitConfig
}

var _ sandbox.EgressSource = (*Git)(nil)

// NewGit returns a Git endpoint.
func NewGit(cfg GitConfig) (*Git, error) {
	if cfg.Store == nil || cfg.Vault == nil {
		return nil, errors.New("proxy: GitConfig needs a Store and a Vault")
	}
	if cfg.MaxRequestBytes < 0 || cfg.RequestTimeout < 0 {
		return nil, errors.New("proxy: negative limits in GitConfig")
	}
	for _, hp := range cfg.AllowInternal {
		if _, _, err := net.SplitHostPort(hp); err != nil {
			return nil, fmt.Errorf("proxy: AllowInternal %q is not host:port", hp)
		}
	}
	cfg.MaxRequestBytes = cmp.Or(cfg.MaxRequestBytes, DefaultMaxRequestBytes)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout)
	if cfg.Authorization == nil {
		cfg.Authorization = BasicToken
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Git{cfg: cfg}, nil
}

// BasicToken is the Authorization header GitHub (and GitLab, Gitea, Bitbucket) take a token in:
// Basic base64("x-access-token:" + token).
func BasicToken(token string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
}

// RepositoryToken returns the authorization_token of a session's repository resource; false if it has none.
func (g *Git) RepositoryToken(ctx context.Context, sessionID, resourceID string) (string, bool, error) {
	sealed, err := g.cfg.Store.ResourceSecretGet(ctx, &store.ResourceSecretRef{SessionID: sessionID,
		ResourceID: resourceID, Name: TokenSecretName})
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("proxy: token of %s: %w", resourceID, err)
	}
	plain, err := g.cfg.Vault.Open(sealed)
	if err != nil {
		return "", false, fmt.Errorf("proxy: token of %s: %w", resourceID, err)
	}
	return string(plain), true, nil
}

// AuthorizationHeader is the Authorization header value the repository gets for token.
func (g *Git) AuthorizationHeader(token string) string { return g.cfg.Authorization(token) }

// Egress is the git part of a session's sandbox.Egress: its endpoint (Local) and the operator's trusted
// destinations and CAs.
func (g *Git) Egress(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
	return &sandbox.Egress{
		AllowInternal: slices.Clone(g.cfg.AllowInternal),
		RootCAs:       g.cfg.RootCAs,
		Local:         g.Handler(r.SessionID, r.Environment.Networking),
	}, nil
}

// Handler serves session sessionID's git endpoint: the requests its sandbox sends to sandbox.LocalHost. The
// repositories are reached under networking (the session's environment policy) plus AllowInternal.
func (g *Git) Handler(sessionID string, networking *apitype.Networking) http.Handler {
	return g.handler(sessionID, networking)
}

// Relay forwards one smart-HTTP request of git (op: the path after the repository, such as info/refs) to the
// repository of session sessionID's repository resource resourceID, with its token added, as the session's
// git endpoint does (the same checks, limits and networking): the API's git relay, through which `corral
// worker` clones and its sandboxes fetch and push without ever holding the token.
func (g *Git) Relay(w http.ResponseWriter, r *http.Request, sessionID, resourceID, op string, networking *apitype.Networking) {
	h := g.handler(sessionID, networking)
	defer h.client.CloseIdleConnections()
	h.forward(w, r, resourceID, op)
}

// Limits are the bounds of one forwarded request: its body's size and its duration.
func (g *Git) Limits() (maxRequestBytes int64, timeout time.Duration) {
	return g.cfg.MaxRequestBytes, g.cfg.RequestTimeout
}

func (g *Git) handler(sessionID string, networking *apitype.Networking) *gitHandler {
	policy := egress.PolicyFor(networking)
	policy.AllowInternal = slices.Clone(g.cfg.AllowInternal)
	tr := policy.Transport(g.cfg.RootCAs, 15*time.Second)
	tr.ResponseHeaderTimeout, tr.IdleConnTimeout, tr.MaxIdleConns = 5*time.Minute, 30*time.Second, 4
	return &gitHandler{g: g, session: sessionID, client: &http.Client{Transport: tr,
		// A redirect would carry the token to wherever it points: not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type gitHandler struct {
	g       *Git
	session string
	client  *http.Client
}

// refuse answers a request the endpoint does not serve, in plain text that git shows to the user.
func (h *gitHandler) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	h.g.cfg.Logger.Info("git endpoint refused", "session", h.session, "method", r.Method, "path", r.URL.Path, "status", code, "reason", msg)
	http.Error(w, "corral git endpoint: "+msg, code)
}

// ServeHTTP forwards one smart-HTTP request of git to the repository of the resource it names.
func (h *gitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, sandbox.GitPrefix)
	if !ok {
		h.refuse(w, r, http.StatusNotFound, "only "+sandbox.GitPrefix+"<resource_id>/... is served here")
		return
	}
	rid, op, _ := strings.Cut(rest, "/")
	h.forward(w, r, rid, op)
}

// forward forwards one smart-HTTP request of git, op of the repository of resource rid, and only such a
// request (apitype.GitSmartHTTP), to the repository with the resource's token.
func (h *gitHandler) forward(w http.ResponseWriter, r *http.Request, rid, op string) {
	service := r.URL.Query().Get("service")
	if !apitype.GitSmartHTTP(r.Method, op, service) {
		h.refuse(w, r, http.StatusNotFound, "only git's smart HTTP (info/refs?service=git-upload-pack|git-receive-pack, "+
			"git-upload-pack, git-receive-pack) is served here")
		return
	}
	if r.Method == http.MethodPost {
		service = ""
	}
	ctx := r.Context()
	sess, err := h.g.cfg.Store.SessionGet(ctx, h.session)
	if err != nil {
		h.g.cfg.Logger.Warn("git endpoint: session", "session", h.session, "err", err)
		h.refuse(w, r, http.StatusForbidden, "this session is gone")
		return
	}
	i := slices.IndexFunc(sess.Resources, func(res apitype.Resource) bool {
		return res.ID == rid && res.Type == apitype.ResourceGitHubRepository
	})
	if rid == "" || i < 0 {
		h.refuse(w, r, http.StatusForbidden, fmt.Sprintf("resource %q is not a repository of this session", rid))
		return
	}
	repo, err := url.Parse(sess.Resources[i].URL)
	if err != nil || repo.Scheme != "https" || repo.Host == "" || repo.User != nil {
		h.refuse(w, r, http.StatusForbidden, "the resource's repository URL is not an https URL")
		return
	}
	up := *repo
	up.Path = strings.TrimRight(repo.Path, "/") + "/" + op
	up.RawPath, up.RawQuery, up.Fragment = "", "", ""
	if service != "" {
		up.RawQuery = "service=" + service
	}
	token, hasToken, err := h.g.RepositoryToken(ctx, h.session, rid)
	if err != nil {
		h.g.cfg.Logger.Error("git endpoint: token", "session", h.session, "resource", rid, "err", err)
		h.refuse(w, r, http.StatusInternalServerError, "the repository's token could not be read")
		return
	}

	ctx, cancel := context.WithTimeout(ctx, h.g.cfg.RequestTimeout)
	defer cancel()
	var body io.Reader = http.NoBody
	if r.Method == http.MethodPost {
		body = http.MaxBytesReader(w, r.Body, h.g.cfg.MaxRequestBytes)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, up.String(), body)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, "bad request")
		return
	}
	if r.Method == http.MethodPost {
		out.ContentLength = r.ContentLength
	}
	sandbox.CopyGitHeaders(out.Header, r.Header, sandbox.GitRequestHeaders)
	if hasToken {
		out.Header.Set("Authorization", h.g.cfg.Authorization(token))
	}
	resp, err := h.client.Do(out)
	if err != nil {
		// The error names the URL and the network failure, never a header.
		h.g.cfg.Logger.Warn("git endpoint: repository unreachable", "session", h.session, "resource", rid, "err", err)
		code := http.StatusBadGateway
		if errors.Is(err, egress.ErrDenied) {
			code = http.StatusForbidden
		}
		h.refuse(w, r, code, fmt.Sprintf("the repository %s could not be reached: %v", repo.Host, rootCause(err)))
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		// Not passed on as a 401: git in the sandbox would ask for credentials it must not have.
		h.refuse(w, r, http.StatusForbidden, fmt.Sprintf("the repository refused the session's token (401); "+
			"rotate it with POST /v1/sessions/%s/resources/%s", h.session, rid))
		return
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		h.refuse(w, r, http.StatusBadGateway, fmt.Sprintf("the repository redirected (%d); redirects are not followed", resp.StatusCode))
		return
	}
	if err := sandbox.ForwardGitResponse(w, resp); err != nil {
		h.g.cfg.Logger.Warn("git endpoint: response cut", "session", h.session, "resource", rid, "err", err)
	}
}

// rootCause is the innermost error of a transport failure, without the URL (which Do puts around it).
func rootCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// RepositoryAuthorization is the Authorization header value for the token of a session's repository resource
// (workspace.Tokens); false if the resource has no token.
func (g *Git) RepositoryAuthorization(ctx context.Context, sessionID, resourceID string) (string, bool, error) {
	token, ok, err := g.RepositoryToken(ctx, sessionID, resourceID)
	if err != nil || !ok {
		return "", ok, err
	}
	return g.cfg.Authorization(token), true, nil
}

// Resolver is egress.Resolve with the operator's trusted internal host:port pairs: the rule the workspace's
// clones follow (workspace.Config.Resolve), as the git endpoint and the sandboxes' proxies do.
func Resolver(allowInternal []string) func(ctx context.Context, n *apitype.Networking, host, port string) ([]net.IP, error) {
	allow := slices.Clone(allowInternal)
	return func(ctx context.Context, n *apitype.Networking, host, port string) ([]net.IP, error) {
		p := egress.PolicyFor(n)
		p.AllowInternal = allow
		return p.Resolve(ctx, host, port)
	}
}
