package sandboxtest

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// RepoSetup is the server side of sessions with a private repository, as corral serve wires it: the workspace
// Placer that clones with the token, the git endpoint (an EgressSource), and sessions in its store.
type RepoSetup struct {
	Placer sandbox.Placer
	Egress sandbox.EgressSource
	// Session stores a new session with one github_repository resource of repoURL whose authorization_token
	// is token (none if empty), and returns the session's id and the resource.
	Session func(t testing.TB, repoURL, token string) (string, apitype.Resource)
	// MasterKey is the encoded master key of the vault the tokens are sealed under: it must not be visible
	// in a sandbox either.
	MasterKey string
}

// RepoHost builds a RepoSetup whose destinations include srv (trusted as an internal host:port, its CA
// trusted). internal/proxy/proxytest.Host is the one corral's components make.
type RepoHost func(t testing.TB, srv *GitServer) RepoSetup

// repoPool returns a pool with setup's Placer and git endpoint.
func repoPool(t *testing.T, newProvider func(testing.TB) sandbox.Provider, setup RepoSetup) *sandbox.Pool {
	t.Helper()
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: newProvider(t), WorkspaceRoot: WorkspaceRoot(t),
		Placer: setup.Placer, Egress: setup.Egress})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return p
}

// repoCall is a bash call in a session with the repository resource res.
func repoCall(session string, res apitype.Resource, command string, timeout time.Duration) *sandbox.Call {
	c := call(session, "bash", map[string]any{"command": command, "timeout_ms": timeout.Milliseconds()})
	c.Recipe.Resources = []apitype.Resource{res}
	return c
}

// runRepo runs a bash call of a repository session; the sandbox's provisioning must have placed the repository.
func runRepo(t *testing.T, p *sandbox.Pool, c *sandbox.Call) (string, bool) {
	t.Helper()
	var placeErr []*sandbox.ResourceError
	c.OnProvision = func(r sandbox.ProvisionReport) { placeErr = append(placeErr, r.ResourceErrors...) }
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute) // fail, never hang (past the longest call's timeout)
	defer cancel()
	res, err := p.Execute(ctx, c)
	if err != nil {
		t.Fatalf("bash %s: %v", c.Input, err)
	}
	if len(placeErr) > 0 {
		t.Fatalf("the repository was not placed: %v", placeErr)
	}
	return res.Text(), res.IsError
}

// gitIdentity lets the sandbox's git commit.
const gitIdentity = "export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.com GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.com; "

