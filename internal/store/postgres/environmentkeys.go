package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var envKeys = &table[apitype.EnvironmentKey]{
	what: "environment key", name: "environment_keys", alias: "k",
	sel:  `SELECT k.id, k.environment_id, k.name, k.hash, k.hint, k.created_at, k.revoked_at FROM environment_keys k`,
	scan: scanEnvKey,
}

// EnvironmentKeyCreate stores a hashed environment key; ErrNotFound for an unknown environment, ErrConflict if
// the id or hash exists.
func (s *Store) EnvironmentKeyCreate(ctx context.Context, k *apitype.EnvironmentKey) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO environment_keys (id, environment_id, name, hash, hint, created_at, revoked_at)
		SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM environments WHERE id = $2)`,
		k.ID, k.EnvironmentID, k.Name, k.Hash, k.Hint, k.CreatedAt, k.RevokedAt)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return s.dbErr("environment key create", err)
}

// EnvironmentKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) EnvironmentKeyByHash(ctx context.Context, hash string) (*apitype.EnvironmentKey, error) {
	return envKeys.get(ctx, s, "k.hash = $1 AND k.revoked_at IS NULL", hash)
}

// EnvironmentKeyList lists an environment's keys, revoked ones included, oldest first.
func (s *Store) EnvironmentKeyList(ctx context.Context, environmentID string) ([]apitype.EnvironmentKey, error) {
	return envKeys.rows(ctx, s, "environment key list", envKeys.sel+` WHERE k.environment_id = $1
		ORDER BY k.created_at, k.id`, environmentID)
}

// EnvironmentKeyRevoke marks a key revoked (keeping the first revocation time) and ends the sessions tokens of
// the items polled with the key.
func (s *Store) EnvironmentKeyRevoke(ctx context.Context, environmentID, id string, at time.Time) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := envKeys.stamp(ctx, tx, "revoked_at", at, "environment_id = $2 AND id = $3", environmentID, id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE work_items SET token_hash = NULL WHERE environment_id = $1 AND key_id = $2`, environmentID, id)
		return err
	})
	return s.dbErr("environment key revoke", err)
}

func scanEnvKey(row pgx.Row) (*apitype.EnvironmentKey, error) {
	k := apitype.EnvironmentKey{Type: apitype.ObjectEnvironmentKey}
	if err := row.Scan(&k.ID, &k.EnvironmentID, &k.Name, &k.Hash, &k.Hint, &k.CreatedAt, &k.RevokedAt); err != nil {
		return nil, err
	}
	k.CreatedAt, k.RevokedAt = k.CreatedAt.UTC(), utc(k.RevokedAt)
	return &k, nil
}
