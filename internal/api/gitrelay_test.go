package api_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/vault"
)

// TestGitRelay: the git relay forwards git's smart HTTP to a private repository (a real git server over TLS)
// with the resource's token, which host git never holds: it clones and pushes through the relay with the
// session's sessions token alone. It refuses, in the API's error format, the API key, an environment key (401: a
// route that takes no environment key tries it as an API key), no
// credential, another session's sessions token, another session's resource, a resource that is not a
// repository, and every request that is not one of git's smart-HTTP requests.
func TestGitRelay(t *testing.T) {
	t.Parallel()
	token := "ghp_relay" + apitype.NewID("")
	srv := sandboxtest.NewGitServer(t, token)
	repoURL := srv.NewRepo(t, "o/proj")
	h := newHarness(t, func(c *api.Config) {
		g, err := proxy.NewGit(proxy.GitConfig{Store: c.Store, Vault: c.Sealer.(*vault.Vault), AllowInternal: []string{srv.HostPort},
			RootCAs: srv.RootCAs})
		if err != nil {
			t.Fatal(err)
		}
		c.GitRelay = g
	})
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	envID, key, _ := h.selfHosted(ctx, agentID)
	mem := h.newMemoryStore(ctx, "notes")
	newSession := func() apitype.Session {
		t.Helper()
		body := fmt.Sprintf(`{"agent":%q,"environment_id":%q,"resources":[{"type":"github_repository","url":%q,
			"authorization_token":%q},{"type":"memory_store","memory_store_id":%q}]}`, agentID, envID, repoURL, token, mem.ID)
		code, _, b := h.do("POST", "/v1/sessions", body)
		var s apitype.Session
		decodeRaw(t, string(b), &s)
		if code != http.StatusOK || len(s.Resources) != 2 {
			t.Fatalf("create session: %d %s", code, b)
		}
		return s
	}
	a, b := newSession(), newSession()
	tokens := map[string]string{}
	for _, s := range []apitype.Session{a, b} {
		h.queue(ctx, envID, s.ID)
	}
	for range 2 {
		var polled apitype.Work
		code, _, body := h.do("GET", "/v1/environments/"+envID+"/work/poll", "", bearer(key)...)
		decodeRaw(t, string(body), &polled)
		if code != http.StatusOK || polled.Secret == nil {
			t.Fatalf("poll: %d %s", code, body)
		}
		tokens[polled.Data.ID] = apitype.SessionsTokenFromSecret(*polled.Secret)
	}
	if tokens[a.ID] == "" || tokens[b.ID] == "" {
		t.Fatalf("the polls gave tokens for %v", tokens)
	}
	relay := func(s apitype.Session, rid string) string {
		return "/v1/sessions/" + s.ID + "/resources/" + rid + "/git"
	}
	repoA, memA, repoB := a.Resources[0].ID, a.Resources[1].ID, b.Resources[0].ID

	// The sessions token of the session: the repository's refs, fetched with the resource's token.
	code, hdr, body := h.do("GET", relay(a, repoA)+"/info/refs?service=git-upload-pack", "", bearer(tokens[a.ID])...)
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/x-git-upload-pack-advertisement" ||
		!strings.Contains(string(body), "refs/heads/main") {
		t.Fatalf("info/refs through the relay: %d %s %q", code, hdr.Get("Content-Type"), body)
	}

	// The refusals, in the API's error format.
	for _, c := range []struct {
		name, method, path, cred string
		status                   int
		typ, msg                 string
	}{
		{"API key", "GET", relay(a, repoA) + "/info/refs?service=git-upload-pack", testKey, 403, "permission_error", "only the sessions token"},
		{"environment key", "GET", relay(a, repoA) + "/info/refs?service=git-upload-pack", key, 401, "authentication_error", "invalid"},
		{"no credential", "GET", relay(a, repoA) + "/info/refs?service=git-upload-pack", "", 401, "authentication_error", "missing"},
		{"another session's token", "GET", relay(a, repoA) + "/info/refs?service=git-upload-pack", tokens[b.ID], 403, "permission_error", "another session"},
		{"another session's resource", "GET", relay(a, repoB) + "/info/refs?service=git-upload-pack", tokens[a.ID], 404, "not_found_error", repoB},
		{"a memory store", "GET", relay(a, memA) + "/info/refs?service=git-upload-pack", tokens[a.ID], 403, "permission_error", "only github_repository"},
		{"dumb HTTP", "GET", relay(a, repoA) + "/HEAD", tokens[a.ID], 404, "not_found_error", "smart HTTP"},
		{"info/refs without a service", "GET", relay(a, repoA) + "/info/refs", tokens[a.ID], 404, "not_found_error", "smart HTTP"},
		{"upload-archive", "GET", relay(a, repoA) + "/info/refs?service=git-upload-archive", tokens[a.ID], 404, "not_found_error", "smart HTTP"},
		{"POST upload-archive", "POST", relay(a, repoA) + "/git-upload-archive", tokens[a.ID], 404, "not_found_error", "smart HTTP"},
		{"GET upload-pack", "GET", relay(a, repoA) + "/git-upload-pack", tokens[a.ID], 404, "not_found_error", "smart HTTP"},
	} {
		hdrs := bearer(c.cred)
		if c.cred == "" {
			hdrs = []string{"Authorization", ""}
		}
		code, _, body := h.do(c.method, c.path, "", hdrs...)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		decodeRaw(t, string(body), &e)
		if code != c.status || e.Type != "error" || e.Error.Type != c.typ || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%s: %d %s, want %d %s saying %q", c.name, code, body, c.status, c.typ, c.msg)
		}
	}

	// Host git clones and pushes through the relay with the sessions token alone.
	dir := t.TempDir()
	gitEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Bearer " + tokens[a.ID]}
	git := func(wd string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = wd, gitEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	clone := filepath.Join(dir, "clone")
	git(dir, "clone", "--quiet", h.srv.URL+relay(a, repoA), clone)
	if readme, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(readme) != "v2\n" {
		t.Fatalf("the clone's README: %q %v", readme, err)
	}
	git(clone, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "--quiet", "--allow-empty", "-m", "through the relay")
	git(clone, "push", "--quiet", "origin", "HEAD:main")
	if log := srv.Log(t, "o/proj", "main"); !strings.HasPrefix(log, "through the relay\n") {
		t.Fatalf("upstream main: %q", log)
	}
}

