package apitype

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// APIKeySecretPrefix starts every API key Corral mints.
const APIKeySecretPrefix = "corral-"

// NewAPIKeySecret returns a fresh API key secret: the prefix and 40 random base58 characters (about 234 bits).
func NewAPIKeySecret() string {
	id := NewID("")
	return APIKeySecretPrefix + id[4:] + NewID("")[4:20]
}

// HashAPIKey is how a key secret is stored and looked up: hex SHA-256. Keys are random and long, so a fast
// hash is enough; the secret itself is never stored.
func HashAPIKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewAPIKey mints a key of workspace ws ("" for an organization admin key): its secret, shown once, and the
// key to store, which keeps only the secret's hash.
func NewAPIKey(name, ws string, now time.Time) (string, *APIKey) {
	secret := NewAPIKeySecret()
	return secret, &APIKey{ID: NewID(PrefixAPIKey), Name: name, Hash: HashAPIKey(secret), Hint: secret[len(secret)-4:],
		CreatedAt: now, WorkspaceID: ws}
}
