package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
)

var apiKeys = &table[apitype.APIKey]{
	what: "api key", name: "api_keys", alias: "k",
	sel:  `SELECT k.id, k.name, k.hash, k.hint, k.created_at, k.revoked_at FROM api_keys k`,
	scan: scanAPIKey,
}

// APIKeyCreate stores a hashed API key; ErrConflict if the id or hash exists.
func (s *Store) APIKeyCreate(ctx context.Context, k *apitype.APIKey) error {
	return apiKeys.create(ctx, s, `INSERT INTO api_keys (id, name, hash, hint, created_at, revoked_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, k.ID, k.Name, k.Hash, k.Hint, k.CreatedAt, k.RevokedAt)
}

// APIKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*apitype.APIKey, error) {
	return apiKeys.get(ctx, s, "k.hash = $1 AND k.revoked_at IS NULL", hash)
}

// APIKeyList lists every key, revoked ones included, oldest first.
func (s *Store) APIKeyList(ctx context.Context) ([]apitype.APIKey, error) {
	return apiKeys.rows(ctx, s, "api key list", apiKeys.sel+` ORDER BY k.created_at, k.id`)
}

// APIKeyRevoke marks a key revoked (keeping the first revocation time).
func (s *Store) APIKeyRevoke(ctx context.Context, id string, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.dbErr("api key revoke", apiKeys.stamp(ctx, s.pool, "revoked_at", at, "id = $2", id))
}

func scanAPIKey(row pgx.Row) (*apitype.APIKey, error) {
	var k apitype.APIKey
	if err := row.Scan(&k.ID, &k.Name, &k.Hash, &k.Hint, &k.CreatedAt, &k.RevokedAt); err != nil {
		return nil, err
	}
	k.CreatedAt, k.RevokedAt = k.CreatedAt.UTC(), utc(k.RevokedAt)
	return &k, nil
}
