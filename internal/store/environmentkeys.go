package store

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// EnvironmentKeyStore keeps the hashed keys of self-hosted environments.
type EnvironmentKeyStore interface {
	EnvironmentKeyCreate(ctx context.Context, k *apitype.EnvironmentKey) error
	// EnvironmentKeyByHash finds an unrevoked key by the hash of its secret.
	EnvironmentKeyByHash(ctx context.Context, hash string) (*apitype.EnvironmentKey, error)
	// EnvironmentKeyList lists an environment's keys, revoked ones included, oldest first.
	EnvironmentKeyList(ctx context.Context, environmentID string) ([]apitype.EnvironmentKey, error)
	// EnvironmentKeyRevoke sets revoked_at (once) and, in the same transaction, ends the sessions tokens of the
	// items polled with the key; ErrNotFound for a key of another environment.
	EnvironmentKeyRevoke(ctx context.Context, environmentID, id string, at time.Time) error
}
