package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var apiKeys = &table[apitype.APIKey]{
	what: "api key", name: "api_keys", alias: "k",
	sel:  `SELECT k.id, k.name, k.hash, k.hint, k.created_at, k.revoked_at, k.workspace_id, k.inactive FROM api_keys k`,
	scan: scanAPIKey,
	put: func(ctx context.Context, tx pgx.Tx, k, _ *apitype.APIKey) error {
		_, err := tx.Exec(ctx, `UPDATE api_keys SET name = $2, inactive = $3, revoked_at = $4 WHERE id = $1`,
			k.ID, k.Name, k.Inactive, k.RevokedAt)
		return err
	},
}

// APIKeyCreate stores a hashed API key; ErrConflict if the id or hash exists.
func (s *Store) APIKeyCreate(ctx context.Context, k *apitype.APIKey) error {
	return apiKeys.create(ctx, s, `INSERT INTO api_keys (id, name, hash, hint, created_at, revoked_at, workspace_id, inactive)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, k.ID, k.Name, k.Hash, k.Hint, k.CreatedAt, k.RevokedAt,
		k.WorkspaceID, k.Inactive)
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

// APIKeyGet returns a key.
func (s *Store) APIKeyGet(ctx context.Context, id string) (*apitype.APIKey, error) {
	return apiKeys.get(ctx, s, "k.id = $1", id)
}

// APIKeyUpdate applies fn to the key and stores its name, state and revocation, atomically.
func (s *Store) APIKeyUpdate(ctx context.Context, id string, fn func(*apitype.APIKey) error) (*apitype.APIKey, error) {
	return apiKeys.update(ctx, s, id, fn, store.KeepAPIKey)
}

func scanAPIKey(row pgx.Row) (*apitype.APIKey, error) {
	var k apitype.APIKey
	if err := row.Scan(&k.ID, &k.Name, &k.Hash, &k.Hint, &k.CreatedAt, &k.RevokedAt, &k.WorkspaceID, &k.Inactive); err != nil {
		return nil, err
	}
	k.CreatedAt, k.RevokedAt = k.CreatedAt.UTC(), utc(k.RevokedAt)
	return &k, nil
}
