// This file is the credential injection at egress (Secrets); the package doc is in doc.go.

package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

// PlaceholderPrefix starts every placeholder; 32 random hex digits follow.
const PlaceholderPrefix = "corral-secret-"

// MaxBodyInjection bounds the request bodies placeholders are replaced in: a larger body goes out as the
// sandbox sent it (and the proxy logs that it did).
const MaxBodyInjection = 10 << 20

// minScrubLen is the shortest secret that answers are scrubbed of: replacing shorter strings would garble
// ordinary responses.
const minScrubLen = 6

// RefreshEvery is how often an Injector reads its credentials again: within it, a credential archived or
// deleted (or its vault) stops being injected, and a new secret_value, allowed_hosts or injection_location
// applies. A sandbox's placeholders stay; a credential created later reaches the session's next sandbox.
const RefreshEvery = 15 * time.Second

// secretValueName is the name of an environment_variable credential's sealed secret.
const secretValueName = "secret_value"

// CredentialStore is what Secrets reads: the session's vaults, their credentials and sealed secrets.
type CredentialStore interface {
	SessionGet(ctx context.Context, id string) (*apitype.Session, error)
	VaultGet(ctx context.Context, id string) (*apitype.Vault, error)
	CredentialList(ctx context.Context, p *store.CredentialListParams) ([]apitype.Credential, error)
	CredentialGet(ctx context.Context, p *store.CredentialRef) (*apitype.Credential, error)
	SecretList(ctx context.Context, p *store.SecretListParams) ([]store.SealedSecret, error)
}

// SecretsConfig configures Secrets.
type SecretsConfig struct {
	Store CredentialStore // required
	Vault *vault.Vault    // required: opens the secrets
	CA    *CA             // required: signs the intercepted TLS (LoadCA)
	// AllowInternal are the host:port pairs the operator trusts (corral serve --egress-allow-internal): a
	// credential's secret goes to a port other than 443 of a host it allows only where such a pair (or the
	// credential's own host entry) names that port.
	AllowInternal []string
	// Logger receives what is skipped (a deleted vault, a duplicate variable, a body over the cap); it never
	// carries a secret or a placeholder. Default discards.
	Logger *slog.Logger
}

func (c *SecretsConfig) validate() error {
	if c.Store == nil || c.Vault == nil || c.CA == nil {
		return errors.New("proxy: Secrets needs a Store, a Vault and a CA")
	}
	for _, hp := range c.AllowInternal {
		if _, _, err := net.SplitHostPort(hp); err != nil {
			return fmt.Errorf("proxy: AllowInternal %q is not host:port", hp)
		}
	}
	return nil
}

// Secrets builds each sandbox's credential placeholders and the Injector that replaces them at egress: a
// sandbox.EgressSource.
type Secrets struct {
	cfg SecretsConfig
}

var _ sandbox.EgressSource = (*Secrets)(nil)

// NewSecrets returns Secrets for cfg.
func NewSecrets(cfg SecretsConfig) (*Secrets, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Secrets{cfg: cfg}, nil
}

