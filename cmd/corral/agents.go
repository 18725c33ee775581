package main

import (
	"context"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
)

func init() {
	register("agents", "manage agents: create, get, list", func(ctx context.Context, io *stdio, args []string) error {
		return subcommand(ctx, io, "agents", args, []verb{
			{"create", "create an agent", agentsCreate},
			{"get", "print an agent (a version of it with --version)", agentsGet},
			{"list", "list agents", agentsList},
		})
	})
}

func agentsCreate(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "agents create", "--name NAME [flags]")
	newClient := clientFlags(fs)
	name := fs.String("name", "", "agent `name` (required)")
	modelID := fs.String("model", "claude-sonnet-4-5", "model `id`; openai/<model> for an OpenAI-compatible endpoint")
	system := fs.String("system", "", "system `prompt`")
	description := fs.String("description", "", "`description`")
	toolset := fs.Bool("toolset", true, "enable the built-in toolset agent_toolset_20260401 (bash, read, write, edit, glob, grep)")
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
	p := &client.AgentCreateParams{Name: *name, Model: apitype.ModelConfig{ID: *modelID}, System: *system, Description: *description}
	if *toolset {
		p.Tools = []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}}
	}
	a, err := c.AgentCreate(ctx, p)
	if err != nil {
		return err
	}
	return printCreated(io.out, *quiet, a.ID, a)
}

func agentsGet(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "agents get", "AGENT_ID [flags]")
	newClient := clientFlags(fs)
	version := fs.Int("version", 0, "agent `version` (0 = latest)")
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	a, err := c.AgentGet(ctx, fs.Arg(0), *version)
	if err != nil {
		return err
	}
	return printJSON(io.out, a)
}

func agentsList(ctx context.Context, io *stdio, args []string) error {
	return listCommand(ctx, io, args, "agents list", (*client.Client).AgentList, func(a *apitype.Agent) []any {
		return []any{a.ID, a.Version, a.Name, a.Model.ID}
	}, "ID", "VERSION", "NAME", "MODEL")
}
