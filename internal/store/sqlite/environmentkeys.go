package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

var envKeys = &table[apitype.EnvironmentKey]{
	what: "environment key", name: "environment_keys", alias: "k",
	sel:  `SELECT k.id, k.environment_id, k.name, k.hash, k.hint, k.created_at, k.revoked_at FROM environment_keys k`,
	scan: scanEnvKey,
}

// EnvironmentKeyCreate stores a key (its hash, never its secret); ErrNotFound for an unknown environment.
func (s *Store) EnvironmentKeyCreate(ctx context.Context, k *apitype.EnvironmentKey) error {
	err := s.write(ctx, func(w *wtx) error {
		if _, err := environments.read(w, "e.id = ?", k.EnvironmentID); err != nil {
			return err
		}
		_, err := w.exec(`INSERT INTO environment_keys (id, environment_id, name, hash, hint, created_at, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			k.ID, k.EnvironmentID, k.Name, k.Hash, k.Hint, micros(k.CreatedAt), nullMicros(k.RevokedAt))
		return err
	}, nil)
	return writeErr(err, "create environment key %s", k.ID)
}

// EnvironmentKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) EnvironmentKeyByHash(ctx context.Context, hash string) (*apitype.EnvironmentKey, error) {
	return envKeys.get(ctx, s, "by hash", "k.hash = ? AND k.revoked_at IS NULL", hash)
}

// EnvironmentKeyList lists an environment's keys, oldest first.
func (s *Store) EnvironmentKeyList(ctx context.Context, environmentID string) ([]apitype.EnvironmentKey, error) {
	return envKeys.rows(ctx, s, "list environment keys", envKeys.sel+` WHERE k.environment_id = ?
		ORDER BY k.created_at, k.id`, environmentID)
}

// EnvironmentKeyRevoke sets revoked_at (once) and ends the sessions tokens of the items polled with the key.
func (s *Store) EnvironmentKeyRevoke(ctx context.Context, environmentID, id string, at time.Time) error {
	err := s.write(ctx, func(w *wtx) error {
		if err := envKeys.stamp(w, "revoked_at", at, "environment_id = ? AND id = ?", environmentID, id); err != nil {
			return err
		}
		_, err := w.exec(`UPDATE work_items SET token_hash = NULL WHERE environment_id = ? AND key_id = ?`, environmentID, id)
		return err
	}, nil)
	return writeErr(err, "revoke environment key %s", id)
}

func scanEnvKey(row scanner) (*apitype.EnvironmentKey, error) {
	k := apitype.EnvironmentKey{Type: apitype.ObjectEnvironmentKey}
	var created int64
	var revoked sql.NullInt64
	if err := row.Scan(&k.ID, &k.EnvironmentID, &k.Name, &k.Hash, &k.Hint, &created, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMicros(created)
	k.RevokedAt = timePtr(revoked)
	return &k, nil
}
