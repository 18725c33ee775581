package main

import (
	"context"
	"fmt"
	"text/tabwriter"
)

// envsKeys is `corral envs keys`: the keys a self-hosted environment's workers authenticate with.
func envsKeys(ctx context.Context, io *stdio, args []string) error {
	return subcommand(ctx, io, "envs keys", args, []verb{
		{"create", "mint a worker key for a self-hosted environment (printed once)", envsKeysCreate},
		{"list", "list an environment's worker keys", envsKeysList},
		{"revoke", "revoke a worker key: it stops working at once", envsKeysRevoke},
	})
}

func envsKeysCreate(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "envs keys create", "ENV_ID [--name NAME]")
	newClient := clientFlags(fs)
	name := fs.String("name", "", "a `name` for the key")
	quiet := fs.Bool("quiet", false, "print only the key (for scripts: KEY=$(corral envs keys create ENV -q))")
	fs.BoolVar(quiet, "q", false, "short for --quiet")
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	k, err := c.EnvironmentKeyCreate(ctx, fs.Arg(0), *name)
	if err != nil {
		return err
	}
	return printCreated(io.out, *quiet, k.Key, k)
}

func envsKeysList(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "envs keys list", "ENV_ID [--json]")
	newClient := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	page, err := c.EnvironmentKeyList(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(io.out, page.Data)
	}
	tw := tabwriter.NewWriter(io.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, tabs([]any{"ID", "NAME", "HINT", "CREATED", "REVOKED"}))
	for _, k := range page.Data {
		revoked := ""
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.Format("2006-01-02 15:04:05")
		}
		fmt.Fprintln(tw, tabs([]any{k.ID, k.Name, "..." + k.Hint, k.CreatedAt.Format("2006-01-02 15:04:05"), revoked}))
	}
	return tw.Flush()
}

func envsKeysRevoke(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "envs keys revoke", "ENV_ID KEY_ID")
	newClient := clientFlags(fs)
	if err := parseArgs(fs, args, 2); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	if err := c.EnvironmentKeyRevoke(ctx, fs.Arg(0), fs.Arg(1)); err != nil {
		return err
	}
	_, err = fmt.Fprintf(io.out, "revoked %s\n", fs.Arg(1))
	return err
}
