package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// APIKeyCreate stores a hashed API key; ErrConflict if the id or hash exists.
func (s *Store) APIKeyCreate(ctx context.Context, k *apitype.APIKey) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6)`,
		k.ID, k.Name, k.Hash, k.Hint, k.CreatedAt, k.RevokedAt)
	return s.dbErr("api key create", err)
}

const apiKeyColumns = `id, name, hash, hint, created_at, revoked_at`

func scanAPIKey(row pgx.Row) (apitype.APIKey, error) {
	var k apitype.APIKey
	err := row.Scan(&k.ID, &k.Name, &k.Hash, &k.Hint, &k.CreatedAt, &k.RevokedAt)
	k.CreatedAt = k.CreatedAt.UTC()
	k.RevokedAt = utc(k.RevokedAt)
	return k, err
}

// APIKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*apitype.APIKey, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	k, err := scanAPIKey(s.pool.QueryRow(ctx,
		`SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = $1 AND revoked_at IS NULL`, hash))
	if err != nil {
		return nil, s.dbErr("api key by hash", err)
	}
	return &k, nil
}

// APIKeyList lists every key, revoked ones included, oldest first.
func (s *Store) APIKeyList(ctx context.Context) ([]apitype.APIKey, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, s.dbErr("api key list", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (apitype.APIKey, error) { return scanAPIKey(row) })
	if err != nil {
		return nil, s.dbErr("api key list", err)
	}
	if keys == nil {
		keys = []apitype.APIKey{}
	}
	return keys, nil
}

// APIKeyRevoke marks a key revoked (keeping the first revocation time).
func (s *Store) APIKeyRevoke(ctx context.Context, id string, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1`, id, at)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return s.dbErr("api key revoke", err)
}
