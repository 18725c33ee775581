package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

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
		return client.New(client.Config{BaseURL: *base, APIKey: *key})
	}
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
