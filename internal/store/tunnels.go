package store

import (
	"context"
	"errors"

	"github.com/corralhq/corral/internal/apitype"
)

// TunnelStore keeps MCP tunnels and their CA certificates.
//
// A tunnel's domain is unique among all tunnels, archived ones included: a domain is never reused. Its token is
// kept sealed (reveal_token opens it) beside the hex SHA-256 of its plaintext, by which a connector's token
// finds its tunnel. At most MaxTunnelCertificates certificates of a tunnel are active (not archived), checked in
// the transaction that adds one.
type TunnelStore interface {
	// TunnelCreate stores a new tunnel; ErrConflict if the id, the domain or the token hash exists.
	TunnelCreate(ctx context.Context, t *TunnelRecord) error
	// TunnelGet returns a tunnel, archived or not; ErrNotFound if there is none.
	TunnelGet(ctx context.Context, id string) (*TunnelRecord, error)
	// TunnelByDomain returns the tunnel whose domain is domain (lower case), archived or not; ErrNotFound.
	TunnelByDomain(ctx context.Context, domain string) (*TunnelRecord, error)
	// TunnelByTokenHash returns the tunnel whose current token hashes to hash, archived or not; ErrNotFound
	// (a rotated token's hash finds nothing).
	TunnelByTokenHash(ctx context.Context, hash string) (*TunnelRecord, error)
	// TunnelUpdate reads the tunnel, applies fn and writes the result, atomically (the Update rule;
	// KeepTunnel). Archiving a tunnel (ArchivedAt set by fn) archives its active certificates at the same time,
	// in the same transaction.
	TunnelUpdate(ctx context.Context, id string, fn func(*TunnelRecord) error) (*TunnelRecord, error)
	// TunnelList lists tunnels by (created_at, id) with p's filters (IncludeArchived).
	TunnelList(ctx context.Context, p *ListParams) ([]TunnelRecord, error)

	// TunnelCertificateCreate stores a new certificate of an active tunnel: ErrNotFound if the tunnel does not
	// exist, ErrTunnelArchived if it is archived, ErrTunnelCertificateLimit if it already has
	// MaxTunnelCertificates active ones, ErrConflict if the id exists.
	TunnelCertificateCreate(ctx context.Context, c *TunnelCertificateRecord) error
	// TunnelCertificateGet returns a certificate of the tunnel, archived or not; ErrNotFound if there is none (or
	// it belongs to another tunnel).
	TunnelCertificateGet(ctx context.Context, tunnelID, id string) (*TunnelCertificateRecord, error)
	// TunnelCertificateList lists the tunnel's certificates by (created_at, id) with p's filters.
	TunnelCertificateList(ctx context.Context, tunnelID string, p *ListParams) ([]TunnelCertificateRecord, error)
	// TunnelCertificateArchive archives a certificate (idempotent: an archived one is returned as it is);
	// ErrNotFound if the tunnel has no such certificate.
	TunnelCertificateArchive(ctx context.Context, tunnelID, id string) (*TunnelCertificateRecord, error)
}

// MaxTunnelCertificates is how many certificates of a tunnel may be active at once (two: one to rotate to).
const MaxTunnelCertificates = 2

var (
	// ErrTunnelArchived: the tunnel is archived (no certificate may be added to it).
	ErrTunnelArchived = errors.New("store: tunnel archived")
	// ErrTunnelCertificateLimit: the tunnel already has MaxTunnelCertificates active certificates.
	ErrTunnelCertificateLimit = errors.New("store: tunnel has the most active certificates it may have")
)

// TunnelRecord is a tunnel with what only the server sees: its current token, sealed, and the token's hash.
type TunnelRecord struct {
	apitype.Tunnel
	// TokenID is the id of the current token (apitype.TunnelToken.ID); it changes on each rotation.
	TokenID string
	// TokenHash is the current token's hash (apitype.HashAPIKey: lowercase hex SHA-256).
	TokenHash string
	// Token is the current token, sealed by the vault under (tunnel id, "tunnel_token").
	Token SealedSecret
}

// TunnelCertificateRecord is a tunnel's CA certificate with its PEM, which only the MCP proxy reads.
type TunnelCertificateRecord struct {
	apitype.TunnelCertificate
	PEM string
}

// KeepTunnel is what TunnelUpdate keeps of the tunnel read: its id, domain and creation, and its archival
// (an archived tunnel stays archived, and no token is rotated into it: only its sealing may change, as a vault
// key rotation rewraps it).
func KeepTunnel(next, cur *TunnelRecord) {
	next.ID, next.Domain, next.CreatedAt, next.Type = cur.ID, cur.Domain, cur.CreatedAt, cur.Type
	if cur.ArchivedAt != nil {
		next.ArchivedAt = cur.ArchivedAt
		next.TokenID, next.TokenHash = cur.TokenID, cur.TokenHash
	}
}
