package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
)

// listCommand is the shared body of the "list" subcommands: it follows next_page up to --limit items and prints
// a table (or JSON with --json).
func listCommand(ctx context.Context, io *stdio, args []string, name, path string, row func(map[string]any) []any, header ...any) error {
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
	var items []map[string]any
	page := ""
	for len(items) < *limit {
		q := url.Values{"limit": {strconv.Itoa(min(100, *limit-len(items)))}}
		if page != "" {
			q.Set("page", page)
		}
		if *archived {
			q.Set("include_archived", "true")
		}
		var out struct {
			Data     []map[string]any `json:"data"`
			NextPage *string          `json:"next_page"`
		}
		if err := c.do(ctx, "GET", path, q, nil, &out); err != nil {
			return err
		}
		items = append(items, out.Data...)
		if out.NextPage == nil || *out.NextPage == "" {
			break
		}
		page = *out.NextPage
	}
	if *asJSON {
		return printJSON(io.out, items)
	}
	tw := tabwriter.NewWriter(io.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, tabs(header))
	for _, item := range items {
		fmt.Fprintln(tw, tabs(row(item)))
	}
	return tw.Flush()
}

func tabs(cols []any) string {
	s := ""
	for i, c := range cols {
		if i > 0 {
			s += "\t"
		}
		if c == nil {
			c = "-"
		}
		s += fmt.Sprint(c)
	}
	return s
}

// idCommand is the shared body of the subcommands that act on one resource by id ("get", "delete"): METHOD
// path/ID, the answer printed as JSON.
func idCommand(ctx context.Context, io *stdio, args []string, name, method, path string) error {
	fs := newFlagSet(io, name, "ID [flags]")
	newClient := clientFlags(fs)
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
	var out map[string]any
	if err := c.do(ctx, method, path+"/"+url.PathEscape(fs.Arg(0)), nil, nil, &out); err != nil {
		return err
	}
	return printJSON(io.out, out)
}
