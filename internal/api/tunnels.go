package api

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// MCP tunnels (beta mcp-tunnels-2026-06-22): a tunnel owns a domain under the operator's base domain; MCP server
// URLs under it are carried through the tunnel's connector, which authenticates with the tunnel's token, to a
// private MCP server whose TLS certificate is verified against the tunnel's CA certificates. The handlers here
// keep tunnels, their tokens and their certificates; the connector hub (TunnelRevoker) carries the traffic.

// Tunnel limits.
const (
	maxTunnelNameLen   = 255
	maxTunnelLimit     = 1000
	maxTunnelReasonLen = 1024
	// maxWorkspaceTunnels is the most active tunnels of a workspace: with the hub's 8 connectors a tunnel, one
	// workspace's connectors take at most half of a process's 1,024 connections.
	maxWorkspaceTunnels = 64
	// maxTunnelCertificatePEM is the most bytes a certificate's PEM may hold (8 KB).
	maxTunnelCertificatePEM = 8192
	// tunnelTokenName is the name the tunnel's token is sealed under, beside the tunnel's id.
	tunnelTokenName = "tunnel_token"
	// tunnelTokenPrefix starts every tunnel token (Corral tunnel token), so that one found in a log is known.
	tunnelTokenPrefix = "ctt_"
	// tunnelDomainTries is how many fresh labels a create tries when the one it drew is taken.
	tunnelDomainTries = 5
)

// TunnelRevoker drops the live connections of a tunnel's connectors (the in-process connector hub): the API
// calls it once a tunnel's token is rotated or the tunnel archived, so that the old token's connectors go at
// once instead of at their next reconnection. It must not block.
type TunnelRevoker interface {
	Revoke(tunnelID string)
}

type tunnelCreateRequest struct {
	DisplayName *string `json:"display_name"`
}

type tunnelRotateRequest struct {
	Reason *string `json:"reason"`
}

type tunnelCertificateCreateRequest struct {
	CACertificatePEM *string `json:"ca_certificate_pem"`
}

var errNoSealerTunnel = &apiError{status: http.StatusInternalServerError, typ: apitype.ErrAPI,
	msg: "this server has no vault key configured; it cannot keep tunnel tokens"}

// tunnelArchived is the refusal of what an archived tunnel cannot do: its token is invalid for good, and it takes
// no certificate.
func tunnelArchived(id, what string) error {
	return invalidCode("tunnel_archived", "tunnel %s is archived: %s", id, what)
}

// checkTunnelDomain normalises a base domain: lower case, no leading or trailing dot, labels of letters, digits
// and hyphens, short enough for a tunnel's label in front of it.
func checkTunnelDomain(d string) (string, error) {
	d = strings.ToLower(strings.Trim(d, "."))
	if d == "" || len(d) > 253-17 {
		return "", fmt.Errorf("api: tunnel domain %q: not a domain name of 1 to %d characters", d, 253-17)
	}
	for l := range strings.SplitSeq(d, ".") {
		ok := l != "" && len(l) <= 63 && l[0] != '-' && l[len(l)-1] != '-'
		for _, c := range l {
			ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
		}
		if !ok {
			return "", fmt.Errorf("api: tunnel domain %q: label %q is not a DNS label", d, l)
		}
	}
	return d, nil
}

// newTunnelDomain draws a tunnel's domain: 16 characters of base32 of 80 random bits, under the base domain.
func (s *Server) newTunnelDomain() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return strings.ToLower(base32.StdEncoding.EncodeToString(b)) + "." + s.tunnelDomain
}

