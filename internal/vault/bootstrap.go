package vault

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFileName is the master key file a server creates in its data directory when it is given no key.
const KeyFileName = "vault.key"

// KeySource says where a server's master keys come from, in this order of precedence: File (the operator's
// key file), else Env (base64 keys, comma-separated; CORRAL_VAULT_KEY), else KeyFileName in DataDir. Setting
// both File and Env is an error.
type KeySource struct {
	File    string
	Env     string
	DataDir string
}

// DefaultPath is the data directory's key file.
func (ks KeySource) DefaultPath() string { return filepath.Join(ks.DataDir, KeyFileName) }

// Keys reads the master keys ks selects, the first sealing. A missing data-directory key file is
// fs.ErrNotExist.
func (ks KeySource) Keys() ([]Key, error) {
	switch {
	case ks.File != "" && ks.Env != "":
		return nil, errors.New("vault key: both --vault-key-file and CORRAL_VAULT_KEY are set; use one")
	case ks.File != "":
		return ReadKeyFile(ks.File)
	case ks.Env != "":
		var keys []Key
		for i, s := range strings.Split(ks.Env, ",") {
			k, err := ParseKey(s)
			if err != nil {
				return nil, fmt.Errorf("CORRAL_VAULT_KEY key %d: %w", i+1, err)
			}
			keys = append(keys, k)
		}
		return keys, nil
	}
	path := ks.DefaultPath()
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("vault key file %s: %w", path, err)
	}
	return ReadKeyFile(path)
}

// Bootstrap opens a server's vault with the keys ks selects, checked against the store (Open). With neither
// File nor Env and no data-directory key file, the first server to start creates that file (mode 0600) with a
// new key, which Open records in the store, and calls created with the file's path and the key's id; a
// store that already has secrets sealed under some master key refuses instead (a new key could not open
// them: the operator has lost or misplaced the old one).
func Bootstrap(ctx context.Context, st Store, ks KeySource, created func(path, keyID string)) (*Vault, error) {
	keys, err := ks.Keys()
	if errors.Is(err, fs.ErrNotExist) && ks.File == "" && ks.Env == "" {
		keys, err = createKeyFile(ctx, st, ks.DefaultPath(), created)
	}
	if err != nil {
		return nil, err
	}
	v, err := Open(ctx, st, keys...)
	if err != nil {
		return nil, fmt.Errorf("open vault: %w", err)
	}
	return v, nil
}

// createKeyFile creates the data directory's key file on a store that has never sealed anything.
func createKeyFile(ctx context.Context, st Store, path string, created func(path, keyID string)) ([]Key, error) {
	known, err := st.MasterKeyList(ctx)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	if len(known) > 0 {
		return nil, fmt.Errorf("vault: no master key given (--vault-key-file, CORRAL_VAULT_KEY or %s), but this database's "+
			"secrets are sealed under master key %s: supply that key", path, known[0].ID)
	}
	k := NewKey()
	if err := WriteKeyFile(path, k); err != nil {
		return nil, err
	}
	if created != nil {
		created(path, k.ID())
	}
	return []Key{k}, nil
}
