package main

import (
	"context"
)

func init() {
	register("sessions", "manage sessions: create, get, list", func(ctx context.Context, io *stdio, args []string) error {
		return subcommand(ctx, io, "sessions", args, map[string]func(context.Context, *stdio, []string) error{
			"create": sessionsCreate,
			"get": func(ctx context.Context, io *stdio, args []string) error {
				return idCommand(ctx, io, args, "sessions get", "GET", "/v1/sessions")
			},
			"list": func(ctx context.Context, io *stdio, args []string) error {
				return listCommand(ctx, io, args, "sessions list", "/v1/sessions", func(item map[string]any) []any {
					agent, _ := item["agent"].(map[string]any)
					return []any{item["id"], item["status"], agent["id"], item["title"], item["created_at"]}
				}, "ID", "STATUS", "AGENT", "TITLE", "CREATED")
			},
		})
	})
}

func sessionsCreate(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "sessions create", "--agent AGENT_ID --env ENV_ID [flags]")
	newClient := clientFlags(fs)
	agent := fs.String("agent", "", "agent `id` (required)")
	env := fs.String("env", "", "environment `id` (required)")
	title := fs.String("title", "", "session `title`")
	message := fs.String("message", "", "a first user `message` to start the session with")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *agent == "" || *env == "" {
		fs.Usage()
		return errUsage
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	body := map[string]any{"agent": *agent, "environment_id": *env}
	if *title != "" {
		body["title"] = *title
	}
	if *message != "" {
		body["initial_events"] = []any{userMessage(*message)}
	}
	var out map[string]any
	if err := c.do(ctx, "POST", "/v1/sessions", nil, body, &out); err != nil {
		return err
	}
	return printJSON(io.out, out)
}

func userMessage(text string) map[string]any {
	return map[string]any{"type": "user.message", "content": []any{map[string]any{"type": "text", "text": text}}}
}
