package main

import (
	"context"
	"net/url"
	"strconv"
)

func init() {
	register("agents", "manage agents: create, get, list", func(ctx context.Context, io *stdio, args []string) error {
		return subcommand(ctx, io, "agents", args, map[string]func(context.Context, *stdio, []string) error{
			"create": agentsCreate,
			"get":    agentsGet,
			"list":   agentsList,
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
	body := map[string]any{"name": *name, "model": map[string]any{"id": *modelID}}
	if *system != "" {
		body["system"] = *system
	}
	if *description != "" {
		body["description"] = *description
	}
	if *toolset {
		body["tools"] = []any{map[string]any{"type": "agent_toolset_20260401"}}
	}
	var out map[string]any
	if err := c.do(ctx, "POST", "/v1/agents", nil, body, &out); err != nil {
		return err
	}
	return printJSON(io.out, out)
}

func agentsGet(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "agents get", "AGENT_ID [flags]")
	newClient := clientFlags(fs)
	version := fs.Int("version", 0, "agent `version` (0 = latest)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	q := url.Values{}
	if *version > 0 {
		q.Set("version", strconv.Itoa(*version))
	}
	var out map[string]any
	if err := c.do(ctx, "GET", "/v1/agents/"+url.PathEscape(fs.Arg(0)), q, nil, &out); err != nil {
		return err
	}
	return printJSON(io.out, out)
}

func agentsList(ctx context.Context, io *stdio, args []string) error {
	return listCommand(ctx, io, args, "agents list", "/v1/agents", func(item map[string]any) []any {
		return []any{item["id"], item["version"], item["name"], modelName(item["model"])}
	}, "ID", "VERSION", "NAME", "MODEL")
}

func modelName(v any) any {
	if m, ok := v.(map[string]any); ok {
		return m["id"]
	}
	return v
}
