package main

import (
	"flag"
	"net/url"
	"os"
)

// secretValue is a string flag whose value is never printed. The flag package prints a flag's default in -h
// from its Value's String: a key taken from the environment as a default would appear there in plain text.
type secretValue struct{ s *string }

func (v secretValue) String() string { return "" }

func (v secretValue) Set(s string) error {
	*v.s = s
	return nil
}

// secretFlag defines a string flag whose default is the environment variable env. Help says whether env is
// set, never what it holds.
func secretFlag(fs *flag.FlagSet, name, env, usage string) *string {
	s := os.Getenv(env)
	if s != "" {
		usage += " (default: set from $" + env + ")"
	} else {
		usage += " (env " + env + ")"
	}
	fs.Var(secretValue{&s}, name, usage)
	return &s
}

// urlValue is a string flag holding a URL that may carry a password (postgres://user:PASSWORD@host/db): help
// prints its default with the password hidden.
type urlValue struct{ s *string }

func (v urlValue) String() string {
	if v.s == nil {
		return ""
	}
	return redactURL(*v.s)
}

func (v urlValue) Set(s string) error {
	*v.s = s
	return nil
}

// urlFlag defines a URL flag on p with default def, printed in help with any password hidden.
func urlFlag(fs *flag.FlagSet, p *string, name, def, usage string) {
	*p = def
	fs.Var(urlValue{p}, name, usage)
}

// redactURL hides the password of a URL, in its user information or in a password query parameter (which
// PostgreSQL connection URLs accept), so that a URL from the environment can be printed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// An unparsable URL may still hold a secret: print only its scheme, if any.
		if i := indexScheme(raw); i > 0 {
			return raw[:i] + "://…"
		}
		return "…"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// indexScheme returns the length of raw's "scheme" before "://", or -1.
func indexScheme(raw string) int {
	for i := 0; i+3 <= len(raw); i++ {
		if raw[i:i+3] == "://" {
			return i
		}
	}
	return -1
}