// Egress returns the session's Egress: Env maps every active environment_variable credential of the
// session's unarchived vaults to a fresh placeholder, CACertPEM is the CA the sandbox must trust, and
// Intercept replaces the placeholders. A session without such credentials gets nil. A vault named first
// wins a variable name two vaults define; deleted or archived vaults are skipped.
func (s *Secrets) Egress(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
	sess, err := s.cfg.Store.SessionGet(ctx, r.SessionID)
	if err != nil {
		return nil, fmt.Errorf("proxy: session %s: %w", r.SessionID, err)
	}
	var creds []*secret
	names := map[string]bool{}
	for _, vid := range sess.VaultIDs {
		v, err := s.cfg.Store.VaultGet(ctx, vid)
		if errors.Is(err, store.ErrNotFound) {
			s.cfg.Logger.Warn("session vault gone; its credentials are not injected", "session", sess.ID, "vault", vid)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("proxy: vault %s: %w", vid, err)
		}
		if v.ArchivedAt != nil {
			continue
		}
		list, err := s.cfg.Store.CredentialList(ctx, &store.CredentialListParams{VaultID: vid})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("proxy: credentials of vault %s: %w", vid, err)
		}
		for i := range list {
			c := &list[i]
			if c.ArchivedAt != nil || c.Auth.Type != apitype.AuthEnvironmentVariable || c.Auth.SecretName == "" {
				continue
			}
			if names[c.Auth.SecretName] {
				s.cfg.Logger.Warn("variable defined by two credentials; the first vault's is injected",
					"session", sess.ID, "credential", c.ID, "variable", c.Auth.SecretName)
				continue
			}
			sc, err := s.open(ctx, c)
			if err != nil {
				return nil, err
			}
			if sc == nil {
				continue
			}
			names[c.Auth.SecretName] = true
			creds = append(creds, sc)
		}
	}
	if len(creds) == 0 {
		return nil, nil
	}
	in := newInjector(s.cfg.CA, creds, s.cfg.Logger)
	in.reload = s.reload
	for _, hp := range s.cfg.AllowInternal {
		h, p, _ := net.SplitHostPort(hp)
		in.trusted = append(in.trusted, dest{host: normHost(h), port: p})
	}
	eg := &sandbox.Egress{Env: map[string]string{}, CACertPEM: s.cfg.CA.CertPEM(), Intercept: in}
	for _, c := range creds {
		eg.Env[c.name] = string(c.placeholder)
	}
	return eg, nil
}

// reload reads the credentials of cur again: those deleted or archived (or whose vault is) are revoked (their
// secret is never injected again, only scrubbed from answers; their placeholder and hosts stay, so that a
// request still carrying the placeholder is refused with a clear message instead of going out), the others
// get their current secret and configuration under the placeholder they have.
func (s *Secrets) reload(ctx context.Context, cur []*secret) ([]*secret, error) {
	var next []*secret
	vaults := map[string]bool{} // vault id -> usable
	for _, old := range cur {
		if old.revoked {
			next = append(next, old)
			continue
		}
		ok, seen := vaults[old.vaultID]
		if !seen {
			v, err := s.cfg.Store.VaultGet(ctx, old.vaultID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("proxy: vault %s: %w", old.vaultID, err)
			}
			ok = err == nil && v.ArchivedAt == nil
			vaults[old.vaultID] = ok
		}
		if !ok {
			next = append(next, old.revoke())
			continue
		}
		c, err := s.cfg.Store.CredentialGet(ctx, &store.CredentialRef{VaultID: old.vaultID, ID: old.id})
		if errors.Is(err, store.ErrNotFound) {
			next = append(next, old.revoke())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("proxy: credential %s: %w", old.id, err)
		}
		if c.ArchivedAt != nil || c.Auth.Type != apitype.AuthEnvironmentVariable || c.Auth.SecretName != old.name {
			next = append(next, old.revoke())
			continue
		}
		sc, err := s.open(ctx, c)
		if err != nil {
			return nil, err
		}
		if sc == nil {
			next = append(next, old.revoke())
			continue
		}
		sc.placeholder = old.placeholder
		next = append(next, sc)
	}
	return next, nil
}

// open reads and opens a credential's secret; nil if it has none (archived meanwhile).
func (s *Secrets) open(ctx context.Context, c *apitype.Credential) (*secret, error) {
	sealed, err := s.cfg.Store.SecretList(ctx, &store.SecretListParams{CredentialID: c.ID})
	if err != nil {
		return nil, fmt.Errorf("proxy: secret of credential %s: %w", c.ID, err)
	}
	for i := range sealed {
		if sealed[i].Name != secretValueName {
			continue
		}
		value, err := s.cfg.Vault.Open(&sealed[i])
		if err != nil {
			return nil, fmt.Errorf("proxy: credential %s: %w", c.ID, err)
		}
		return newSecret(c, value), nil
	}
	return nil, nil
}

// secret is one credential as one sandbox's Injector holds it.
type secret struct {
	id, name    string
	vaultID     string
	placeholder []byte
	value       []byte
	hosts       []dest // nil: every host (unrestricted networking)
	header      bool
	body        bool
	// revoked: the credential was archived or deleted (or its vault was) while the sandbox ran: a request
	// carrying the placeholder to one of its hosts is refused (Rewrite); the value is only scrubbed.
	revoked bool
}