// TestGitRelayAbsent: a server built without a git relay answers its route with a 501 in the API's error format
// (and a sessions token still gets no further than its own session).
func TestGitRelayAbsent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	envID, key, _ := h.selfHosted(ctx, agentID)
	code, _, b := h.do("POST", "/v1/sessions", fmt.Sprintf(`{"agent":%q,"environment_id":%q,"resources":[{"type":"github_repository",
		"url":"https://git.example.com/o/p.git","authorization_token":"ghp_x"}]}`, agentID, envID))
	var s apitype.Session
	decodeRaw(t, string(b), &s)
	if code != http.StatusOK || len(s.Resources) != 1 {
		t.Fatalf("create session: %d %s", code, b)
	}
	h.queue(ctx, envID, s.ID)
	var polled apitype.Work
	code, _, body := h.do("GET", "/v1/environments/"+envID+"/work/poll", "", bearer(key)...)
	decodeRaw(t, string(body), &polled)
	if code != http.StatusOK || polled.Secret == nil {
		t.Fatalf("poll: %d %s", code, body)
	}
	code, _, body = h.do("GET", "/v1/sessions/"+s.ID+"/resources/"+s.Resources[0].ID+"/git/info/refs?service=git-upload-pack", "",
		bearer(apitype.SessionsTokenFromSecret(*polled.Secret))...)
	if code != http.StatusNotImplemented || !strings.Contains(string(body), "no git relay") || !strings.Contains(string(body), `"type":"error"`) {
		t.Errorf("a server without a relay: %d %s", code, body)
	}
}
