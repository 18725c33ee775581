package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