// revoke returns s marked revoked. It keeps the value only to scrub it from answers (ScrubResponse): an
// upstream sent it before may still echo it. Rewrite never injects it.
func (s *secret) revoke() *secret {
	return &secret{id: s.id, name: s.name, vaultID: s.vaultID, placeholder: s.placeholder, value: s.value, hosts: s.hosts,
		header: s.header, body: s.body, revoked: true}
}

func newSecret(c *apitype.Credential, value []byte) *secret {
	s := &secret{id: c.ID, name: c.Auth.SecretName, vaultID: c.VaultID, placeholder: []byte(NewPlaceholder()), value: value,
		header: true}
	if l := c.Auth.InjectionLocation; l != nil {
		s.header, s.body = l.Header, l.Body
	}
	if n := c.Auth.Networking; n == nil || n.Type != apitype.NetworkingUnrestricted {
		s.hosts = []dest{} // limited, or unknown: only the listed hosts (none if none)
		if n != nil {
			for _, h := range n.AllowedHosts {
				d := dest{host: normHost(h)}
				if hh, p, err := net.SplitHostPort(h); err == nil {
					d = dest{host: normHost(hh), port: p}
				}
				s.hosts = append(s.hosts, d)
			}
		}
	}
	return s
}

// dest is a host (lower case, no trailing dot; "*.domain" in a credential's entry) and a port ("" in an entry:
// 443, or a port the operator trusts for the host).
type dest struct {
	host, port string
}

// matches reports whether the entry's host names host (a wildcard any subdomain of its domain).
func (d dest) matches(host string) bool {
	return d.host == host || strings.HasPrefix(d.host, "*.") && strings.HasSuffix(host, d.host[1:]) && len(host) > len(d.host)-1
}

// NewPlaceholder returns a fresh placeholder: PlaceholderPrefix and 128 random bits in hex, derived from
// nothing.
func NewPlaceholder() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return PlaceholderPrefix + hex.EncodeToString(b)
}

// allows reports whether the secret may be sent to host (normHost) on port ("": any port): to a host its
// entries name, on 443 or a port the operator trusts for host (trusted), or on the port an entry names.
func (s *secret) allows(host, port string, trusted []dest) bool {
	stdPort := port == "" || port == "443" || slices.Contains(trusted, dest{host: host, port: port})
	if s.hosts == nil {
		return stdPort
	}
	for _, h := range s.hosts {
		if h.matches(host) && (h.port == "" && stdPort || h.port != "" && (port == "" || h.port == port)) {
			return true
		}
	}
	return false
}

func normHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
}

// Injector replaces one sandbox's placeholders with their secrets in the requests to the secrets' allowed
// hosts (sandbox.Interceptor), and secrets with their placeholders in the answers.
type Injector struct {
	ca      *CA
	logger  *slog.Logger
	trusted []dest        // the operator's host:port pairs (SecretsConfig.AllowInternal)
	bodies  chan struct{} // slots of the bodies held at a time (maxBodies)
	// reload, if set, reads the credentials again (Secrets.reload), every RefreshEvery.
	reload func(ctx context.Context, cur []*secret) ([]*secret, error)

	mu     sync.Mutex
	creds  []*secret
	loaded time.Time
	// derived are encodings of secrets Rewrite made (a Basic authorization's base64 of user:secret), scrubbed
	// from answers like the secrets; the last maxDerived.
	derived []derived
}

// derived is an encoding of a secret (of the credential credID) and the same encoding of its placeholder.
type derived struct {
	credID    string
	value, ph []byte
}

// maxBodies bounds the request bodies one Injector holds in memory at a time (each up to MaxBodyInjection).
const maxBodies = 4

// maxDerived bounds the encodings an Injector remembers.
const maxDerived = 64

var _ sandbox.Interceptor = (*Injector)(nil)

func newInjector(ca *CA, creds []*secret, logger *slog.Logger) *Injector {
	return &Injector{ca: ca, creds: creds, logger: logger, bodies: make(chan struct{}, maxBodies), loaded: time.Now()}
}

