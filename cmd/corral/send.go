package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

func init() {
	register("send", "send a user message (or --interrupt) to a session", runSend)
}

func runSend(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "send", "SESSION_ID TEXT... [flags]")
	newClient := clientFlags(fs)
	interrupt := fs.Bool("interrupt", false, "send user.interrupt instead of a message")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 || (!*interrupt && fs.NArg() < 2) {
		fs.Usage()
		return errUsage
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	event := userMessage(strings.Join(fs.Args()[1:], " "))
	if *interrupt {
		event = map[string]any{"type": "user.interrupt"}
	}
	var out struct {
		Data []struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		} `json:"data"`
	}
	if err := c.do(ctx, "POST", "/v1/sessions/"+url.PathEscape(fs.Arg(0))+"/events", nil, map[string]any{"events": []any{event}}, &out); err != nil {
		return err
	}
	for _, e := range out.Data {
		fmt.Fprintf(io.out, "%s %s\n", e.ID, e.Type)
	}
	return nil
}
