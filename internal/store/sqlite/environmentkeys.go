package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

const envKeyColumns = `id, environment_id, name, hash, hint, created_at, revoked_at`

// EnvironmentKeyCreate stores a key (its hash, never its secret).
func (s *Store) EnvironmentKeyCreate(ctx context.Context, k *apitype.EnvironmentKey) error {
	err := s.write(ctx, func(w *wtx) error {
		var one int
		if err := w.queryRow(`SELECT 1 FROM environments WHERE id = ?`, k.EnvironmentID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		} else if err != nil {
			return err
		}
		_, err := w.exec(`INSERT INTO environment_keys (`+envKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			k.ID, k.EnvironmentID, k.Name, k.Hash, k.Hint, micros(k.CreatedAt), nullMicros(k.RevokedAt))
		if isConstraint(err) {
			return store.ErrConflict
		}
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: create environment key %s: %w", k.ID, err)
	}
	return nil
}

// EnvironmentKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) EnvironmentKeyByHash(ctx context.Context, hash string) (*apitype.EnvironmentKey, error) {
	k, err := scanEnvKey(s.readRow(ctx, `SELECT `+envKeyColumns+` FROM environment_keys
		WHERE hash = ? AND revoked_at IS NULL`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: environment key by hash: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr("environment key by hash", err)
	}
	return k, nil
}

// EnvironmentKeyList lists an environment's keys, oldest first.
func (s *Store) EnvironmentKeyList(ctx context.Context, environmentID string) ([]apitype.EnvironmentKey, error) {
	rows, err := s.readQuery(ctx, `SELECT `+envKeyColumns+` FROM environment_keys WHERE environment_id = ?
		ORDER BY created_at, id`, environmentID)
	if err != nil {
		return nil, s.readErr("list environment keys", err)
	}
	out, err := collect(rows, scanEnvKey)
	if err != nil {
		return nil, s.readErr("list environment keys", err)
	}
	return out, nil
}

// EnvironmentKeyRevoke sets revoked_at (once).
func (s *Store) EnvironmentKeyRevoke(ctx context.Context, environmentID, id string, at time.Time) error {
	err := s.write(ctx, func(w *wtx) error {
		n, err := w.execN(`UPDATE environment_keys SET revoked_at = coalesce(revoked_at, ?) WHERE environment_id = ? AND id = ?`,
			micros(at), environmentID, id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		if err != nil {
			return err
		}
		_, err = w.exec(`UPDATE work_items SET token_hash = NULL WHERE environment_id = ? AND key_id = ?`, environmentID, id)
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: revoke environment key %s: %w", id, err)
	}
	return nil
}

func scanEnvKey(row scanner) (*apitype.EnvironmentKey, error) {
	k := apitype.EnvironmentKey{Type: "environment_key"}
	var created int64
	var revoked sql.NullInt64
	if err := row.Scan(&k.ID, &k.EnvironmentID, &k.Name, &k.Hash, &k.Hint, &created, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMicros(created)
	k.RevokedAt = timePtr(revoked)
	return &k, nil
}