// current returns the credentials, read again first if they are older than RefreshEvery. A failed read keeps
// the ones it has (and is logged), until the next try.
func (in *Injector) current() []*secret {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.reload != nil && time.Since(in.loaded) >= RefreshEvery {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		next, err := in.reload(ctx, in.creds)
		cancel()
		if err != nil {
			in.logger.Warn("credentials not read again; the last ones stay", "err", err)
		} else {
			in.creds = next
		}
		in.loaded = time.Now()
	}
	return in.creds
}

// forHost returns the secrets that may be sent to host:port ("": any port), and the revoked credentials whose
// placeholders were meant for it.
func (in *Injector) forHost(host, port string) (creds, revoked []*secret) {
	host = normHost(host)
	if host == sandbox.LocalHost {
		return nil, nil // the proxy's own services (the git endpoint) are never sent a secret, nor intercepted
	}
	for _, c := range in.current() {
		switch {
		case !c.allows(host, port, in.trusted):
		case c.revoked:
			revoked = append(revoked, c)
		default:
			creds = append(creds, c)
		}
	}
	return creds, revoked
}

// Intercepts reports whether some secret may be sent to host:port, or was until it was revoked: only those
// connections are terminated in the proxy; every other one is tunnelled untouched. A port other than 443 is
// one only where a credential's host entry or the operator's AllowInternal pair names it.
func (in *Injector) Intercepts(host, port string) bool {
	creds, revoked := in.forHost(host, port)
	return len(creds)+len(revoked) > 0
}

// Certificate returns the CA's leaf for host, if the Injector intercepts host (on some port).
func (in *Injector) Certificate(host string) (*tls.Certificate, error) {
	if creds, revoked := in.forHost(host, ""); len(creds)+len(revoked) == 0 {
		return nil, fmt.Errorf("proxy: %s is not intercepted", host)
	}
	return in.ca.Leaf(host)
}

// Rewrite replaces the placeholders of the secrets allowed at req.URL's host and port with the secrets: in
// header values (a Basic authorization's user:password included) when the credential's injection_location
// has header, and in the body when it has body, a body of at most MaxBodyInjection bytes that is not
// content-encoded. The request's Accept-Encoding is dropped (the proxy's transport asks for gzip itself and
// decompresses), so that the answer can be scrubbed (ScrubResponse).
//
// Only a request read from a TLS connection the proxy terminated (req.TLS set, req.URL the connection's
// host:port) is rewritten, and only if it names no other host than its connection's: a request whose Host
// (or absolute-form URI) or TLS server name names another is refused with an error (egress.ErrDenied),
// since a front end that routes by Host would hand the secret to the site the sandbox chose. A plain-HTTP
// request carrying such a placeholder in a header is refused too. A request that carries in a header the
// placeholder of a credential revoked since the sandbox started is refused with an error that names the
// variable, so that the tool says why instead of the upstream's own 401.
func (in *Injector) Rewrite(req *http.Request) error {
	port := urlPort(req.URL)
	creds, revoked := in.forHost(req.URL.Hostname(), port)
	if len(creds)+len(revoked) == 0 {
		return nil
	}
	if req.TLS == nil || !req.TLS.HandshakeComplete {
		return refusePlain(req, creds)
	}
	if err := sameHost(req); err != nil {
		return err
	}
	if err := refuseRevoked(req, revoked); err != nil {
		return err
	}
	if len(creds) == 0 {
		return nil
	}
	req.Header.Del("Accept-Encoding")
	var hdr, body []*secret
	for _, c := range creds {
		if c.header {
			hdr = append(hdr, c)
		}
		if c.body {
			body = append(body, c)
		}
	}
	if len(hdr) > 0 {
		for k, vs := range req.Header {
			for i, v := range vs {
				vs[i] = in.rewriteHeader(k, v, hdr)
			}
		}
	}
	if len(body) == 0 || req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	if ce := req.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		in.logger.Info("request body content-encoded; placeholders in it left as sent", "host", req.URL.Hostname(), "encoding", ce)
		return nil
	}
	// Bodies are held in memory: a few at a time per sandbox, so that its many connections cannot hold more.
	select {
	case in.bodies <- struct{}{}:
		defer func() { <-in.bodies }()
	case <-req.Context().Done():
		return req.Context().Err()
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyInjection+1))
	if err != nil {
		return fmt.Errorf("proxy: read request body: %w", err)
	}
	if len(b) > MaxBodyInjection {
		in.logger.Info("request body over the injection cap; placeholders in it left as sent",
			"host", req.URL.Hostname(), "cap_bytes", MaxBodyInjection)
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), req.Body), req.Body}
		return nil
	}
	req.Body.Close()
	for _, c := range body {
		b = bytes.ReplaceAll(b, c.placeholder, c.value)
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	req.ContentLength = int64(len(b))
	req.TransferEncoding = nil
	req.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return nil
}