// newTunnelToken makes a tunnel token: its id, its sealed plaintext (under the tunnel's id) and the hex SHA-256
// by which a connector's token finds its tunnel. The plaintext is returned too, for the answer.
func (s *Server) newTunnelToken(tunnelID string) (id, plain, hash string, sealed *store.SealedSecret, err error) {
	if s.sealer == nil {
		return "", "", "", nil, errNoSealerTunnel
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	plain = tunnelTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	sealed, err = s.sealer.Seal(tunnelID, tunnelTokenName, []byte(plain))
	if err != nil {
		return "", "", "", nil, fmt.Errorf("seal the token of tunnel %s: %w", tunnelID, err)
	}
	return apitype.NewID(apitype.PrefixTunnelToken), plain, apitype.HashAPIKey(plain), sealed, nil
}

// revokeTunnel tells the connector hub to drop the tunnel's connectors.
func (s *Server) revokeTunnel(id string) {
	if s.tunnels != nil {
		s.tunnels.Revoke(id)
	}
}

func viewTunnel(rec *store.TunnelRecord) *apitype.Tunnel {
	t := rec.Tunnel
	return &t
}

func viewTunnelCertificate(rec *store.TunnelCertificateRecord) *apitype.TunnelCertificate {
	c := rec.TunnelCertificate
	return &c
}

// decodeOptionalBody decodes a JSON body that may be left out (an empty body is an empty object).
func decodeOptionalBody(r *http.Request, v any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decodeJSON(body, v)
}

// tunnelCreate makes a tunnel with a fresh domain and token. A drawn domain that is taken (an 80-bit collision)
// is drawn again; the SDKs retry a create that failed with a 5xx, so the create does its own retries only for
// what it knows is safe.
func (s *Server) tunnelCreate(w http.ResponseWriter, r *http.Request) error {
	var req tunnelCreateRequest
	if err := decodeOptionalBody(r, &req); err != nil {
		return err
	}
	if req.DisplayName != nil {
		if *req.DisplayName == "" {
			return invalid("display_name", "must be 1 to %d characters (null or left out for none)", maxTunnelNameLen)
		}
		if err := checkString("display_name", *req.DisplayName, true, maxTunnelNameLen); err != nil {
			return err
		}
	}
	active, err := s.store.TunnelList(r.Context(), inWorkspace(r, &store.ListParams{Limit: maxWorkspaceTunnels}))
	if err != nil {
		return err
	}
	if len(active) >= maxWorkspaceTunnels {
		return invalid("", "the workspace has %d active tunnels, the most it may have: archive one first", len(active))
	}
	id := apitype.NewID(apitype.PrefixTunnel)
	tokenID, _, hash, sealed, err := s.newTunnelToken(id)
	if err != nil {
		return err
	}
	rec := &store.TunnelRecord{
		Tunnel:  apitype.Tunnel{Type: apitype.ObjectTunnel, ID: id, DisplayName: req.DisplayName, CreatedAt: s.now()},
		TokenID: tokenID, TokenHash: hash, Token: *sealed,
	}
	for try := 1; ; try++ {
		rec.Domain = s.newTunnelDomain()
		if err := s.own(r.Context(), rec.ID); err != nil {
			return err
		}
		err = s.store.TunnelCreate(r.Context(), rec)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrConflict) || try == tunnelDomainTries {
			return fmt.Errorf("create tunnel %s: %w", id, err)
		}
	}
	return writeJSON(w, http.StatusOK, viewTunnel(rec))
}

func (s *Server) tunnelGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("tunnel_id")
	rec, err := s.store.TunnelGet(r.Context(), id)
	if err != nil {
		return lookup(err, "tunnel", id)
	}
	return writeJSON(w, http.StatusOK, viewTunnel(rec))
}

// tunnelList lists the tunnels, newest first.
func (s *Server) tunnelList(w http.ResponseWriter, r *http.Request) error {
	lp, limit, c, err := listParams(newQuery(r.URL), defaultLimit, maxTunnelLimit)
	if err != nil {
		return err
	}
	lp.Desc = true
	recs, next, _, err := listByCreated(lp, limit, c, false,
		func(p *store.ListParams) ([]store.TunnelRecord, error) {
			return s.store.TunnelList(r.Context(), inWorkspace(r, p))
		},
		func(t *store.TunnelRecord) (time.Time, string) { return t.CreatedAt, t.ID })
	if err != nil {
		return err
	}
	data := make([]apitype.Tunnel, len(recs))
	for i := range recs {
		data[i] = *viewTunnel(&recs[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Tunnel]{Data: data, NextPage: next})
}

// tunnelArchive archives a tunnel for good (idempotent): its certificates are archived with it, its token no
// longer authenticates, its domain is never given to another tunnel, and its connectors are dropped.
func (s *Server) tunnelArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("tunnel_id")
	now := s.now()
	rec, err := s.store.TunnelUpdate(r.Context(), id, func(t *store.TunnelRecord) error {
		if t.ArchivedAt == nil {
			t.ArchivedAt = &now
		}
		return nil
	})
	if err != nil {
		return lookup(err, "tunnel", id)
	}
	s.revokeTunnel(id)
	return writeJSON(w, http.StatusOK, viewTunnel(rec))
}

