package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func init() {
	register("keys", "manage the server's API keys (create, list, revoke) in its store", func(ctx context.Context, io *stdio, args []string) error {
		return subcommand(ctx, io, "keys", args, []verb{
			{"create", "mint an API key and print its secret (once)", keysCreate},
			{"list", "list the API keys (never their secrets)", keysList},
			{"revoke", "revoke an API key", keysRevoke},
		})
	})
}

func keysCreate(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "keys create", "[--name NAME] [flags]")
	var sf storeFlags
	sf.register(fs)
	name := fs.String("name", "", "a `name` to recognise the key by")
	if err := parse(fs, args); err != nil {
		return err
	}
	st, err := sf.openExisting(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	secret, key, err := createKey(ctx, st, *name)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "%s\t%s\n", key.ID, secret)
	fmt.Fprintln(io.err, "The key is shown once; only its hash is stored.")
	return nil
}

// createKey mints a key, stores its hash and returns the secret.
func createKey(ctx context.Context, st store.Store, name string) (string, *apitype.APIKey, error) {
	secret := apitype.NewAPIKeySecret()
	key := &apitype.APIKey{
		ID:        apitype.NewID(apitype.PrefixAPIKey),
		Name:      name,
		Hash:      apitype.HashAPIKey(secret),
		Hint:      secret[len(secret)-4:],
		CreatedAt: apitype.Now(),
	}
	if err := st.APIKeyCreate(ctx, key); err != nil {
		return "", nil, fmt.Errorf("store key: %w", err)
	}
	return secret, key, nil
}

func keysList(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "keys list", "[flags]")
	var sf storeFlags
	sf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	st, err := sf.openExisting(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	keys, err := st.APIKeyList(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(io.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tENDS WITH\tCREATED\tREVOKED")
	for _, k := range keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t…%s\t%s\t%s\n", k.ID, k.Name, k.Hint, k.CreatedAt.Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}

func keysRevoke(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "keys revoke", "KEY_ID [flags]")
	var sf storeFlags
	sf.register(fs)
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	st, err := sf.openExisting(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.APIKeyRevoke(ctx, fs.Arg(0), apitype.Now()); err != nil {
		return err
	}
	fmt.Fprintf(io.out, "revoked %s\n", fs.Arg(0))
	return nil
}
