// Package vault seals credentials' secrets for storage with envelope encryption, and opens them again for the
// proxies that inject them outside every sandbox.
//
// Every secret gets a fresh random 256-bit data key. The secret is sealed with AES-256-GCM under the data key,
// with the credential's id and the secret's name bound as associated data, so a ciphertext moved to another
// credential (or another field) does not open. The data key is wrapped with AES-256-GCM under a master key the
// operator supplies; the store keeps only the ciphertext, the wrapped data key and the master key's id (a MAC of
// the key, so ids tell keys apart without revealing them). A Vault holds one primary master key, which wraps
// new data keys, and any number of older ones it still unwraps with: during a rotation readers accept both.
//
// Open checks the keys against the store: a check value sealed under each master key the store has seen tells a
// wrong key from a right one at start, before any secret is read.
package vault

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// KeySize is the size of a master key and of a data key: AES-256.
const KeySize = 32

// Errors.
var (
	// ErrUnknownKey: the secret's data key was wrapped under a master key this Vault does not hold.
	ErrUnknownKey = errors.New("vault: secret wrapped under a master key this vault does not hold")
	// ErrDecrypt: a ciphertext or wrapped key does not open: tampered with, or bound to another credential.
	ErrDecrypt = errors.New("vault: secret does not decrypt (tampered with, or sealed for another credential)")
	// ErrWrongKey: the master key does not match the store's record of it.
	ErrWrongKey = errors.New("vault: wrong master key")
)

// Key is a master key.
type Key struct {
	id  string
	key [KeySize]byte
}

// NewKey returns a fresh random master key.
func NewKey() Key {
	var k Key
	_, _ = rand.Read(k.key[:]) // crypto/rand.Read never fails.
	k.id = keyID(k.key[:])
	return k
}

// ParseKey decodes a master key from base64 (standard or URL alphabet, padded or not) of 32 bytes.
func ParseKey(s string) (Key, error) {
	s = strings.TrimSpace(s)
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err = enc.DecodeString(s); err == nil {
			break
		}
	}
	if err != nil {
		return Key{}, errors.New("vault: a master key is base64 of 32 random bytes; this is not base64")
	}
	if len(raw) != KeySize {
		return Key{}, fmt.Errorf("vault: a master key is 32 bytes, this one is %d", len(raw))
	}
	var k Key
	copy(k.key[:], raw)
	k.id = keyID(raw)
	return k, nil
}

// ID is the key's id: a MAC of the key under a fixed label, so it names the key without revealing it.
func (k Key) ID() string { return k.id }

// Encode returns the key in base64, as ParseKey reads it.
func (k Key) Encode() string { return base64.StdEncoding.EncodeToString(k.key[:]) }

func keyID(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("corral vault master key id v1"))
	return "mk_" + hex.EncodeToString(m.Sum(nil)[:12])
}

