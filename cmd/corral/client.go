package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// client is the CLI's HTTP client of the Managed Agents API: the same API every other client uses.
type client struct {
	base string
	key  string
	http *http.Client
}

// clientFlags adds --url and --key to a flag set and returns a constructor for the client.
func clientFlags(fs *flag.FlagSet) func() (*client, error) {
	base := fs.String("url", envOr("CORRAL_URL", "http://127.0.0.1:8080"), "Corral server `URL` (env CORRAL_URL)")
	key := fs.String("key", os.Getenv("CORRAL_API_KEY"), "API `key` (env CORRAL_API_KEY)")
	return func() (*client, error) {
		if *key == "" {
			return nil, errors.New("no API key: pass --key or set CORRAL_API_KEY")
		}
		return &client{base: strings.TrimRight(*base, "/"), key: *key, http: http.DefaultClient}, nil
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// apiError is an error response in the API's envelope.
type apiError struct {
	Status int
	Body   apitype.ErrorEnvelope
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Body.Error.Type, e.Body.Error.Message)
}

// do sends a JSON request and decodes a JSON response into out (if not nil).
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := c.send(ctx, method, path, query, body, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}

// send sends a request and returns a 2xx response, or the API error.
func (c *client) send(ctx context.Context, method, path string, query url.Values, body any, header http.Header) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(buf)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("anthropic-beta", "managed-agents-2026-04-01")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		e := &apiError{Status: resp.StatusCode}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(raw, &e.Body) != nil || e.Body.Error.Message == "" {
			e.Body.Error.Type = http.StatusText(resp.StatusCode)
			e.Body.Error.Message = strings.TrimSpace(string(raw))
		}
		return nil, e
	}
	return resp, nil
}

// printJSON writes v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// subcommand dispatches "corral NOUN VERB ..." to the verb's function.
func subcommand(ctx context.Context, io *stdio, noun string, args []string, verbs map[string]func(context.Context, *stdio, []string) error) error {
	names := slices.Sorted(maps.Keys(verbs))
	if len(args) == 0 {
		fmt.Fprintf(io.err, "Usage: corral %s <%s> [flags]\n", noun, strings.Join(names, "|"))
		return errUsage
	}
	run, ok := verbs[args[0]]
	if !ok {
		fmt.Fprintf(io.err, "corral %s: unknown subcommand %q (want %s)\n", noun, args[0], strings.Join(names, ", "))
		return errUsage
	}
	return run(ctx, io, args[1:])
}
