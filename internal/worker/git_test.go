package worker

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/sandbox"
)

// TestReposEndpointRefusals: the sandbox's git endpoint on a worker serves only git's smart HTTP under
// /git/<resource_id>/, and only for a session the worker holds (its sessions token), in plain text git shows;
// the clones' relay is refused too once the session is let go. (The forwarding itself, through the server's
// relay to a real git server, is TestCorralWorkerRepository's.)
func TestReposEndpointRefusals(t *testing.T) {
	t.Parallel()
	c, _ := apiServer(t)
	h := newHeld()
	g := newRepos(c.BaseURL(), c.HTTPClient(), h, slog.New(slog.DiscardHandler))
	get := func(method, target string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		g.handler("sesn_1").ServeHTTP(rec, httptest.NewRequest(method, "http://corral.internal"+target, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	for _, c := range []struct{ method, target string }{
		{"GET", "/git/res_1/HEAD"},
		{"GET", "/git/res_1/info/refs"},
		{"GET", "/git/res_1/info/refs?service=git-upload-archive"},
		{"POST", "/git/res_1/git-upload-archive"},
		{"GET", "/git/res_1/git-upload-pack"},
		{"GET", "/other/res_1/info/refs?service=git-upload-pack"},
		{"GET", "/git//info/refs?service=git-upload-pack"},
	} {
		if code, body := get(c.method, c.target); code != http.StatusNotFound || !strings.Contains(body, "smart HTTP") {
			t.Errorf("%s %s: %d %q, want 404", c.method, c.target, code, body)
		}
	}
	if code, body := get("GET", "/git/res_1/info/refs?service=git-upload-pack"); code != http.StatusForbidden ||
		!strings.Contains(body, "no longer holds the session") {
		t.Errorf("a session the worker does not hold: %d %q", code, body)
	}
	res := &apitype.Resource{ID: "res_1", Type: apitype.ResourceGitHubRepository}
	if _, _, err := g.remote(t.Context(), "sesn_1", res); err == nil {
		t.Error("a clone's relay for a session the worker does not hold")
	}
	release := h.hold("sesn_1", c.WithKey("corral-wst-abc"), &sandbox.Recipe{Resources: []apitype.Resource{*res}})
	u, auth, err := g.remote(t.Context(), "sesn_1", res)
	if err != nil || u != c.BaseURL()+"/v1/sessions/sesn_1/resources/res_1/git" || auth != "Bearer corral-wst-abc" {
		t.Errorf("the clone's relay: %q %q %v", u, auth, err)
	}
	// A token the server does not know: the relay's 401 reaches git as a 403 (no credential prompt), with why.
	if code, body := get("GET", "/git/res_1/info/refs?service=git-upload-pack"); code != http.StatusForbidden ||
		!strings.Contains(body, "refused (401)") {
		t.Errorf("an unknown sessions token: %d %q", code, body)
	}
	release()
	if _, _, err := g.remote(t.Context(), "sesn_1", res); err == nil {
		t.Error("a clone's relay after the session was let go")
	}
}

// TestReposEndpointBounded: a sandbox's git endpoint forwards at most maxGitRequests requests at once; one more
// is refused with a 429 that says why, and a slot is free again once a request ends.
func TestReposEndpointBounded(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, maxGitRequests), make(chan struct{})
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	t.Cleanup(relay.Close)
	c, err := client.New(client.Config{BaseURL: relay.URL, APIKey: "corral-wst-x"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHeld()
	g := newRepos(c.BaseURL(), c.HTTPClient(), h, slog.New(slog.DiscardHandler))
	defer h.hold("sesn_1", c, &sandbox.Recipe{})()
	endpoint := g.handler("sesn_1")
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		endpoint.ServeHTTP(rec, httptest.NewRequest("GET", "http://corral.internal/git/res_1/info/refs?service=git-upload-pack", nil))
		return rec
	}
	var wg sync.WaitGroup
	for range maxGitRequests {
		wg.Go(func() { get() })
	}
	for range maxGitRequests {
		<-arrived
	}
	if rec := get(); rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), "at most 4 git requests at once") {
		t.Errorf("a request past the bound: %d %q", rec.Code, rec.Body.String())
	}
	close(release)
	wg.Wait()
	if rec := get(); rec.Code != http.StatusOK {
		t.Errorf("a request once the others ended: %d %q", rec.Code, rec.Body.String())
	}
}
