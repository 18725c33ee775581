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

const apiKeyColumns = `id, name, hash, hint, created_at, revoked_at`

// APIKeyCreate stores a key (its hash, never its secret).
func (s *Store) APIKeyCreate(ctx context.Context, k *apitype.APIKey) error {
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
			k.ID, k.Name, k.Hash, k.Hint, micros(k.CreatedAt), nullMicros(k.RevokedAt))
		return err
	}, nil)
	return writeErr(err, "create api key %s", k.ID)
}

// APIKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*apitype.APIKey, error) {
	k, err := scanAPIKey(s.readRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys
		WHERE hash = ? AND revoked_at IS NULL`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: api key by hash: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr("api key by hash", err)
	}
	return k, nil
}

// APIKeyList lists every key, revoked ones included, oldest first.
func (s *Store) APIKeyList(ctx context.Context) ([]apitype.APIKey, error) {
	rows, err := s.readQuery(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, s.readErr("list api keys", err)
	}
	out, err := collect(rows, scanAPIKey)
	if err != nil {
		return nil, s.readErr("list api keys", err)
	}
	return out, nil
}

// APIKeyRevoke sets revoked_at (once).
func (s *Store) APIKeyRevoke(ctx context.Context, id string, at time.Time) error {
	err := s.write(ctx, func(w *wtx) error {
		n, err := w.execN(`UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, micros(at), id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: revoke api key %s: %w", id, err)
	}
	return nil
}

func scanAPIKey(row scanner) (*apitype.APIKey, error) {
	var k apitype.APIKey
	var created int64
	var revoked sql.NullInt64
	if err := row.Scan(&k.ID, &k.Name, &k.Hash, &k.Hint, &created, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMicros(created)
	k.RevokedAt = timePtr(revoked)
	return &k, nil
}
