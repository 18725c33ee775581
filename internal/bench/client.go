package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Client is a minimal client of Corral's HTTP API: what a benchmark needs, over real HTTP and SSE.
type Client struct {
	Base string // e.g. http://127.0.0.1:8080
	Key  string
	HTTP *http.Client
}

// NewClient returns a client with a transport sized for many concurrent streams to one host.
func NewClient(base, key string) *Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{Base: strings.TrimRight(base, "/"), Key: key, HTTP: &http.Client{Transport: tr}}
}

// CloseIdle closes the client's idle connections.
func (c *Client) CloseIdle() { c.HTTP.CloseIdleConnections() }

// Do sends a JSON request and decodes a JSON answer into out (if not nil).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("x-api-key", c.Key)
	if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

type idOnly struct {
	ID string `json:"id"`
}

// CreateAgent creates an agent; with tools it has the built-in toolset (bash, read, write, ...).
func (c *Client) CreateAgent(ctx context.Context, name string, tools bool) (string, error) {
	body := map[string]any{"name": name, "model": "claude-sonnet-4-5", "system": "You are a benchmark agent."}
	if tools {
		body["tools"] = []any{map[string]any{"type": "agent_toolset_20260401"}}
	}
	var out idOnly
	err := c.Do(ctx, "POST", "/v1/agents", body, &out)
	return out.ID, err
}

// CreateEnvironment creates a cloud environment.
func (c *Client) CreateEnvironment(ctx context.Context, name string) (string, error) {
	var out idOnly
	err := c.Do(ctx, "POST", "/v1/environments", map[string]any{"name": name, "config": map[string]any{"type": "cloud"}}, &out)
	return out.ID, err
}

// CreateSession creates an idle session of the agent in the environment.
func (c *Client) CreateSession(ctx context.Context, agentID, envID string) (string, error) {
	var out idOnly
	err := c.Do(ctx, "POST", "/v1/sessions", map[string]any{"agent": agentID, "environment_id": envID}, &out)
	return out.ID, err
}

// Say sends a user.message with the text.
func (c *Client) Say(ctx context.Context, sessionID, text string) error {
	return c.Do(ctx, "POST", "/v1/sessions/"+sessionID+"/events", map[string]any{"events": []any{
		map[string]any{"type": "user.message", "content": []any{map[string]any{"type": "text", "text": text}}},
	}}, nil)
}

// Event is one event read from a stream.
type Event struct {
	Type       string `json:"type"`
	ID         string `json:"id"`
	StopReason *struct {
		Type string `json:"type"`
	} `json:"stop_reason"`
	Content json.RawMessage `json:"content"`
	// ProcessedAt is, for server events, when the event was appended.
	ProcessedAt *time.Time `json:"processed_at"`
	At          time.Time  `json:"-"` // when the client read it
}

// ModelOutput reports whether the event carries model output: the first such event is the client's "first
// token" (the brain appends the model's answer as agent.thinking, agent.message and agent.tool_use events).
func (e *Event) ModelOutput() bool {
	switch e.Type {
	case "agent.message", "agent.thinking", "agent.tool_use", "agent.custom_tool_use":
		return true
	}
	return false
}

// TurnOver reports whether the event ends a turn: idle with a stop reason other than requires_action, or a
// terminated session.
func (e *Event) TurnOver() bool {
	if e.Type == "session.status_terminated" {
		return true
	}
	return e.Type == "session.status_idle" && (e.StopReason == nil || e.StopReason.Type != "requires_action")
}

// Stream is an open SSE stream of one session's events.
type Stream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

// Open opens the session's event stream; it returns once the server has answered with the stream's headers,
// so every event appended afterwards is delivered on it.
func (c *Client) Open(ctx context.Context, sessionID string) (*Stream, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.Base+"/v1/sessions/"+sessionID+"/events/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", c.Key)
	req.Header.Set("accept", "text/event-stream")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("stream %s: %s: %s", sessionID, resp.Status, bytes.TrimSpace(b))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	return &Stream{resp: resp, sc: sc}, nil
}

// Next returns the next event, stamped with the time it was read.
func (s *Stream) Next() (*Event, error) {
	var data []byte
	for s.sc.Scan() {
		line := s.sc.Bytes()
		switch {
		case len(line) == 0:
			if data == nil {
				continue
			}
			ev := &Event{At: time.Now()}
			if err := json.Unmarshal(data, ev); err != nil {
				return nil, fmt.Errorf("stream event: %w", err)
			}
			if ev.Type == "error" {
				return nil, fmt.Errorf("stream error: %s", data)
			}
			return ev, nil
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimSpace(line[5:])...)
		}
	}
	if err := s.sc.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

// Close closes the stream.
func (s *Stream) Close() { s.resp.Body.Close() }