// RunRepository checks private repositories end to end: a session's repository is cloned on the host with its
// token, its origin inside the sandbox is the git endpoint, and from bash in the sandbox git fetch, pull and
// push reach the repository (the commit arrives upstream) while the endpoint refuses every other URL. A revoked
// token makes the push fail with a clear message and no credential prompt.
func RunRepository(t *testing.T, newProvider func(testing.TB) sandbox.Provider, host RepoHost) {
	token := fmt.Sprintf("ghp_repoToken%d", time.Now().UnixNano())
	srv := NewGitServer(t, token)
	repoURL := srv.NewRepo(t, "o/proj")
	setup := host(t, srv)
	p := repoPool(t, newProvider, setup)
	session, res := setup.Session(t, repoURL, token)
	other, otherRes := setup.Session(t, srv.NewRepo(t, "o/other"), token)
	_ = other

	out, failed := runRepo(t, p, repoCall(session, res, "cd /workspace/proj && git remote get-url origin && cat README && "+
		gitIdentity+"git commit --quiet --allow-empty -m from-sandbox && git push --quiet origin HEAD:main && "+
		"git pull --quiet --ff-only origin main && git fetch --quiet && git log --format=%s -1 origin/main", 2*time.Minute))
	if failed {
		t.Errorf("push from the sandbox: %s", out)
	}
	want := "http://" + sandbox.LocalHost + "/git/" + res.ID + "\nv2\nfrom-sandbox"
	if strings.TrimSpace(out) != want {
		t.Errorf("in the sandbox: %q, want %q", out, want)
	}
	if log := srv.Log(t, "o/proj", "main"); !strings.HasPrefix(log, "from-sandbox\n") {
		t.Errorf("upstream main: %q, want the sandbox's commit on top", log)
	}
	// A commit pushed upstream by someone else reaches the sandbox with git pull.
	srv.Commit(t, "o/proj", "from-upstream")
	out, failed = runRepo(t, p, repoCall(session, res, "cd /workspace/proj && git pull --quiet --ff-only && git log --format=%s -2", time.Minute))
	if failed || strings.TrimSpace(out) != "from-upstream\nfrom-sandbox" {
		t.Errorf("pull in the sandbox: %q", out)
	}

	// The endpoint serves only this session's repositories, only smart HTTP, only in plain HTTP.
	before := len(srv.Seen())
	curl := "curl -s -o /dev/null -w '%{http_code}\\n' --max-time 20 --noproxy '' -x \"$http_proxy\" "
	base := "http://" + sandbox.LocalHost + "/git/"
	refused := []struct{ url, code string }{
		{base + otherRes.ID + "/info/refs?service=git-upload-pack", "403"}, // another session's repository
		{base + "sesrsc_nonexistent/info/refs?service=git-upload-pack", "403"},
		{base + res.ID + "/HEAD", "404"},
		{base + res.ID + "/objects/info/packs", "404"},
		{base + res.ID + "/info/refs", "404"},
		{base + res.ID + "/info/refs?service=git-upload-archive", "404"},
		{base + res.ID + "/../../etc/passwd", "404"},
		{"http://" + sandbox.LocalHost + "/", "404"},
		{"http://" + sandbox.LocalHost + "/o/proj.git/info/refs?service=git-upload-pack", "404"},
	}
	var cmd strings.Builder
	for _, r := range refused {
		fmt.Fprintf(&cmd, "%s --path-as-is '%s'; ", curl, r.url)
	}
	cmd.WriteString(curl + "https://" + sandbox.LocalHost + base[len("http://"+sandbox.LocalHost):] + res.ID + "/info/refs?service=git-upload-pack; true")
	out, _ = runRepo(t, p, repoCall(session, res, cmd.String(), time.Minute))
	codes := strings.Fields(out)
	if len(codes) != len(refused)+1 {
		t.Fatalf("refusals: %q", out)
	}
	for i, r := range refused {
		if codes[i] != r.code {
			t.Errorf("%s: %s, want %s", r.url, codes[i], r.code)
		}
	}
	if codes[len(refused)] != "000" && codes[len(refused)] != "403" {
		t.Errorf("https to the endpoint: %s, want a refused tunnel", codes[len(refused)])
	}
	if seen := srv.Seen(); len(seen) != before {
		t.Errorf("refused requests reached the repository: %d requests", len(seen)-before)
	}

	// The operator's trusted internal destination is reachable through the sandbox's proxy (without the token:
	// the server answers 401); any other internal address is still refused.
	untrusted, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	out, _ = runRepo(t, p, repoCall(session, res, curl+"-k '"+repoURL+"/info/refs?service=git-upload-pack'; "+
		curl+"'http://"+untrusted.Addr().String()+"/'", time.Minute))
	if codes := strings.Fields(out); len(codes) != 2 || codes[0] != "401" || codes[1] != "403" {
		t.Errorf("trusted and untrusted internal destinations through the proxy: %q, want 401 and 403", out)
	}

	// A revoked token: the push fails, saying so, and git asks for no credentials.
	srv.SetToken(token + "-rotated")
	out, failed = runRepo(t, p, repoCall(session, res, "cd /workspace/proj && "+gitIdentity+
		"git commit --quiet --allow-empty -m after-revocation && GIT_TERMINAL_PROMPT=0 git push --quiet origin HEAD:main 2>&1", time.Minute))
	if !failed || !strings.Contains(out, "refused the session's token") || strings.Contains(out, "Username") {
		t.Errorf("push with a revoked token: %q", out)
	}
	if strings.Contains(out, token) || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))) {
		t.Errorf("the push's error shows the token: %q", out)
	}
}