// tunnelRevealToken shows the tunnel's current token (the same until it is rotated).
func (s *Server) tunnelRevealToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("tunnel_id")
	rec, err := s.store.TunnelGet(r.Context(), id)
	if err != nil {
		return lookup(err, "tunnel", id)
	}
	if rec.ArchivedAt != nil {
		return tunnelArchived(id, "its token is no longer valid and cannot be revealed")
	}
	if s.sealer == nil {
		return errNoSealerTunnel
	}
	if rec.Token.CredentialID != id || rec.Token.Name != tunnelTokenName {
		return fmt.Errorf("tunnel %s: its token is sealed for %s/%s", id, rec.Token.CredentialID, rec.Token.Name)
	}
	plain, err := s.sealer.Open(&rec.Token)
	if err != nil {
		return fmt.Errorf("open the token of tunnel %s: %w", id, err)
	}
	return writeJSON(w, http.StatusOK, &apitype.TunnelToken{Type: apitype.ObjectTunnelToken, ID: rec.TokenID, TunnelToken: string(plain)})
}

// tunnelRotateToken replaces the tunnel's token: the old one authenticates no new connection, and the
// connectors connected with it are dropped.
func (s *Server) tunnelRotateToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("tunnel_id")
	var req tunnelRotateRequest
	if err := decodeOptionalBody(r, &req); err != nil {
		return err
	}
	if req.Reason != nil {
		if err := checkString("reason", *req.Reason, false, maxTunnelReasonLen); err != nil {
			return err
		}
	}
	tokenID, plain, hash, sealed, err := s.newTunnelToken(id)
	if err != nil {
		return err
	}
	if _, err := s.store.TunnelUpdate(r.Context(), id, func(t *store.TunnelRecord) error {
		if t.ArchivedAt != nil {
			return tunnelArchived(id, "its token cannot be rotated")
		}
		t.TokenID, t.TokenHash, t.Token = tokenID, hash, *sealed
		return nil
	}); err != nil {
		return lookup(err, "tunnel", id)
	}
	s.revokeTunnel(id)
	reason := ""
	if req.Reason != nil {
		reason = *req.Reason
	}
	s.log.Info("api: tunnel token rotated", "request_id", requestID(r.Context()), "tunnel", id, "token", tokenID, "reason", reason)
	return writeJSON(w, http.StatusOK, &apitype.TunnelToken{Type: apitype.ObjectTunnelToken, ID: tokenID, TunnelToken: plain})
}