// ReadKeyFile reads master keys from a file: one base64 key per line, the first the primary; blank lines and
// lines starting with # are skipped. The file must not be readable by group or others.
func ReadKeyFile(path string) ([]Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("vault key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("vault key file %s: mode %v lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("vault key file: %w", err)
	}
	var keys []Key
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParseKey(line)
		if err != nil {
			return nil, fmt.Errorf("vault key file %s line %d: %w", path, i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("vault key file %s holds no key", path)
	}
	return keys, nil
}

// WriteKeyFile creates path (which must not exist) with mode 0600, holding keys, the first the primary.
func WriteKeyFile(path string, keys ...Key) error {
	var b strings.Builder
	b.WriteString("# Corral vault master keys: the first wraps new secrets, every one opens them. Keep it secret.\n")
	for _, k := range keys {
		b.WriteString(k.Encode() + "\n")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("vault key file: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("vault key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("vault key file: %w", err)
	}
	return f.Close()
}

// Vault seals and opens secrets. It is safe for concurrent use.
type Vault struct {
	primary Key
	keys    map[string]Key
}

// New returns a Vault whose first key is the primary; the others only unwrap. It does not check the keys
// against a store (Open does).
func New(keys ...Key) (*Vault, error) {
	if len(keys) == 0 {
		return nil, errors.New("vault: no master key")
	}
	v := &Vault{primary: keys[0], keys: map[string]Key{}}
	for _, k := range keys {
		if k.id == "" {
			return nil, errors.New("vault: zero master key")
		}
		v.keys[k.id] = k
	}
	return v, nil
}

// Store is what Open and Rotate need of the store.
type Store interface {
	RecordStore
	MasterKeyList(ctx context.Context) ([]store.MasterKey, error)
	MasterKeyAdd(ctx context.Context, k *store.MasterKey) error
	SecretList(ctx context.Context, p *store.SecretListParams) ([]store.SealedSecret, error)
	SecretRewrap(ctx context.Context, p *store.SecretRewrapParams) error
}

// Open returns a Vault with the given keys (the first the primary) after checking them against st: each key
// the store has a check value for must open it; when the store has seen master keys, at least one of keys must
// be among them; no secret may be wrapped under a key that is not in keys. The primary's check value is
// recorded if it is new. A mismatch is an error wrapping ErrWrongKey that names the key ids, never garbage
// later.
func Open(ctx context.Context, st Store, keys ...Key) (*Vault, error) {
	v, err := New(keys...)
	if err != nil {
		return nil, err
	}
	known, err := st.MasterKeyList(ctx)
	if err != nil {
		return nil, fmt.Errorf("vault: read master key checks: %w", err)
	}
	matched := false
	var stored []string
	for _, mk := range known {
		stored = append(stored, mk.ID)
		k, ok := v.keys[mk.ID]
		if !ok {
			continue
		}
		if !hmac.Equal(mk.CheckValue, checkValue(k)) {
			return nil, fmt.Errorf("%w: key %s does not match its check value in the store", ErrWrongKey, k.id)
		}
		matched = true
	}
	if len(known) > 0 && !matched {
		return nil, fmt.Errorf("%w: the given key (%s) is not the one this database was sealed with (%s); "+
			"check --vault-key-file or CORRAL_VAULT_KEY", ErrWrongKey, strings.Join(v.ids(), ", "), strings.Join(stored, ", "))
	}
	for _, resources := range []bool{false, true} {
		orphans, err := st.SecretList(ctx, &store.SecretListParams{NotKeyIDs: v.ids(), Limit: 1, Resources: resources})
		if err != nil {
			return nil, fmt.Errorf("vault: read secrets: %w", err)
		}
		if len(orphans) > 0 {
			return nil, fmt.Errorf("%w: secrets are wrapped under master key %s, which the given keys (%s) do not include",
				ErrWrongKey, orphans[0].KeyID, strings.Join(v.ids(), ", "))
		}
	}
	if o, err := recordOrphan(ctx, st, v); err != nil {
		return nil, err
	} else if o != nil {
		return nil, fmt.Errorf("%w: the secret %s of %s is wrapped under master key %s, which the given keys (%s) do not include",
			ErrWrongKey, o.Name, o.CredentialID, o.KeyID, strings.Join(v.ids(), ", "))
	}
	if !slices.Contains(stored, v.primary.id) {
		err := st.MasterKeyAdd(ctx, &store.MasterKey{ID: v.primary.id, CheckValue: checkValue(v.primary),
			CreatedAt: apitype.Now()})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return nil, fmt.Errorf("vault: record master key check: %w", err)
		}
	}
	if len(known) == 0 {
		// A first start: two servers starting at once on an empty database, each with a key of its own, would
		// both find nothing recorded; the one that sees the other's key refuses instead of splitting the secrets.
		now, err := st.MasterKeyList(ctx)
		if err != nil {
			return nil, fmt.Errorf("vault: read master key checks: %w", err)
		}
		for _, mk := range now {
			if _, ok := v.keys[mk.ID]; !ok {
				return nil, fmt.Errorf("%w: another server recorded master key %s while this one started with %s; "+
					"give every server the same key", ErrWrongKey, mk.ID, v.primary.id)
			}
		}
	}
	return v, nil
}

// ids lists the vault's key ids, the primary first.
func (v *Vault) ids() []string {
	ids := []string{v.primary.id}
	for id := range v.keys {
		if id != v.primary.id {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids[1:])
	return ids
}

// PrimaryKeyID is the id of the master key new data keys are wrapped under.
func (v *Vault) PrimaryKeyID() string { return v.primary.id }

// checkValue is a deterministic MAC-like proof of the key: HMAC-SHA256 of a fixed label. Comparing it tells the
// right key from a wrong one without storing anything that helps find the key.
func checkValue(k Key) []byte {
	m := hmac.New(sha256.New, k.key[:])
	m.Write([]byte("corral vault master key check v1"))
	return m.Sum(nil)
}

// Seal seals a secret of a credential: a fresh data key seals plaintext with the credential id and name bound
// as associated data, and the primary master key wraps the data key.
func (v *Vault) Seal(credentialID, name string, plaintext []byte) (*store.SealedSecret, error) {
	if credentialID == "" || name == "" {
		return nil, errors.New("vault: seal needs a credential id and a secret name")
	}
	var dk [KeySize]byte
	_, _ = rand.Read(dk[:])
	ct, err := seal(dk[:], plaintext, secretAAD(credentialID, name))
	if err != nil {
		return nil, err
	}
	wrapped, err := seal(v.primary.key[:], dk[:], wrapAAD(v.primary.id, credentialID, name))
	clear(dk[:])
	if err != nil {
		return nil, err
	}
	return &store.SealedSecret{CredentialID: credentialID, Name: name, KeyID: v.primary.id, WrappedKey: wrapped,
		Ciphertext: ct}, nil
}

// Open returns a sealed secret's plaintext. ErrUnknownKey if its data key was wrapped under a master key the
// vault does not hold; ErrDecrypt if anything was tampered with or the secret was sealed for another
// credential or name.
func (v *Vault) Open(s *store.SealedSecret) ([]byte, error) {
	dk, err := v.unwrap(s)
	if err != nil {
		return nil, err
	}
	defer clear(dk)
	pt, err := open(dk, s.Ciphertext, secretAAD(s.CredentialID, s.Name))
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrDecrypt, s.CredentialID, s.Name)
	}
	return pt, nil
}

