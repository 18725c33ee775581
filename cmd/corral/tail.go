package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
)

func init() {
	register("tail", "follow a session's events in a readable form", runTail)
}

func runTail(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "tail", "SESSION_ID [flags]")
	newClient := clientFlags(fs)
	history := fs.Bool("history", true, "print the events already in the log first")
	untilIdle := fs.Bool("until-idle", false, "exit when the session goes idle with a final stop reason (at once if it already is)")
	asJSON := fs.Bool("json", false, "print each event as a JSON line")
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	id := fs.Arg(0)
	t := &tailer{out: io.out, json: *asJSON}

	// The session's status first: a missing session fails here, and a terminated one has nothing to follow.
	sess, err := c.SessionGet(ctx, id)
	if err != nil {
		return err
	}
	// Then the log, up to its current end (printed with --history): the newest event read is where the stream
	// resumes, so nothing appended meanwhile is missed. The log is read after the status, so it is the more
	// recent of the two and decides: a turn that ended before tail connected ends with a final
	// session.status_idle, and there is nothing to wait for.
	var last *client.Event
	if *history {
		for ev, err := range c.Events(ctx, id, nil) {
			if err != nil {
				return err
			}
			t.print(ev)
			last = ev
		}
	} else {
		page, err := c.EventList(ctx, id, &client.EventListParams{Desc: true, Limit: 1})
		if err != nil {
			return err
		}
		if len(page.Data) > 0 {
			last = &page.Data[0]
		}
	}
	if sess.Status == apitype.StatusTerminated || *untilIdle && last != nil && last.TurnOver() {
		return nil
	}
	from := "0" // an empty log: replay from its start, in case events arrived since it was read
	if last != nil {
		from = last.ID
	}
	err = c.Follow(ctx, id, &client.StreamParams{LastEventID: from}, func(ev *client.Event) bool {
		t.print(ev)
		return !(*untilIdle && ev.TurnOver())
	})
	if ctx.Err() != nil {
		return nil // interrupted: the user is done watching
	}
	return err
}

// tailer prints a session's events.
type tailer struct {
	out  io.Writer
	json bool
}

// tailEvent is what tail shows of an event.
type tailEvent struct {
	Content    []apitype.ContentBlock `json:"content"`
	Name       string                 `json:"name"`
	Input      json.RawMessage        `json:"input"`
	IsError    bool                   `json:"is_error"`
	StopReason *apitype.StopReason    `json:"stop_reason"`
	// Error is an object (session.error) or a string (span.sandbox_provision_end).
	Error json.RawMessage `json:"error"`
	// Image is the image a span.sandbox_provision_start waits for, while it builds.
	Image *apitype.EnvironmentImage `json:"image"`
}

// print writes one event: a JSON line with --json, else a line of time, type and the gist.
func (t *tailer) print(ev *client.Event) {
	if t.json {
		fmt.Fprintln(t.out, string(unescapeHTML(ev.Raw)))
		return
	}
	var e tailEvent
	_ = ev.Decode(&e) // a field of an unexpected shape shows as nothing
	stamp := "        "
	if ev.ProcessedAt != nil {
		stamp = ev.ProcessedAt.Local().Format("15:04:05")
	}
	var text []string
	for _, b := range e.Content {
		if b.Text != "" {
			text = append(text, b.Text)
		}
	}
	detail := strings.Join(text, " ")
	switch {
	case e.Name != "":
		detail = e.Name + " " + string(unescapeHTML(e.Input))
	case e.StopReason != nil:
		detail = string(e.StopReason.Type)
		if len(e.StopReason.EventIDs) > 0 {
			detail += " " + strings.Join(e.StopReason.EventIDs, ",")
		}
	case len(e.Error) > 0 && string(e.Error) != "null":
		detail = errorText(e.Error)
	case e.Image != nil && e.Image.Status == apitype.ImageBuilding:
		detail = "waiting for the image " + e.Image.ID + " to build (the base image takes minutes on a server's first start)"
	}
	if e.IsError {
		detail = "(error) " + detail
	}
	fmt.Fprintf(t.out, "%s  %-28s %s\n", stamp, ev.Type, oneLine(detail, 200))
}

// errorText is "type: message" for an error object, the text for an error string.
func errorText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var e struct{ Type, Message string }
	if json.Unmarshal(raw, &e) == nil {
		return e.Type + ": " + e.Message
	}
	return string(raw)
}

// unescapeHTML undoes encoding/json's HTML escaping (\u003c, \u003e, \u0026) in a JSON text, so that tool
// input prints as the model wrote it ("a > b && c"). Every other escape stays: the result is the same JSON
// value.
func unescapeHTML(raw []byte) []byte {
	if !strings.Contains(string(raw), `\u00`) {
		return raw
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 == len(raw) {
			out = append(out, raw[i])
			continue
		}
		// In JSON a backslash starts an escape: copy it whole, so that "\\u003c" (an escaped backslash) stays.
		if raw[i+1] == 'u' && i+6 <= len(raw) {
			switch strings.ToLower(string(raw[i+2 : i+6])) {
			case "003c":
				out = append(out, '<')
				i += 5
				continue
			case "003e":
				out = append(out, '>')
				i += 5
				continue
			case "0026":
				out = append(out, '&')
				i += 5
				continue
			}
		}
		out = append(out, raw[i], raw[i+1])
		i++
	}
	return out
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		return s[:max-1] + "…"
	}
	return s
}
