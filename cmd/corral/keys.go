package main

import (
	"cmp"
	"context"
	"errors"
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
	fs := newFlagSet(io, "keys create", "[--name NAME] [--workspace WORKSPACE_ID] [flags]")
	var sf storeFlags
	sf.register(fs)
	name := fs.String("name", "", "a `name` to recognise the key by")
	ws := fs.String("workspace", "", "the `workspace` the key acts in, alone (default: none, an organization admin key, which\n"+
		"manages workspaces and keys and acts in the workspace a request names, the default one if none)")
	if err := parse(fs, args); err != nil {
		return err
	}
	st, err := sf.openExisting(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if *ws != "" {
		w, err := st.WorkspaceGet(ctx, *ws)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("no workspace %s (create one with the admin API: POST /v1/organizations/workspaces)", *ws)
		}
		if err != nil {
			return err
		}
		if w.ArchivedAt != nil {
			return fmt.Errorf("workspace %s is archived", *ws)
		}
	}
	secret, key, err := createKey(ctx, st, *name, *ws)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "%s\t%s\n", key.ID, secret)
	fmt.Fprintln(io.err, "The key is shown once; only its hash is stored.")
	return nil
}

// createKey mints a key of workspace ws ("": an organization admin key), stores its hash and returns the
// secret.
func createKey(ctx context.Context, st store.Store, name, ws string) (string, *apitype.APIKey, error) {
	secret, key := apitype.NewAPIKey(name, ws, apitype.Now())
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
	fmt.Fprintln(tw, "ID\tNAME\tWORKSPACE\tENDS WITH\tCREATED\tSTATUS")
	for _, k := range keys {
		status := k.Status()
		if k.RevokedAt != nil {
			status += " " + k.RevokedAt.Format(time.RFC3339)
		}
		ws := cmp.Or(k.WorkspaceID, "(organization admin)")
		fmt.Fprintf(tw, "%s\t%s\t%s\t…%s\t%s\t%s\n", k.ID, k.Name, ws, k.Hint, k.CreatedAt.Format(time.RFC3339), status)
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
