package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

const envKeyColumns = `id, environment_id, name, hash, hint, created_at, revoked_at`

// EnvironmentKeyCreate stores a hashed environment key; ErrNotFound for an unknown environment, ErrConflict if
// the id or hash exists.
func (s *Store) EnvironmentKeyCreate(ctx context.Context, k *apitype.EnvironmentKey) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO environment_keys (`+envKeyColumns+`)
		SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM environments WHERE id = $2)`,
		k.ID, k.EnvironmentID, k.Name, k.Hash, k.Hint, k.CreatedAt, k.RevokedAt)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return s.dbErr("environment key create", err)
}

func scanEnvKey(row pgx.Row) (apitype.EnvironmentKey, error) {
	k := apitype.EnvironmentKey{Type: "environment_key"}
	err := row.Scan(&k.ID, &k.EnvironmentID, &k.Name, &k.Hash, &k.Hint, &k.CreatedAt, &k.RevokedAt)
	k.CreatedAt = k.CreatedAt.UTC()
	k.RevokedAt = utc(k.RevokedAt)
	return k, err
}

// EnvironmentKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) EnvironmentKeyByHash(ctx context.Context, hash string) (*apitype.EnvironmentKey, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	k, err := scanEnvKey(s.pool.QueryRow(ctx,
		`SELECT `+envKeyColumns+` FROM environment_keys WHERE hash = $1 AND revoked_at IS NULL`, hash))
	if err != nil {
		return nil, s.dbErr("environment key by hash", err)
	}
	return &k, nil
}

// EnvironmentKeyList lists an environment's keys, revoked ones included, oldest first.
func (s *Store) EnvironmentKeyList(ctx context.Context, environmentID string) ([]apitype.EnvironmentKey, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+envKeyColumns+` FROM environment_keys WHERE environment_id = $1
		ORDER BY created_at, id`, environmentID)
	if err != nil {
		return nil, s.dbErr("environment key list", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (apitype.EnvironmentKey, error) { return scanEnvKey(row) })
	if err != nil {
		return nil, s.dbErr("environment key list", err)
	}
	if keys == nil {
		keys = []apitype.EnvironmentKey{}
	}
	return keys, nil
}

// EnvironmentKeyRevoke marks a key revoked (keeping the first revocation time).
func (s *Store) EnvironmentKeyRevoke(ctx context.Context, environmentID, id string, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE environment_keys SET revoked_at = COALESCE(revoked_at, $3)
			WHERE environment_id = $1 AND id = $2`, environmentID, id, at)
		if err == nil && tag.RowsAffected() == 0 {
			err = store.ErrNotFound
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE work_items SET token_hash = NULL WHERE environment_id = $1 AND key_id = $2`, environmentID, id)
		return err
	})
	return s.dbErr("environment key revoke", err)
}
