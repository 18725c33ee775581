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

// vaultFlags adds --vault-key-file to a flag set; CORRAL_VAULT_KEY is the alternative.
type vaultFlags struct {
	keyFile string
}

func (f *vaultFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.keyFile, "vault-key-file", "", "`file` of the vault master key(s) that seal credentials: base64, one per line, "+
		"the first seals (default DIR/"+vault.KeyFileName+", which serve creates on first start; or env CORRAL_VAULT_KEY: base64 keys, comma-separated)")
}

// open returns the server's vault (vault.Bootstrap): the master key from --vault-key-file, CORRAL_VAULT_KEY or
// the data directory's key file, checked against the store; the first server to start creates the key file
// and says so on stderr.
func (f *vaultFlags) open(ctx context.Context, st store.Store, dataDir string, stderr io.Writer) (*vault.Vault, error) {
	return openVault(ctx, st, dataDir, f.keyFile, os.Getenv("CORRAL_VAULT_KEY"), stderr)
}

// openVault is vaultFlags.open with the environment passed in.
func openVault(ctx context.Context, st store.Store, dataDir, keyFile, envKey string, stderr io.Writer) (*vault.Vault, error) {
	return vault.Bootstrap(ctx, st, vault.KeySource{File: keyFile, Env: envKey, DataDir: dataDir}, func(path, keyID string) {
		fmt.Fprintf(stderr, "corral: created the vault master key file %s (mode 0600, key %s); back it up: "+
			"the stored credentials cannot be decrypted without it\n", path, keyID)
	})
}

func vaultRotateKey(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "vault rotate-key", "--new-key-file FILE [flags]\n\n"+
		"Re-wraps every credential's data key (and repository tokens', deployments' tokens' and webhook signing\n"+
		"secrets') under a new master key; ciphertexts are untouched and each rewrap is a\n"+
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
	old, err := vault.KeySource{File: vf.keyFile, Env: os.Getenv("CORRAL_VAULT_KEY"), DataDir: sf.data}.Keys()
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
