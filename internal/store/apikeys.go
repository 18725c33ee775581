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
}
