package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestServeConsole: the binary serves the embedded console at /console/ beside the API and says where.
func TestServeConsole(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	s := startCorral(t, serverEnv(model, testKey), "corral: listening on ",
		"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--sandbox", "none")
	// The console's line follows the listening line.
	want := "corral: console on " + s.url + "/console/"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.stderr.String(), want) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(s.stderr.String(), want) {
		t.Errorf("serve did not print %q:\n%s", want, s.stderr.String())
	}
	resp, err := http.Get(s.url + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<title>Corral console</title>") {
		t.Fatalf("GET /console/: %s\n%s", resp.Status, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("GET /console/: CSP %q", csp)
	}
	// The API beside it is unchanged: its files need no key, the API does.
	resp, err = http.Get(s.url + "/v1/agents")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/agents without a key: %s", resp.Status)
	}
}

// TestConsoleTextNamesWhatExists: every CLI command the console's pages name exists, and its login field shows
// the form of Corral's keys, not another API's.
func TestConsoleTextNamesWhatExists(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../internal/console/static/*.js")
	if err != nil || len(files) == 0 {
		t.Fatalf("console sources: %v %v", files, err)
	}
	named := 0
	cmdRe := regexp.MustCompile(`corral ([a-z]+) ([a-z]+)`)
	skKey := regexp.MustCompile(`['"\s]sk-`) // a key like sk-…, not a class like ask-title
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for _, m := range cmdRe.FindAllStringSubmatch(src, -1) {
			named++
			var out, errb strings.Builder
			if code := run(context.Background(), &stdio{out: &out, err: &errb}, []string{m[1], m[2], "-h"}); code != 0 {
				t.Errorf("%s names %q, which is no command: %s", filepath.Base(f), m[0], errb.String())
			}
		}
		if skKey.MatchString(src) {
			t.Errorf("%s shows a key of the form sk-…; Corral's keys are %s…", filepath.Base(f), apitype.APIKeySecretPrefix)
		}
	}
	if named < 3 {
		t.Errorf("the console names %d commands; want its empty states' (agents, environments, sessions)", named)
	}
	app, err := os.ReadFile("../../internal/console/static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	if want := "placeholder: '" + apitype.APIKeySecretPrefix + "…'"; !strings.Contains(string(app), want) {
		t.Errorf("the login field's placeholder is not %s", want)
	}
}
