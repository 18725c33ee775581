package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var (
	// tunnels keep their domain and current token's hash in unique columns beside the document; archiving one
	// (put from an active tunnel) stamps its active certificates with the same time.
	tunnels = &table[store.TunnelRecord]{
		what: "tunnel", name: "tunnels", alias: "t", archivable: true,
		sel:  `SELECT t.doc, t.archived_at FROM tunnels t`,
		scan: scanDoc("tunnel", func(t *store.TunnelRecord, at *time.Time) { t.ArchivedAt = at }),
		put: func(ctx context.Context, tx pgx.Tx, t, cur *store.TunnelRecord) error {
			doc, err := json.Marshal(t)
			if err != nil {
				return fmt.Errorf("encode: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE tunnels SET doc = $2, archived_at = $3, token_hash = $4 WHERE id = $1`,
				t.ID, doc, t.ArchivedAt, t.TokenHash); err != nil {
				return err
			}
			if t.ArchivedAt == nil || cur.ArchivedAt != nil {
				return nil
			}
			_, err = tx.Exec(ctx, `UPDATE tunnel_certificates SET archived_at = $2
				WHERE tunnel_id = $1 AND archived_at IS NULL`, t.ID, *t.ArchivedAt)
			return err
		},
	}
	// tunnelCertificates take their archived_at from the column, which archiving stamps.
	tunnelCertificates = &table[store.TunnelCertificateRecord]{
		what: "tunnel certificate", name: "tunnel_certificates", alias: "c", archivable: true,
		sel: `SELECT c.doc, c.archived_at FROM tunnel_certificates c`,
		scan: scanDoc("tunnel certificate", func(c *store.TunnelCertificateRecord, at *time.Time) {
			c.ArchivedAt = at
		}),
	}
)

// TunnelCreate stores a new tunnel; a taken id, domain or token hash violates a unique index.
func (s *Store) TunnelCreate(ctx context.Context, t *store.TunnelRecord) error {
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("tunnel create: encode: %w", err)
	}
	return tunnels.create(ctx, s, `INSERT INTO tunnels (id, domain, token_hash, created_at, archived_at, doc)
		VALUES ($1, $2, $3, $4, $5, $6)`, t.ID, t.Domain, t.TokenHash, t.CreatedAt, t.ArchivedAt, doc)
}

// TunnelGet returns a tunnel.
func (s *Store) TunnelGet(ctx context.Context, id string) (*store.TunnelRecord, error) {
	return tunnels.get(ctx, s, "t.id = $1", id)
}

// TunnelByDomain returns the tunnel of a domain, from the unique index tunnels_domain.
func (s *Store) TunnelByDomain(ctx context.Context, domain string) (*store.TunnelRecord, error) {
	return tunnels.get(ctx, s, "t.domain = $1", domain)
}

// TunnelByTokenHash returns the tunnel of a current token, from the unique index tunnels_token_hash.
func (s *Store) TunnelByTokenHash(ctx context.Context, hash string) (*store.TunnelRecord, error) {
	return tunnels.get(ctx, s, "t.token_hash = $1", hash)
}

// TunnelUpdate applies fn to the tunnel under a row lock and stores the result; archiving it archives its
// active certificates in the same transaction.
func (s *Store) TunnelUpdate(ctx context.Context, id string,
	fn func(*store.TunnelRecord) error) (*store.TunnelRecord, error) {
	return tunnels.update(ctx, s, id, fn, store.KeepTunnel)
}

// TunnelList lists tunnels.
func (s *Store) TunnelList(ctx context.Context, p *store.ListParams) ([]store.TunnelRecord, error) {
	return tunnels.list(ctx, s, tunnels.query(), p)
}

// TunnelCertificateCreate stores a new certificate of an active tunnel that has fewer than
// store.MaxTunnelCertificates active ones. The tunnel's row is locked first, so that two creates (or a create
// and the tunnel's archiving) take turns, and the count the second reads includes the first's certificate.
func (s *Store) TunnelCertificateCreate(ctx context.Context, c *store.TunnelCertificateRecord) error {
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("tunnel certificate create: encode: %w", err)
	}
	return s.dbErr("tunnel certificate create", s.inTx(ctx, func(tx pgx.Tx) error {
		var archived *time.Time
		if err := tx.QueryRow(ctx, `SELECT archived_at FROM tunnels WHERE id = $1 FOR UPDATE`, c.TunnelID).
			Scan(&archived); err != nil {
			return err
		}
		if archived != nil {
			return store.ErrTunnelArchived
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM tunnel_certificates WHERE tunnel_id = $1 AND archived_at IS NULL`,
			c.TunnelID).Scan(&n); err != nil {
			return err
		}
		if n >= store.MaxTunnelCertificates {
			return store.ErrTunnelCertificateLimit
		}
		_, err := tx.Exec(ctx, `INSERT INTO tunnel_certificates (id, tunnel_id, created_at, archived_at, doc)
			VALUES ($1, $2, $3, $4, $5)`, c.ID, c.TunnelID, c.CreatedAt, c.ArchivedAt, doc)
		return err
	}))
}

// TunnelCertificateGet returns a certificate of the tunnel.
func (s *Store) TunnelCertificateGet(ctx context.Context, tunnelID, id string) (*store.TunnelCertificateRecord, error) {
	return tunnelCertificates.get(ctx, s, "c.tunnel_id = $1 AND c.id = $2", tunnelID, id)
}

// TunnelCertificateList lists the tunnel's certificates.
func (s *Store) TunnelCertificateList(ctx context.Context, tunnelID string,
	p *store.ListParams) ([]store.TunnelCertificateRecord, error) {
	q := tunnelCertificates.query()
	fmt.Fprintf(&q.sql, " AND c.tunnel_id = %s", q.arg(tunnelID))
	return tunnelCertificates.list(ctx, s, q, p)
}

// TunnelCertificateArchive sets the certificate's archived_at (once) and returns it.
func (s *Store) TunnelCertificateArchive(ctx context.Context, tunnelID, id string) (*store.TunnelCertificateRecord, error) {
	at := apitype.Now()
	return txResult(ctx, s, "tunnel certificate archive", func(tx pgx.Tx) (*store.TunnelCertificateRecord, error) {
		if err := tunnelCertificates.stamp(ctx, tx, "archived_at", at, "tunnel_id = $2 AND id = $3", tunnelID, id); err != nil {
			return nil, err
		}
		return tunnelCertificates.read(ctx, tx, "", "c.tunnel_id = $1 AND c.id = $2", tunnelID, id)
	})
}
