package apitype

import "time"

// DefaultTunnelDomain is the base domain tunnels' domains are drawn under when the operator names none
// (--tunnel-domain): .internal is reserved for private use, so a tunnel's domain shadows no public name.
const DefaultTunnelDomain = "tunnels.corral.internal"

// Tunnel is an MCP tunnel (beta mcp-tunnels-2026-06-22): MCP server URLs whose host is under Domain are carried
// through the tunnel's connector (`corral tunnel`) to a private MCP server, over TLS verified against the
// tunnel's CA certificates.
type Tunnel struct {
	Type        ObjectType `json:"type"` // "tunnel"
	ID          string     `json:"id"`
	DisplayName *string    `json:"display_name"`
	// Domain is the tunnel's own domain under the operator's base domain (--tunnel-domain); never reused, even
	// once the tunnel is archived.
	Domain     string     `json:"domain"`
	CreatedAt  time.Time  `json:"created_at"`
	ArchivedAt *time.Time `json:"archived_at"`
}

// TunnelToken is the secret a tunnel's connector authenticates with (reveal_token, rotate_token). ID changes on
// each rotation.
type TunnelToken struct {
	Type        ObjectType `json:"type"` // "tunnel_token"
	ID          string     `json:"id"`
	TunnelToken string     `json:"tunnel_token"`
}

// TunnelCertificate is a CA certificate registered on a tunnel: the MCP proxy verifies the private MCP
// server's TLS certificate against the tunnel's active ones.
type TunnelCertificate struct {
	Type     ObjectType `json:"type"` // "tunnel_certificate"
	ID       string     `json:"id"`
	TunnelID string     `json:"tunnel_id"`
	// Fingerprint is the lowercase hex SHA-256 of the certificate's DER.
	Fingerprint string     `json:"fingerprint"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
	ArchivedAt  *time.Time `json:"archived_at"`
}
