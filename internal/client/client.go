// Package client is the typed Go client of Corral's HTTP API (the Managed Agents API), on the wire types of
// apitype: agents, environments, sessions, session events and their SSE stream, with Last-Event-ID resume.
// The CLI and the benchmark use it, and next the self-hosted worker; it imports nothing of Corral but apitype.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/corralhq/corral/internal/apitype"

	"go.opentelemetry.io/otel/propagation"
)

// BetaHeader is the anthropic-beta value every request carries, as the official SDKs send it.
const BetaHeader = "managed-agents-2026-04-01"

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 1 << 20

// Config configures a Client.
type Config struct {
	// BaseURL is the server's URL, e.g. http://127.0.0.1:8080. Required.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>".
	APIKey string
	// HTTPClient sends the requests; nil means http.DefaultClient. Streams are long-lived: a client with an
	// overall Timeout cuts them.
	HTTPClient *http.Client
}

func (c *Config) validate() error {
	if c.BaseURL == "" {
		return errors.New("client: Config.BaseURL is required")
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		return fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("client: base URL %q: want http://HOST or https://HOST", c.BaseURL)
	}
	return nil
}

// Client is a client of one Corral server. It is safe for concurrent use.
type Client struct {
	base string
	key  string
	http *http.Client
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(cfg.BaseURL, "/"), key: cfg.APIKey, http: hc}, nil
}

// BaseURL is the server's URL, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// HTTPClient is the HTTP client the client sends its requests with (`corral worker`'s git relay sends git's
// through it too).
func (c *Client) HTTPClient() *http.Client { return c.http }

// CloseIdleConnections closes the idle connections of the client's HTTP client.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Error is an error response of the API: its HTTP status and the error envelope it sent.
type Error struct {
	// Status is the HTTP status code; 0 for an error sent as a frame on an event stream (which began 200).
	Status int
	// Type is the envelope's error type (an apitype.ErrorType: apitype.ErrNotFound, ...), or the status text
	// when the answer was not an envelope.
	Type string
	// Message is the envelope's message, or the body when the response was not an envelope.
	Message string
	// RequestID identifies the request in the server's log (the envelope's request_id, or the request-id
	// header).
	RequestID string
	// Details holds the envelope's details, if any.
	Details map[string]any
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d ", e.Status)
	}
	fmt.Fprintf(&b, "%s: %s", e.Type, e.Message)
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request %s)", e.RequestID)
	}
	return b.String()
}

// Temporary reports whether the request may succeed if repeated: a stream error, 408, 429 or a 5xx.
func (e *Error) Temporary() bool {
	return e.Status == 0 || e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests ||
		e.Status >= 500
}

// IsNotFound reports whether err is a 404 of the API.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// errorOf builds the Error of a non-2xx response.
func errorOf(resp *http.Response) *Error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("request-id")}
	var env apitype.ErrorEnvelope
	if json.Unmarshal(raw, &env) == nil && env.Error.Type != "" {
		e.Type, e.Message, e.Details = string(env.Error.Type), env.Error.Message, env.Error.Details
		if env.RequestID != "" {
			e.RequestID = env.RequestID
		}
		return e
	}
	e.Type = http.StatusText(resp.StatusCode)
	e.Message = strings.TrimSpace(string(raw))
	return e
}

// request sends a request (body encoded as JSON unless nil; an io.Reader is sent as is) and returns a 2xx response, or an *Error.
func (c *Client) request(ctx context.Context, method, path string, query url.Values, body any, header http.Header) (*http.Response, error) {
	var rd io.Reader
	raw, isRaw := body.(io.Reader)
	if isRaw {
		rd = raw // sent as is; header gives its Content-Type
	} else if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(buf)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	req.Header.Set("anthropic-beta", BetaHeader)
	// The caller's trace, if ctx carries a span: the server's request span joins it.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	if body != nil && !isRaw {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, errorOf(resp)
	}
	return resp, nil
}

// do sends a JSON request and decodes the JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := c.request(ctx, method, path, query, body, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

// call sends a JSON request and returns its JSON answer decoded as a T.
func call[T any](ctx context.Context, c *Client, method, path string, query url.Values, body any) (*T, error) {
	var out T
	if err := c.do(ctx, method, path, query, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Page is one page of a list: the items and the token of the next page (nil on the last page).
type Page[T any] struct {
	Data     []T     `json:"data"`
	NextPage *string `json:"next_page"`
	// PrevPage is set by the session list only (its pages go both ways).
	PrevPage *string `json:"prev_page,omitempty"`
}

// Next returns the token of the next page, "" on the last page.
func (p *Page[T]) Next() string {
	if p.NextPage == nil {
		return ""
	}
	return *p.NextPage
}

// ListParams are the paging parameters the resource lists share.
type ListParams struct {
	// Limit is the page size (0: the server's default, 20; at most 100).
	Limit int
	// Page is a token from a previous page's NextPage.
	Page string
	// IncludeArchived lists archived resources too.
	IncludeArchived bool
}

func (p *ListParams) values() url.Values {
	q := url.Values{}
	if p == nil {
		return q
	}
	if p.Limit > 0 {
		q.Set("limit", fmt.Sprint(p.Limit))
	}
	if p.Page != "" {
		q.Set("page", p.Page)
	}
	if p.IncludeArchived {
		q.Set("include_archived", "true")
	}
	return q
}

// Deleted is the answer to a DELETE: the id and a type such as "session_deleted".
type Deleted struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

func pathOf(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 0 {
			b.WriteString(p)
		} else {
			b.WriteString(url.PathEscape(p))
		}
	}
	return b.String()
}
