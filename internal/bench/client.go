package bench

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
)

// Client is the benchmark's client of Corral's HTTP API: internal/client (the one the CLI uses) over a transport
// sized for many concurrent streams to one host, with the few calls a workload makes. Its event streams have a
// transport of their own: a stream holds its connection until it is closed, and on a shared pool the call after
// a stream's open (a session's first message, whose time the TTFT measures) would find no idle connection and
// dial one, as a client that keeps its connections warm does not.
type Client struct {
	*client.Client
	streams *client.Client
}

// NewClient returns a client of the server at base with a transport sized for many concurrent streams to one
// host. base is a server's own URL: an invalid one is a programming error, and panics.
func NewClient(base, key string) *Client {
	return &Client{Client: newAPIClient(base, key), streams: newAPIClient(base, key)}
}

func newAPIClient(base, key string) *client.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
	}
	c, err := client.New(client.Config{BaseURL: base, APIKey: key, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		panic(err)
	}
	return c
}

// CloseIdleConnections closes the idle connections of both transports.
func (c *Client) CloseIdleConnections() {
	c.Client.CloseIdleConnections()
	c.streams.CloseIdleConnections()
}

// CreateAgent creates an agent; with tools it has the built-in toolset (bash, read, write, ...).
func (c *Client) CreateAgent(ctx context.Context, name string, tools bool) (string, error) {
	p := &client.AgentCreateParams{Name: name, Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}, System: "You are a benchmark agent."}
	if tools {
		p.Tools = []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}}
	}
	a, err := c.AgentCreate(ctx, p)
	if err != nil {
		return "", err
	}
	return a.ID, nil
}

// CreateEnvironment creates a cloud environment with packages (nil: none).
func (c *Client) CreateEnvironment(ctx context.Context, name string, packages *apitype.Packages) (string, error) {
	e, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: name, Config: apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: packages}})
	if err != nil {
		return "", err
	}
	return e.ID, nil
}

// CreateSession creates an idle session of the agent in the environment, with resources.
func (c *Client) CreateSession(ctx context.Context, agentID, envID string, resources ...client.ResourceParams) (string, error) {
	s, err := c.SessionCreate(ctx, &client.SessionCreateParams{Agent: client.AgentRef{ID: agentID}, EnvironmentID: envID, Resources: resources})
	if err != nil {
		return "", err
	}
	return s.ID, nil
}

// Say sends a user.message with the text.
func (c *Client) Say(ctx context.Context, sessionID, text string) error {
	_, err := c.EventSend(ctx, sessionID, client.UserMessage(text))
	return err
}

// Event is one event read from a stream, stamped with the time it was read.
type Event struct {
	*client.Event
	// Content is the event's content field, raw (a workload looks for its markers in it).
	Content json.RawMessage
	At      time.Time // when the client read it
}

// ModelOutput reports whether the event carries model output: the first such event is the client's "first
// token" (the brain appends the model's answer as agent.thinking, agent.message and agent.tool_use events).
func (e *Event) ModelOutput() bool {
	switch e.Type {
	case apitype.EventAgentMessage, apitype.EventAgentThinking, apitype.EventAgentToolUse, apitype.EventAgentCustomToolUse:
		return true
	}
	return false
}

// Stream is an open SSE stream of one session's events.
type Stream struct {
	s *client.Stream
}

// Open opens the session's event stream; it returns once the server has answered with the stream's headers,
// so every event appended afterwards is delivered on it.
func (c *Client) Open(ctx context.Context, sessionID string) (*Stream, error) {
	s, err := c.streams.EventStream(ctx, sessionID, nil)
	if err != nil {
		return nil, err
	}
	return &Stream{s: s}, nil
}

// Next returns the next event, stamped with the time it was read. An error frame is a *client.Error; the end
// of the stream io.EOF.
func (s *Stream) Next() (*Event, error) {
	ev, err := s.s.Next()
	if err != nil {
		return nil, err
	}
	out := &Event{Event: ev, At: time.Now()}
	var body struct {
		Content json.RawMessage `json:"content"`
	}
	if err := ev.Decode(&body); err != nil {
		return nil, err
	}
	out.Content = body.Content
	return out, nil
}

// Close closes the stream.
func (s *Stream) Close() { _ = s.s.Close() }
