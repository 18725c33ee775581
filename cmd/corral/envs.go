package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
)

func init() {
	register("envs", "manage environments: create, get, list, delete, keys", func(ctx context.Context, io *stdio, args []string) error {
		return subcommand(ctx, io, "envs", args, []verb{
			{"create", "create an environment", envsCreate},
			{"get", "print an environment (its image's status on stderr)", func(ctx context.Context, io *stdio, args []string) error {
				return idCommand(ctx, io, args, "envs get", func(c *client.Client, ctx context.Context, id string) (*apitype.Environment, error) {
					e, err := c.EnvironmentGet(ctx, id)
					if err == nil {
						if line := imageLine(e.Image); line != "" {
							fmt.Fprintln(io.err, line)
						}
					}
					return e, err
				})
			}},
			{"list", "list environments", func(ctx context.Context, io *stdio, args []string) error {
				return listCommand(ctx, io, args, "envs list", (*client.Client).EnvironmentList, func(e *apitype.Environment) []any {
					return []any{e.ID, e.Name, e.Config.Type}
				}, "ID", "NAME", "TYPE")
			}},
			{"delete", "delete an environment", func(ctx context.Context, io *stdio, args []string) error {
				return idCommand(ctx, io, args, "envs delete", (*client.Client).EnvironmentDelete)
			}},
			{"keys", "a self-hosted environment's worker keys: create, list, revoke", envsKeys},
		})
	})
}

// imageLine is the one line envs get prints about an environment's image: its status and id, and for a
// failed build the package and why ("" without an image).
func imageLine(img *apitype.EnvironmentImage) string {
	if img == nil {
		return ""
	}
	line := fmt.Sprintf("image: %s (%s)", img.Status, img.ID)
	if e := img.Error; e != nil {
		what := e.Manager
		if e.Package != "" {
			what += " package " + e.Package
		}
		msg, _, _ := strings.Cut(e.Message, "\n")
		line += ": " + strings.TrimSpace(what+": "+msg)
	}
	return line
}

func envsCreate(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "envs create", "--name NAME [flags]")
	newClient := clientFlags(fs)
	name := fs.String("name", "", "environment `name` (required)")
	selfHosted := fs.Bool("self-hosted", false, "a self_hosted environment (tools run on your workers)")
	allow := fs.String("allow-hosts", "", "limit networking to these comma-separated `hosts` (default: unrestricted)")
	quiet := quietFlag(fs)
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
	config := apitype.EnvConfig{Type: apitype.EnvironmentCloud}
	switch {
	case *selfHosted:
		config = apitype.EnvConfig{Type: apitype.EnvironmentSelfHosted}
	case *allow != "":
		config.Networking = &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: strings.Split(*allow, ",")}
	}
	e, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: *name, Config: config})
	if err != nil {
		return err
	}
	return printCreated(io.out, *quiet, e.ID, e)
}