// parseCACertificate reads a tunnel certificate's PEM: at most maxTunnelCertificatePEM bytes holding exactly one
// CERTIFICATE block and nothing else (never a private key), an X.509 CA certificate that has not expired.
func parseCACertificate(p, s string, now time.Time) (*x509.Certificate, error) {
	if strings.TrimSpace(s) == "" {
		return nil, invalid(p, "required: one PEM block of type CERTIFICATE")
	}
	if len(s) > maxTunnelCertificatePEM {
		return nil, invalid(p, "%d bytes, more than the %d (8 KB) a certificate's PEM may hold", len(s), maxTunnelCertificatePEM)
	}
	var blocks []*pem.Block
	rest := []byte(s)
	for {
		b, r := pem.Decode(rest)
		if b == nil {
			break
		}
		blocks, rest = append(blocks, b), r
	}
	for _, b := range blocks {
		if strings.Contains(b.Type, "PRIVATE KEY") {
			return nil, invalid(p, "holds a private key (a %s block): send only the CA certificate, never a key", b.Type)
		}
	}
	// pem.Decode skips what is not a block, a broken block before the certificate included: so besides the one
	// block and the white space around it, s must have no other BEGIN line.
	switch {
	case len(blocks) == 0:
		return nil, invalid(p, "not PEM: expected one -----BEGIN CERTIFICATE----- block")
	case len(blocks) > 1:
		return nil, invalid(p, "holds %d PEM blocks: send exactly one CA certificate (a tunnel holds at most %d; add each on its own)",
			len(blocks), store.MaxTunnelCertificates)
	case blocks[0].Type != "CERTIFICATE":
		return nil, invalid(p, "a PEM block of type %s: expected CERTIFICATE", blocks[0].Type)
	case len(blocks[0].Headers) > 0:
		return nil, invalid(p, "the CERTIFICATE block has PEM headers: expected none")
	case len(bytes.TrimSpace(rest)) > 0 || !strings.HasPrefix(strings.TrimSpace(s), "-----BEGIN ") ||
		strings.Count(s, "-----BEGIN") > 1:
		return nil, invalid(p, "holds text outside its PEM block: send the CERTIFICATE block only")
	}
	cert, err := x509.ParseCertificate(blocks[0].Bytes)
	if err != nil {
		return nil, invalid(p, "not an X.509 certificate: %v", err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, invalid(p, "not a CA certificate (its basic constraints do not say CA:TRUE): register the CA that signed the MCP server's certificate, not the server's own")
	}
	if now.After(cert.NotAfter) {
		return nil, invalid(p, "the certificate expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

// tunnelCertificateCreate registers a CA certificate on an active tunnel: at most store.MaxTunnelCertificates
// active at once (409 beyond: archive one first).
func (s *Server) tunnelCertificateCreate(w http.ResponseWriter, r *http.Request) error {
	tunnelID := r.PathValue("tunnel_id")
	var req tunnelCertificateCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.CACertificatePEM == nil {
		return invalid("ca_certificate_pem", "required: one PEM block of type CERTIFICATE")
	}
	now := s.now()
	cert, err := parseCACertificate("ca_certificate_pem", *req.CACertificatePEM, now)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(cert.Raw)
	expires := cert.NotAfter.UTC()
	rec := &store.TunnelCertificateRecord{
		TunnelCertificate: apitype.TunnelCertificate{Type: apitype.ObjectTunnelCertificate, ID: apitype.NewID(apitype.PrefixTunnelCert),
			TunnelID: tunnelID, Fingerprint: hex.EncodeToString(sum[:]), CreatedAt: now, ExpiresAt: &expires},
		PEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})),
	}
	switch err := s.store.TunnelCertificateCreate(r.Context(), rec); {
	case errors.Is(err, store.ErrTunnelArchived):
		return tunnelArchived(tunnelID, "it takes no new certificate")
	case errors.Is(err, store.ErrTunnelCertificateLimit):
		return conflict("tunnel %s already has %d active certificates, the most it may have: archive one first",
			tunnelID, store.MaxTunnelCertificates)
	case err != nil:
		return lookup(err, "tunnel", tunnelID)
	}
	return writeJSON(w, http.StatusOK, viewTunnelCertificate(rec))
}

func (s *Server) tunnelCertificateGet(w http.ResponseWriter, r *http.Request) error {
	tunnelID, id := r.PathValue("tunnel_id"), r.PathValue("certificate_id")
	rec, err := s.store.TunnelCertificateGet(r.Context(), tunnelID, id)
	if err != nil {
		return lookup(err, "tunnel certificate", id)
	}
	return writeJSON(w, http.StatusOK, viewTunnelCertificate(rec))
}

// tunnelCertificateList lists a tunnel's certificates, newest first.
func (s *Server) tunnelCertificateList(w http.ResponseWriter, r *http.Request) error {
	tunnelID, ctx := r.PathValue("tunnel_id"), r.Context()
	lp, limit, c, err := listParams(newQuery(r.URL), defaultLimit, maxTunnelLimit)
	if err != nil {
		return err
	}
	if _, err := s.store.TunnelGet(ctx, tunnelID); err != nil {
		return lookup(err, "tunnel", tunnelID)
	}
	lp.Desc = true
	recs, next, _, err := listByCreated(lp, limit, c, false,
		func(p *store.ListParams) ([]store.TunnelCertificateRecord, error) {
			return s.store.TunnelCertificateList(ctx, tunnelID, p)
		},
		func(c *store.TunnelCertificateRecord) (time.Time, string) { return c.CreatedAt, c.ID })
	if err != nil {
		return err
	}
	data := make([]apitype.TunnelCertificate, len(recs))
	for i := range recs {
		data[i] = *viewTunnelCertificate(&recs[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.TunnelCertificate]{Data: data, NextPage: next})
}

// tunnelCertificateArchive archives a certificate (idempotent); the MCP proxy no longer trusts it.
func (s *Server) tunnelCertificateArchive(w http.ResponseWriter, r *http.Request) error {
	tunnelID, id := r.PathValue("tunnel_id"), r.PathValue("certificate_id")
	rec, err := s.store.TunnelCertificateArchive(r.Context(), tunnelID, id)
	if err != nil {
		return lookup(err, "tunnel certificate", id)
	}
	return writeJSON(w, http.StatusOK, viewTunnelCertificate(rec))
}