// refusePlain returns an error if req, not inside TLS, carries in a header the placeholder of one of creds:
// secrets go only inside TLS the proxy terminates, never in plain HTTP.
func refusePlain(req *http.Request, creds []*secret) error {
	for _, c := range creds {
		if c.header && headersCarry(req.Header, c.placeholder) {
			return fmt.Errorf("%w: %s is replaced by its secret only in HTTPS requests; this plain-HTTP request was not sent",
				egress.ErrDenied, c.name)
		}
	}
	return nil
}

// sameHost returns an error unless req's Host (where an absolute-form URI's authority is) and TLS server name
// name its connection's host and port (req.URL.Host).
func sameHost(req *http.Request) error {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = "443"
	}
	if req.Host != "" && !egress.SameAuthority(req.Host, host, port) {
		return fmt.Errorf("%w: the request's Host is not the host its connection was opened for (%s); no secret is sent under another Host",
			egress.ErrDenied, net.JoinHostPort(host, port))
	}
	if sni := req.TLS.ServerName; sni != "" && normHost(sni) != normHost(host) {
		return fmt.Errorf("%w: the TLS server name is not the host the connection was opened for (%s)", egress.ErrDenied, host)
	}
	return nil
}

// refuseRevoked returns an error if req carries the placeholder of one of the revoked credentials in a
// header (a Basic authorization's base64 included). Bodies are not searched (a placeholder there goes out as
// sent, as to any host it is not meant for): that would hold them in memory for nothing else.
func refuseRevoked(req *http.Request, revoked []*secret) error {
	for _, c := range revoked {
		if c.header && headersCarry(req.Header, c.placeholder) {
			return fmt.Errorf("%w: %s holds the placeholder of a credential that was archived or deleted (or whose vault was) while this sandbox ran; the request was not sent",
				egress.ErrDenied, c.name)
		}
	}
	return nil
}

// headersCarry reports whether a header value (or a Basic authorization's decoded user:password) holds ph.
func headersCarry(h http.Header, ph []byte) bool {
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, string(ph)) {
				return true
			}
			if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") && k == "Authorization" {
				if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil && bytes.Contains(raw, ph) {
					return true
				}
			}
		}
	}
	return false
}

// rewriteHeader replaces placeholders in one header value; in a Basic authorization, inside its base64.
func (in *Injector) rewriteHeader(key, v string, creds []*secret) string {
	if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") && key == "Authorization" {
		cred = strings.TrimSpace(cred)
		if raw, err := base64.StdEncoding.DecodeString(cred); err == nil {
			var used []*secret
			for _, c := range creds {
				if bytes.Contains(raw, c.placeholder) {
					used = append(used, c)
				}
			}
			if len(used) > 0 {
				enc := base64.StdEncoding.EncodeToString(replaceAll(raw, used))
				in.remember(used, []byte(enc), []byte(cred))
				return scheme + " " + enc
			}
		}
	}
	return string(replaceAll([]byte(v), creds))
}

// remember records an encoding made of the secrets of creds, so that the answers of the hosts where any of
// them may go are scrubbed of it too.
func (in *Injector) remember(creds []*secret, value, ph []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, d := range in.derived {
		if bytes.Equal(d.value, value) {
			return
		}
	}
	for _, c := range creds {
		if len(in.derived) >= maxDerived {
			in.derived = in.derived[1:]
		}
		in.derived = append(in.derived, derived{credID: c.id, value: value, ph: ph})
	}
}

// replaceAll replaces the creds' placeholders with their values in b.
func replaceAll(b []byte, creds []*secret) []byte {
	for _, c := range creds {
		if bytes.Contains(b, c.placeholder) {
			b = bytes.ReplaceAll(b, c.placeholder, c.value)
		}
	}
	return b
}
