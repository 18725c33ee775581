package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/corralhq/corral/internal/client"
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
	event := client.UserMessage(strings.Join(fs.Args()[1:], " "))
	if *interrupt {
		event = client.UserInterrupt()
	}
	sent, err := c.EventSend(ctx, fs.Arg(0), event)
	if err != nil {
		return err
	}
	for _, e := range sent {
		fmt.Fprintf(io.out, "%s %s\n", e.ID, e.Type)
	}
	return nil
}
