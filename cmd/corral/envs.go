package main

import (
	"context"
	"strings"
)

func init() {
	register("envs", "manage environments: create, get, list, delete", func(ctx context.Context, io *stdio, args []string) error {
		return subcommand(ctx, io, "envs", args, map[string]func(context.Context, *stdio, []string) error{
			"create": envsCreate,
			"get": func(ctx context.Context, io *stdio, args []string) error {
				return idCommand(ctx, io, args, "envs get", "GET", "/v1/environments")
			},
			"list": func(ctx context.Context, io *stdio, args []string) error {
				return listCommand(ctx, io, args, "envs list", "/v1/environments", func(item map[string]any) []any {
					cfg, _ := item["config"].(map[string]any)
					return []any{item["id"], item["name"], cfg["type"]}
				}, "ID", "NAME", "TYPE")
			},
			"delete": func(ctx context.Context, io *stdio, args []string) error {
				return idCommand(ctx, io, args, "envs delete", "DELETE", "/v1/environments")
			},
		})
	})
}

func envsCreate(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "envs create", "--name NAME [flags]")
	newClient := clientFlags(fs)
	name := fs.String("name", "", "environment `name` (required)")
	selfHosted := fs.Bool("self-hosted", false, "a self_hosted environment (tools run on your workers)")
	allow := fs.String("allow-hosts", "", "limit networking to these comma-separated `hosts` (default: unrestricted)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" {
		fs.Usage()
		return errUsage
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	config := map[string]any{"type": "cloud"}
	switch {
	case *selfHosted:
		config = map[string]any{"type": "self_hosted"}
	case *allow != "":
		config["networking"] = map[string]any{"type": "limited", "allowed_hosts": strings.Split(*allow, ",")}
	}
	var out map[string]any
	if err := c.do(ctx, "POST", "/v1/environments", nil, map[string]any{"name": *name, "config": config}, &out); err != nil {
		return err
	}
	return printJSON(io.out, out)
}
