package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultDataDir: the default data directory is a daemon's (/var/lib/corral) for root, the XDG data
// directory for another user, and never under the directory serve was started in: in a checkout, go list ./...
// walks it. The default image cache is the machine's (/var/cache/corral/images for root), not the data
// directory's.
func TestDefaultDataDir(t *testing.T) { // not parallel: it sets CORRAL_DATA
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	home := func() (string, error) { return "/home/ann", nil }
	noHome := func() (string, error) { return "", errors.New("no home") }
	for _, c := range []struct {
		euid int
		env  map[string]string
		home func() (string, error)
		want string
	}{
		{0, map[string]string{"XDG_DATA_HOME": "/x"}, home, "/var/lib/corral"},
		{1000, map[string]string{"XDG_DATA_HOME": "/x/data"}, home, "/x/data/corral"},
		{1000, map[string]string{"XDG_DATA_HOME": "relative"}, home, "/home/ann/.local/share/corral"}, // the spec: relative is ignored
		{1000, nil, home, "/home/ann/.local/share/corral"},
		{1000, nil, noHome, ""},
	} {
		if got := defaultDataDir(c.euid, env(c.env), c.home); got != c.want {
			t.Errorf("euid %d, env %v: %q, want %q", c.euid, c.env, got, c.want)
		}
	}
	for _, c := range []struct {
		euid int
		env  map[string]string
		want string
	}{
		{0, map[string]string{"XDG_CACHE_HOME": "/x"}, "/var/cache/corral/images"},
		{1000, map[string]string{"XDG_CACHE_HOME": "/x/cache"}, "/x/cache/corral/images"},
		{1000, nil, "/home/ann/.cache/corral/images"},
	} {
		if got := defaultImageCache(c.euid, env(c.env), home); got != c.want {
			t.Errorf("image cache: euid %d, env %v: %q, want %q", c.euid, c.env, got, c.want)
		}
	}
	// As this process would run serve: outside the working directory (the module, here).
	got := defaultDataDir(os.Geteuid(), os.Getenv, os.UserHomeDir)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got == "" || !filepath.IsAbs(got) || strings.HasPrefix(got+"/", wd+"/") {
		t.Errorf("default data directory %q: want an absolute path outside %s", got, wd)
	}
	// The flag's default is that directory, shown in -h.
	var sf storeFlags
	fs := newFlagSet(&stdio{out: &strings.Builder{}, err: &strings.Builder{}}, "x", "")
	t.Setenv("CORRAL_DATA", "") // empty: envOr falls back to the default
	sf.register(fs)
	if sf.data != got {
		t.Errorf("--data defaults to %q, want %q", sf.data, got)
	}
	// No home and no --data: a clear error, not a store in the working directory.
	if _, err := (&storeFlags{}).dir(); err == nil || !strings.Contains(err.Error(), "--data") {
		t.Errorf("no data directory: %v", err)
	}
}
