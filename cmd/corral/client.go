package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/corralhq/corral/internal/client"
	corral "github.com/corralhq/corral/internal/server" // aliased: the e2e tests have a type server
)

// clientFlags adds --url and --key to a flag set and returns a constructor for the API client: the CLI is a
// client of the same HTTP API every other client uses.
func clientFlags(fs *flag.FlagSet) func() (*client.Client, error) {
	base := new(string)
	urlFlag(fs, base, "url", envOr("CORRAL_URL", "http://"+corral.DefaultListen), "Corral server `URL` (env CORRAL_URL)")
	key := secretFlag(fs, "key", "CORRAL_API_KEY", "API `key`")
	return func() (*client.Client, error) {
		if *key == "" {
			return nil, errors.New("no API key: pass --key or set CORRAL_API_KEY")
		}
		u, err := serverURL(*base)
		if err != nil {
			return nil, err
		}
		return client.New(client.Config{BaseURL: u, APIKey: *key})
	}
}

// serverURL checks a server URL as a user types it: http(s)://HOST[:PORT], the API's root (a trailing /v1, as
// the API's paths begin, is dropped). Its errors say what is wanted, without the URL's password.
func serverURL(raw string) (string, error) {
	want := fmt.Sprintf("want http://HOST:PORT or https://HOST, e.g. http://%s", corral.DefaultListen)
	if !strings.Contains(raw, "://") {
		return "", fmt.Errorf("server URL %q has no scheme: %s (did you mean http://%s?)", redactURL(raw), want, redactURL(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return "", fmt.Errorf("server URL %s is not a URL (%v): %s", redactURL(raw), err, want)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("server URL %s: %s", redactURL(raw), want)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("server URL %s has a query or fragment: %s", redactURL(raw), want)
	}
	u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/v1")
	u.RawPath = ""
	return u.String(), nil
}

// explain words the errors of a request that reached no server: which server, and what to check.
func explain(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	server := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil {
		server = (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	}
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		return fmt.Errorf("cannot reach the server at %s: no host %q (%v); check --url or CORRAL_URL", server, dns.Name, dns.Err)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("cannot reach the server at %s (%v): is corral serve running there? Check --url or CORRAL_URL", server, op.Err)
	case ue.Timeout():
		return fmt.Errorf("the server at %s did not answer in time: %w", server, err)
	}
	return fmt.Errorf("the server at %s: %w", server, ue.Err)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// printJSON writes v indented, without HTML escaping: what was written, as written.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// quietFlag adds --quiet / -q to a create command.
func quietFlag(fs *flag.FlagSet) *bool {
	q := fs.Bool("quiet", false, "print only the new id (for scripts: ID=$(corral ... -q))")
	fs.BoolVar(q, "q", false, "short for --quiet")
	return q
}

// printCreated prints what a create command made: its id alone with --quiet, else the resource as JSON.
func printCreated(w io.Writer, quiet bool, id string, v any) error {
	if quiet {
		_, err := fmt.Fprintln(w, id)
		return err
	}
	return printJSON(w, v)
}
