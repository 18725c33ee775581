package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

func init() {
	register("tail", "follow a session's events in a readable form", runTail)
}

func runTail(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "tail", "SESSION_ID [flags]")
	newClient := clientFlags(fs)
	history := fs.Bool("history", true, "print the events already in the log first")
	untilIdle := fs.Bool("until-idle", false, "exit when the session goes idle with a final stop reason")
	asJSON := fs.Bool("json", false, "print each event as a JSON line")
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
	t := &tailer{c: c, session: fs.Arg(0), out: io.out, json: *asJSON, untilIdle: *untilIdle}
	if *history {
		if done, err := t.printHistory(ctx); err != nil || done {
			return err
		}
	} else {
		// Start from the newest event already in the log, so that nothing appended from now on is missed.
		if err := t.seekEnd(ctx); err != nil {
			return err
		}
	}
	return t.follow(ctx)
}

// tailer prints a session's events and follows its stream, reconnecting with Last-Event-ID so that a dropped
// connection loses nothing.
type tailer struct {
	c         *client
	session   string
	out       io.Writer
	json      bool
	untilIdle bool
	lastID    string
}

type wireEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

func (t *tailer) eventsPath() string { return "/v1/sessions/" + url.PathEscape(t.session) + "/events" }

func (t *tailer) printHistory(ctx context.Context) (done bool, err error) {
	page := ""
	for {
		q := url.Values{"limit": {"1000"}, "order": {"asc"}}
		if page != "" {
			q.Set("page", page)
		}
		var out struct {
			Data     []json.RawMessage `json:"data"`
			NextPage *string           `json:"next_page"`
		}
		if err := t.c.do(ctx, "GET", t.eventsPath(), q, nil, &out); err != nil {
			return false, err
		}
		for _, raw := range out.Data {
			done = t.print(raw) // only the newest event decides
		}
		if out.NextPage == nil || *out.NextPage == "" {
			return done && t.untilIdle, nil
		}
		page = *out.NextPage
	}
}

func (t *tailer) seekEnd(ctx context.Context) error {
	var out struct {
		Data []wireEvent `json:"data"`
	}
	if err := t.c.do(ctx, "GET", t.eventsPath(), url.Values{"limit": {"1"}, "order": {"desc"}}, nil, &out); err != nil {
		return err
	}
	if len(out.Data) > 0 {
		t.lastID = out.Data[0].ID
	}
	return nil
}

func (t *tailer) follow(ctx context.Context) error {
	backoff := 200 * time.Millisecond
	for {
		done, err := t.stream(ctx)
		if done || ctx.Err() != nil {
			return nil
		}
		var apiErr *apiError
		if errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != 429 {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// stream reads the SSE stream until it ends; done is true when the tail should stop.
func (t *tailer) stream(ctx context.Context) (done bool, err error) {
	h := http.Header{}
	if t.lastID != "" {
		h.Set("Last-Event-ID", t.lastID)
	}
	resp, err := t.c.send(ctx, "GET", t.eventsPath()+"/stream", nil, nil, h)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 32<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 && t.print(json.RawMessage(data.String())) && t.untilIdle {
				return true, nil
			}
			data.Reset()
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	return false, sc.Err()
}

// print writes one event and reports whether it ends a turn for good (idle with a final stop reason, or
// terminated / deleted).
func (t *tailer) print(raw json.RawMessage) bool {
	var e struct {
		ID          string     `json:"id"`
		Type        string     `json:"type"`
		ProcessedAt *time.Time `json:"processed_at"`
		Content     []struct{ Type, Text string }
		Name        string          `json:"name"`
		Input       json.RawMessage `json:"input"`
		IsError     bool            `json:"is_error"`
		StopReason  *struct {
			Type     string   `json:"type"`
			EventIDs []string `json:"event_ids"`
		} `json:"stop_reason"`
		Error *struct{ Type, Message string } `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.Type == "" {
		return false
	}
	t.lastID = e.ID
	final := e.Type == "session.status_terminated" || e.Type == "session.deleted" ||
		(e.Type == "session.status_idle" && e.StopReason != nil && e.StopReason.Type != "requires_action")
	if t.json {
		fmt.Fprintln(t.out, string(raw))
		return final
	}
	stamp := "        "
	if e.ProcessedAt != nil {
		stamp = e.ProcessedAt.Local().Format("15:04:05")
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
		detail = e.Name + " " + string(e.Input)
	case e.StopReason != nil:
		detail = e.StopReason.Type
		if len(e.StopReason.EventIDs) > 0 {
			detail += " " + strings.Join(e.StopReason.EventIDs, ",")
		}
	case e.Error != nil:
		detail = e.Error.Type + ": " + e.Error.Message
	}
	if e.IsError {
		detail = "(error) " + detail
	}
	fmt.Fprintf(t.out, "%s  %-28s %s\n", stamp, e.Type, oneLine(detail, 200))
	return final
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		return s[:max-1] + "…"
	}
	return s
}
