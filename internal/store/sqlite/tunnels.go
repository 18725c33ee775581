package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var (
	// tunnels keep their domain and current token's hash in unique columns beside the document; archiving one
	// (put from an active tunnel) stamps its active certificates with the same time.
	tunnels = &table[store.TunnelRecord]{
		what: "tunnel", name: "tunnels", alias: "t", archivable: true,
		sel:  `SELECT t.doc FROM tunnels t`,
		scan: scanDoc[store.TunnelRecord]("tunnel", nil),
		put: func(w *wtx, t, cur *store.TunnelRecord) error {
			doc, err := json.Marshal(t)
			if err != nil {
				return err
			}
			if _, err := w.exec(`UPDATE tunnels SET archived_at = ?, token_hash = ?, doc = ? WHERE id = ?`,
				nullMicros(t.ArchivedAt), t.TokenHash, doc, t.ID); err != nil {
				return err
			}
			if t.ArchivedAt == nil || cur.ArchivedAt != nil {
				return nil
			}
			_, err = w.exec(`UPDATE tunnel_certificates SET archived_at = ? WHERE tunnel_id = ? AND archived_at IS NULL`,
				micros(*t.ArchivedAt), t.ID)
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
		return writeErr(err, "create tunnel %s", t.ID)
	}
	return tunnels.create(ctx, s, t.ID, `INSERT INTO tunnels (id, domain, token_hash, created_at, archived_at, doc)
		VALUES (?, ?, ?, ?, ?, ?)`, t.ID, t.Domain, t.TokenHash, micros(t.CreatedAt), nullMicros(t.ArchivedAt), doc)
}

// TunnelGet returns a tunnel.
func (s *Store) TunnelGet(ctx context.Context, id string) (*store.TunnelRecord, error) {
	return tunnels.get(ctx, s, id, "t.id = ?", id)
}

// TunnelByDomain returns the tunnel of a domain, from the unique index tunnels_domain.
func (s *Store) TunnelByDomain(ctx context.Context, domain string) (*store.TunnelRecord, error) {
	return tunnels.get(ctx, s, "of domain "+domain, "t.domain = ?", domain)
}

// TunnelByTokenHash returns the tunnel of a current token, from the unique index tunnels_token_hash.
func (s *Store) TunnelByTokenHash(ctx context.Context, hash string) (*store.TunnelRecord, error) {
	return tunnels.get(ctx, s, "by token hash", "t.token_hash = ?", hash)
}

// TunnelUpdate applies fn to the tunnel and stores the result, atomically; archiving it archives its active
// certificates in the same write.
func (s *Store) TunnelUpdate(ctx context.Context, id string,
	fn func(*store.TunnelRecord) error) (*store.TunnelRecord, error) {
	return tunnels.update(ctx, s, id, fn, store.KeepTunnel)
}

// TunnelList lists tunnels.
func (s *Store) TunnelList(ctx context.Context, p *store.ListParams) ([]store.TunnelRecord, error) {
	return tunnels.list(ctx, s, &filter{}, p)
}

// TunnelCertificateCreate stores a new certificate of an active tunnel that has fewer than
// store.MaxTunnelCertificates active ones: the single writer runs one write at a time, so the count it reads
// stands until the insert.
func (s *Store) TunnelCertificateCreate(ctx context.Context, c *store.TunnelCertificateRecord) error {
	doc, err := json.Marshal(c)
	if err != nil {
		return writeErr(err, "create tunnel certificate %s", c.ID)
	}
	err = s.write(ctx, func(w *wtx) error {
		var archived sql.NullInt64
		err := w.queryRow(`SELECT archived_at FROM tunnels WHERE id = ?`, c.TunnelID).Scan(&archived)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if archived.Valid {
			return store.ErrTunnelArchived
		}
		var n int
		if err := w.queryRow(`SELECT count(*) FROM tunnel_certificates WHERE tunnel_id = ? AND archived_at IS NULL`,
			c.TunnelID).Scan(&n); err != nil {
			return err
		}
		if n >= store.MaxTunnelCertificates {
			return store.ErrTunnelCertificateLimit
		}
		_, err = w.exec(`INSERT INTO tunnel_certificates (id, tunnel_id, created_at, archived_at, doc)
			VALUES (?, ?, ?, ?, ?)`, c.ID, c.TunnelID, micros(c.CreatedAt), nullMicros(c.ArchivedAt), doc)
		return err
	}, nil)
	return writeErr(err, "create tunnel certificate %s", c.ID)
}

// TunnelCertificateGet returns a certificate of the tunnel.
func (s *Store) TunnelCertificateGet(ctx context.Context, tunnelID, id string) (*store.TunnelCertificateRecord, error) {
	return tunnelCertificates.get(ctx, s, id, "c.tunnel_id = ? AND c.id = ?", tunnelID, id)
}

// TunnelCertificateList lists the tunnel's certificates.
func (s *Store) TunnelCertificateList(ctx context.Context, tunnelID string,
	p *store.ListParams) ([]store.TunnelCertificateRecord, error) {
	f := &filter{}
	f.add("c.tunnel_id = ?", tunnelID)
	return tunnelCertificates.list(ctx, s, f, p)
}

// TunnelCertificateArchive sets the certificate's archived_at (once) and returns it.
func (s *Store) TunnelCertificateArchive(ctx context.Context, tunnelID, id string) (*store.TunnelCertificateRecord, error) {
	at := apitype.Now()
	return writeResult(ctx, s, func(w *wtx) (*store.TunnelCertificateRecord, error) {
		if err := tunnelCertificates.stamp(w, "archived_at", at, "tunnel_id = ? AND id = ?", tunnelID, id); err != nil {
			return nil, err
		}
		return tunnelCertificates.read(w, "c.tunnel_id = ? AND c.id = ?", tunnelID, id)
	}, "archive tunnel certificate %s", id)
}
