package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var apiKeys = &table[apitype.APIKey]{
	what: "api key", name: "api_keys", alias: "k",
	sel:  `SELECT k.id, k.name, k.hash, k.hint, k.created_at, k.revoked_at, k.workspace_id, k.inactive FROM api_keys k`,
	scan: scanAPIKey,
	put: func(w *wtx, k, _ *apitype.APIKey) error {
		_, err := w.exec(`UPDATE api_keys SET name = ?, inactive = ?, revoked_at = ? WHERE id = ?`,
			k.Name, k.Inactive, nullMicros(k.RevokedAt), k.ID)
		return err
	},
}

// APIKeyCreate stores a key (its hash, never its secret).
func (s *Store) APIKeyCreate(ctx context.Context, k *apitype.APIKey) error {
	return apiKeys.create(ctx, s, k.ID, `INSERT INTO api_keys (id, name, hash, hint, created_at, revoked_at, workspace_id, inactive)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, k.ID, k.Name, k.Hash, k.Hint, micros(k.CreatedAt), nullMicros(k.RevokedAt),
		k.WorkspaceID, k.Inactive)
}

// APIKeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*apitype.APIKey, error) {
	return apiKeys.get(ctx, s, "by hash", "k.hash = ? AND k.revoked_at IS NULL", hash)
}

// APIKeyList lists every key, revoked ones included, oldest first.
func (s *Store) APIKeyList(ctx context.Context) ([]apitype.APIKey, error) {
	return apiKeys.rows(ctx, s, "list api keys", apiKeys.sel+` ORDER BY k.created_at, k.id`)
}

// APIKeyRevoke sets revoked_at (once).
func (s *Store) APIKeyRevoke(ctx context.Context, id string, at time.Time) error {
	err := s.write(ctx, func(w *wtx) error { return apiKeys.stamp(w, "revoked_at", at, "id = ?", id) }, nil)
	return writeErr(err, "revoke api key %s", id)
}

// APIKeyGet returns a key.
func (s *Store) APIKeyGet(ctx context.Context, id string) (*apitype.APIKey, error) {
	return apiKeys.get(ctx, s, id, "k.id = ?", id)
}

// APIKeyUpdate applies fn to the key and stores its name, state and revocation, atomically.
func (s *Store) APIKeyUpdate(ctx context.Context, id string, fn func(*apitype.APIKey) error) (*apitype.APIKey, error) {
	return apiKeys.update(ctx, s, id, fn, store.KeepAPIKey)
}

func scanAPIKey(row scanner) (*apitype.APIKey, error) {
	var k apitype.APIKey
	var created int64
	var revoked sql.NullInt64
	if err := row.Scan(&k.ID, &k.Name, &k.Hash, &k.Hint, &created, &revoked, &k.WorkspaceID, &k.Inactive); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMicros(created)
	k.RevokedAt = timePtr(revoked)
	return &k, nil
}