// Reseal seals s's plaintext anew for another credential id and name (a deployment's repository token for a
// session's resource), without handing the plaintext to the caller.
func (v *Vault) Reseal(s *store.SealedSecret, credentialID, name string) (*store.SealedSecret, error) {
	pt, err := v.Open(s)
	if err != nil {
		return nil, err
	}
	defer clear(pt)
	return v.Seal(credentialID, name, pt)
}

// Rewrap returns s with its data key wrapped under the primary master key; the ciphertext is unchanged.
func (v *Vault) Rewrap(s *store.SealedSecret) (*store.SealedSecret, error) {
	dk, err := v.unwrap(s)
	if err != nil {
		return nil, err
	}
	defer clear(dk)
	wrapped, err := seal(v.primary.key[:], dk, wrapAAD(v.primary.id, s.CredentialID, s.Name))
	if err != nil {
		return nil, err
	}
	out := *s
	out.KeyID, out.WrappedKey = v.primary.id, wrapped
	return &out, nil
}

func (v *Vault) unwrap(s *store.SealedSecret) ([]byte, error) {
	k, ok := v.keys[s.KeyID]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownKey, s.KeyID)
	}
	dk, err := open(k.key[:], s.WrappedKey, wrapAAD(k.id, s.CredentialID, s.Name))
	if err != nil || len(dk) != KeySize {
		return nil, fmt.Errorf("%w: %s/%s (data key)", ErrDecrypt, s.CredentialID, s.Name)
	}
	return dk, nil
}

// secretAAD binds a ciphertext to its credential and secret name.
func secretAAD(credentialID, name string) []byte {
	return []byte("corral vault secret v1\x00" + credentialID + "\x00" + name)
}

// wrapAAD binds a wrapped data key to its master key, credential and secret name.
func wrapAAD(keyID, credentialID, name string) []byte {
	return []byte("corral vault data key v1\x00" + keyID + "\x00" + credentialID + "\x00" + name)
}

// seal is AES-256-GCM with a random nonce: nonce || ciphertext || tag.
func seal(key, plaintext, aad []byte) ([]byte, error) {
	g, err := gcm(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, g.NonceSize(), g.NonceSize()+len(plaintext)+g.Overhead())
	_, _ = rand.Read(nonce)
	return g.Seal(nonce, nonce, plaintext, aad), nil
}

func open(key, sealed, aad []byte) ([]byte, error) {
	g, err := gcm(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < g.NonceSize()+g.Overhead() {
		return nil, errors.New("sealed data too short")
	}
	return g.Open(nil, sealed[:g.NonceSize()], sealed[g.NonceSize():], aad)
}

func gcm(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	return cipher.NewGCM(b)
}
