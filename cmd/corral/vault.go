package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

func init() {
	register("vault", "manage the vault's master key (rotate-key) in the server's store", func(ctx context.Context, io *stdio, args []string) error {
		return subcommand(ctx, io, "vault", args, []verb{
			{"rotate-key", "re-wrap every credential's data key under a new master key", vaultRotateKey},
		})
	})
}

// vaultKeyFileName is the master key file serve creates in the data directory when given no key.
const vaultKeyFileName = "vault.key"

// vaultFlags adds --vault-key-file to a flag set; CORRAL_VAULT_KEY is the alternative.
type vaultFlags struct {
	keyFile string
}

func (f *vaultFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.keyFile, "vault-key-file", "", "`file` of the vault master key(s) that seal credentials: base64, one per line, "+
		"the first seals (default DIR/vault.key, which serve creates on first start; or env CORRAL_VAULT_KEY: base64 keys, comma-separated)")
}

// open returns the server's vault: the master key from --vault-key-file, CORRAL_VAULT_KEY or the data
// directory's key file, checked against the store. With none of them and a store that has never sealed
// anything, it creates the data directory's key file (mode 0600) and says so on stderr.
func (f *vaultFlags) open(ctx context.Context, st store.Store, dataDir string, stderr io.Writer) (*vault.Vault, error) {
	return openVault(ctx, st, dataDir, f.keyFile, os.Getenv("CORRAL_VAULT_KEY"), stderr)
}

// openVault is vaultFlags.open with the environment passed in.
func openVault(ctx context.Context, st store.Store, dataDir, keyFile, envKey string, stderr io.Writer) (*vault.Vault, error) {
	keys, err := vaultKeys(dataDir, keyFile, envKey)
	if errors.Is(err, fs.ErrNotExist) && keyFile == "" && envKey == "" {
		keys, err = createVaultKey(ctx, st, dataDir, stderr)
	}
	if err != nil {
		return nil, err
	}
	v, err := vault.Open(ctx, st, keys...)
	if err != nil {
		return nil, fmt.Errorf("open vault: %w", err)
	}
	return v, nil
}

// vaultKeys reads the master keys the flags and environment select: --vault-key-file, else CORRAL_VAULT_KEY
// (comma-separated, the first seals), else DIR/vault.key. A missing default file is fs.ErrNotExist.
func vaultKeys(dataDir, keyFile, envKey string) ([]vault.Key, error) {
	switch {
	case keyFile != "" && envKey != "":
		return nil, errors.New("vault key: both --vault-key-file and CORRAL_VAULT_KEY are set; use one")
	case keyFile != "":
		return vault.ReadKeyFile(keyFile)
	case envKey != "":
		var keys []vault.Key
		for i, s := range strings.Split(envKey, ",") {
			k, err := vault.ParseKey(s)
			if err != nil {
				return nil, fmt.Errorf("CORRAL_VAULT_KEY key %d: %w", i+1, err)
			}
			keys = append(keys, k)
		}
		return keys, nil
	}
	path := filepath.Join(dataDir, vaultKeyFileName)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("vault key file %s: %w", path, err)
	}
	return vault.ReadKeyFile(path)
}

// createVaultKey creates DIR/vault.key on first start. It refuses when the store already has secrets sealed
// under some master key: a new key could not open them, and the operator has lost or misplaced the old one.
func createVaultKey(ctx context.Context, st store.Store, dataDir string, stderr io.Writer) ([]vault.Key, error) {
	known, err := st.MasterKeyList(ctx)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	if len(known) > 0 {
		return nil, fmt.Errorf("vault: no master key given (--vault-key-file, CORRAL_VAULT_KEY or %s), but this database's "+
			"secrets are sealed under master key %s: supply that key", filepath.Join(dataDir, vaultKeyFileName), known[0].ID)
	}
	path := filepath.Join(dataDir, vaultKeyFileName)
	k := vault.NewKey()
	if err := vault.WriteKeyFile(path, k); err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "corral: created the vault master key file %s (mode 0600, key %s); back it up: "+
		"the stored credentials cannot be decrypted without it\n", path, k.ID())
	return []vault.Key{k}, nil
}

func vaultRotateKey(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "vault rotate-key", "--new-key-file FILE [flags]\n\n"+
		"Re-wraps every credential's data key under a new master key; ciphertexts are untouched and each rewrap is a\n"+
		"conditional update, so the server can keep running. If FILE does not exist it is created (mode 0600) with\n"+
		"the new key first and the current key(s) after it: a server started with --vault-key-file FILE seals under\n"+
		"the new key and still reads secrets sealed meanwhile under the old one by a server not yet restarted (run\n"+
		"rotate-key again afterwards to rewrap those). Once every server runs on FILE and a run reports nothing\n"+
		"left, the old key's lines may be removed from FILE.")
	var sf storeFlags
	sf.register(fs)
	var vf vaultFlags
	vf.register(fs)
	newKeyFile := fs.String("new-key-file", "", "`file` of the new master key (created if missing)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *newKeyFile == "" || fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	old, err := vaultKeys(sf.data, vf.keyFile, os.Getenv("CORRAL_VAULT_KEY"))
	if err != nil {
		return fmt.Errorf("current vault key: %w", err)
	}
	next, err := newVaultKeys(*newKeyFile, old, io.err)
	if err != nil {
		return err
	}
	st, err := sf.openExisting(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := vault.Open(ctx, st, next...)
	if err != nil {
		return fmt.Errorf("open vault: %w", err)
	}
	res, err := vault.Rotate(ctx, st, v)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "rewrapped %d data keys under master key %s\n", res.Rewrapped, v.PrimaryKeyID())
	// The egress proxies' CA key, sealed in the data directory, is rewrapped the same way (LoadCA rewraps a key
	// wrapped under an older master key).
	if caPath := filepath.Join(sf.data, caFileName); fileExists(caPath) {
		if _, _, err := proxy.LoadCA(caPath, v); err != nil {
			return fmt.Errorf("rewrap the egress CA key in %s: %w", caPath, err)
		}
		fmt.Fprintf(io.out, "rewrapped the egress CA key in %s\n", caPath)
	}
	if res.Remaining > 0 {
		return fmt.Errorf("%d secrets were rewritten under an older key during the rotation; "+
			"restart the servers with --vault-key-file %s and run rotate-key again", res.Remaining, *newKeyFile)
	}
	fmt.Fprintf(io.err, "Start the servers with --vault-key-file %s.\n", *newKeyFile)
	return nil
}

// newVaultKeys returns the keyring of a rotation: the new key file's keys (creating it with a fresh key and
// the old keys after it if it does not exist), followed by the old keys it lacks.
func newVaultKeys(path string, old []vault.Key, stderr io.Writer) ([]vault.Key, error) {
	keys, err := vault.ReadKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		k := vault.NewKey()
		keys = append([]vault.Key{k}, old...)
		if err := vault.WriteKeyFile(path, keys...); err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "corral: created %s (mode 0600) with the new master key %s, then the current one(s)\n", path, k.ID())
		return keys, nil
	}
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k.ID()] = true
	}
	for _, k := range old {
		if !have[k.ID()] {
			keys = append(keys, k)
		}
	}
	return keys, nil
}
