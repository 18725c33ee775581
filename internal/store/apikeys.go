package store

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// APIKeyStore keeps hashed API keys.
type APIKeyStore interface {
	APIKeyCreate(ctx context.Context, k *apitype.APIKey) error
	// APIKeyByHash finds an unrevoked key by the hash of its secret.
	APIKeyByHash(ctx context.Context, hash string) (*apitype.APIKey, error)
	APIKeyList(ctx context.Context) ([]apitype.APIKey, error)
	APIKeyRevoke(ctx context.Context, id string, at time.Time) error
	// APIKeyGet returns a key, revoked or not; ErrNotFound if there is none.
	APIKeyGet(ctx context.Context, id string) (*apitype.APIKey, error)
	// APIKeyUpdate reads the key, applies fn and writes its name and Inactive back, atomically; a revoked key
	// stays revoked, and RevokedAt set by fn revokes it.
	APIKeyUpdate(ctx context.Context, id string, fn func(*apitype.APIKey) error) (*apitype.APIKey, error)
}

// KeepAPIKey is what APIKeyUpdate keeps of the key read: all but its name, Inactive and a first revocation.
func KeepAPIKey(next, cur *apitype.APIKey) {
	name, inactive, revoked := next.Name, next.Inactive, next.RevokedAt
	*next = *cur
	next.Name, next.Inactive = name, inactive
	if cur.RevokedAt == nil {
		next.RevokedAt = revoked
	}
}
