package main

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
)

func init() {
	register("sessions", "manage sessions: create, get, list", func(ctx context.Context, io *stdio, args []string) error {
		return subcommand(ctx, io, "sessions", args, []verb{
			{"create", "create a session (and start it with --message)", sessionsCreate},
			{"get", "print a session", func(ctx context.Context, io *stdio, args []string) error {
				return idCommand(ctx, io, args, "sessions get", (*client.Client).SessionGet)
			}},
			{"list", "list sessions", func(ctx context.Context, io *stdio, args []string) error {
				list := func(c *client.Client, ctx context.Context, p *client.ListParams) (*client.Page[apitype.Session], error) {
					return c.SessionList(ctx, &client.SessionListParams{ListParams: *p})
				}
				return listCommand(ctx, io, args, "sessions list", list, func(s *apitype.Session) []any {
					var title any
					if s.Title != nil {
						title = *s.Title
					}
					return []any{s.ID, s.Status, s.Agent.ID, title, s.CreatedAt.Format(time.RFC3339)}
				}, "ID", "STATUS", "AGENT", "TITLE", "CREATED")
			}},
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
	quiet := quietFlag(fs)
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
	p := &client.SessionCreateParams{Agent: client.AgentRef{ID: *agent}, EnvironmentID: *env, Title: *title}
	if *message != "" {
		p.InitialEvents = []apitype.NewEvent{client.UserMessage(*message)}
	}
	s, err := c.SessionCreate(ctx, p)
	if err != nil {
		return err
	}
	return printCreated(io.out, *quiet, s.ID, s)
}
