package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/corralhq/corral/internal/client"
)

// listCommand is the shared body of the "list" subcommands: it follows next_page up to --limit items and prints
// a table (or JSON with --json).
func listCommand[T any](ctx context.Context, io *stdio, args []string, name string,
	list func(*client.Client, context.Context, *client.ListParams) (*client.Page[T], error),
	row func(*T) []any, header ...any,
) error {
	fs := newFlagSet(io, name, "[flags]")
	newClient := clientFlags(fs)
	limit := fs.Int("limit", 50, "show at most `n` items")
	asJSON := fs.Bool("json", false, "print JSON")
	archived := fs.Bool("archived", false, "include archived items")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	items := []T{}
	p := &client.ListParams{IncludeArchived: *archived}
	for len(items) < *limit {
		p.Limit = min(100, *limit-len(items))
		page, err := list(c, ctx, p)
		if err != nil {
			return err
		}
		items = append(items, page.Data...)
		if p.Page = page.Next(); p.Page == "" {
			break
		}
	}
	if *asJSON {
		return printJSON(io.out, items)
	}
	tw := tabwriter.NewWriter(io.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, tabs(header))
	for i := range items {
		fmt.Fprintln(tw, tabs(row(&items[i])))
	}
	return tw.Flush()
}

func tabs(cols []any) string {
	s := make([]string, len(cols))
	for i, c := range cols {
		if c == nil || c == "" {
			c = "-"
		}
		s[i] = fmt.Sprint(c)
	}
	return strings.Join(s, "\t")
}

// idCommand is the shared body of the subcommands that act on one resource by id ("get", "delete"): the
// answer printed as JSON.
func idCommand[T any](ctx context.Context, io *stdio, args []string, name string, do func(*client.Client, context.Context, string) (T, error)) error {
	fs := newFlagSet(io, name, "ID [flags]")
	newClient := clientFlags(fs)
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	out, err := do(c, ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	return printJSON(io.out, out)
}
