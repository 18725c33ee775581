package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Authenticator checks an API key and returns a stable id for it (used to rate limit per key). An unknown key
// gives an error; the server answers 401 whatever the error says, and logs nothing.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (keyID string, err error)
}

// StaticKeyID is the key id KeyAuth reports for the static key.
const StaticKeyID = "static"

// KeyAuth accepts an optional static key (e.g. from CORRAL_API_KEY) and the unrevoked keys of a store, which
// are looked up by apitype.HashAPIKey of the presented key.
type KeyAuth struct {
	Static string            // accepted as is when non-empty
	Store  store.APIKeyStore // may be nil: only the static key is accepted
}

var errBadKey = &apiError{status: http.StatusUnauthorized, typ: apitype.ErrAuthentication, msg: "invalid API key"}

// Authenticate implements Authenticator.
func (k *KeyAuth) Authenticate(ctx context.Context, key string) (string, error) {
	if k.Static != "" && subtle.ConstantTimeCompare([]byte(key), []byte(k.Static)) == 1 {
		return StaticKeyID, nil
	}
	if k.Store == nil {
		return "", errBadKey
	}
	ak, err := k.Store.APIKeyByHash(ctx, apitype.HashAPIKey(key))
	if errors.Is(err, store.ErrNotFound) {
		return "", errBadKey
	}
	if err != nil {
		return "", err // a store failure is a 500, not a wrong key
	}
	if ak.RevokedAt != nil {
		return "", errBadKey
	}
	return ak.ID, nil
}

// presentedKey returns the key from "Authorization: Bearer KEY" or "x-api-key: KEY".
func presentedKey(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("x-api-key")); k != "" {
		return k
	}
	auth := r.Header.Get("Authorization")
	if scheme, token, ok := strings.Cut(auth, " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token)
	}
	return ""
}

// rateLimiter is a token bucket per key id.
type rateLimiter struct {
	rate  float64 // tokens per second
	burst float64
	mu    sync.Mutex
	keys  map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(rate float64, burst int) *rateLimiter {
	return &rateLimiter{rate: rate, burst: float64(burst), keys: map[string]*bucket{}}
}

// allow takes a token for key, or reports how long until one is available.
func (l *rateLimiter) allow(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.keys[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}
