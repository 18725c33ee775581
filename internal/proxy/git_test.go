package proxy_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/proxy/proxytest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

// place runs the setup's Placer for one repository resource in a new workspace and returns its error (nil if
// placed) and the workspace.
func place(t *testing.T, setup sandboxtest.RepoSetup, session string, res apitype.Resource) (*sandbox.ResourceError, string) {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	errs := setup.Placer.Place(context.Background(), &sandbox.Recipe{SessionID: session, Resources: []apitype.Resource{res}},
		sandbox.HostDirs{Workspace: ws})
	if len(errs) == 0 {
		return nil, ws
	}
	if len(errs) != 1 {
		t.Fatalf("errors: %v", errs)
	}
	return errs[0], ws
}

// TestCloneErrors: a clone with the resource's token succeeds and leaves no token in the clone; each failure
// of the remote maps to its typed error, and no error shows the token.
func TestCloneErrors(t *testing.T) {
	t.Parallel()
	token := fmt.Sprintf("ghp_cloneToken%d", time.Now().UnixNano())
	srv := sandboxtest.NewGitServer(t, token)
	repo := srv.NewRepo(t, "o/proj")
	forbidden := srv.NewRepo(t, "forbidden/proj")
	setup := proxytest.Host(t, srv)
	secrets := []string{token, base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))}

	session, res := setup.Session(t, repo, token)
	rerr, ws := place(t, setup, session, res)
	if rerr != nil {
		t.Fatalf("clone: %v", rerr)
	}
	cfg, err := os.ReadFile(filepath.Join(ws, "proj", ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "url = "+sandbox.LocalRemote(res.ID)+"\n") {
		t.Errorf("origin is not the git endpoint:\n%s", cfg)
	}
	err = filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds the token", p)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	branch := func(r apitype.Resource, name string) apitype.Resource {
		r.Checkout = &apitype.Checkout{Type: apitype.CheckoutBranch, Name: name}
		return r
	}
	for _, tc := range []struct {
		name, url, token string
		tweak            func(apitype.Resource) apitype.Resource
		want             apitype.SessionErrorType
	}{
		{"wrong token", repo, token + "x", nil, apitype.SessionErrRepositoryAuthentication},
		{"no token", repo, "", nil, apitype.SessionErrRepositoryAuthentication},
		{"forbidden", forbidden, token, nil, apitype.SessionErrRepositoryForbidden},
		{"unknown repository", srv.URL + "/o/missing.git", token, nil, apitype.SessionErrRepositoryNotFound},
		{"unknown host", "https://nonexistent.invalid/o/proj.git", token, nil, apitype.SessionErrRepositoryClone},
		{"untrusted internal address", "https://127.0.0.1:1/o/proj.git", token, nil, apitype.SessionErrRepositoryClone},
		{"missing branch", repo, token, func(r apitype.Resource) apitype.Resource { return branch(r, "nope") }, apitype.SessionErrRepositoryCheckout},
	} {
		session, res := setup.Session(t, tc.url, tc.token)
		if tc.tweak != nil {
			res = tc.tweak(res)
		}
		rerr, _ := place(t, setup, session, res)
		if rerr == nil {
			t.Errorf("%s: placed", tc.name)
			continue
		}
		if rerr.ErrorType != tc.want {
			t.Errorf("%s: %s (%v), want %s", tc.name, rerr.ErrorType, rerr, tc.want)
		}
		for _, s := range secrets {
			if strings.Contains(rerr.Error(), s) {
				t.Errorf("%s: the error shows the token: %v", tc.name, rerr)
			}
		}
		t.Logf("%s: %s: %v", tc.name, rerr.ErrorType, rerr)
	}

	// A token revoked upstream (expired): an authentication error.
	srv.SetToken(token + "-new")
	session, res = setup.Session(t, repo, token)
	if rerr, _ := place(t, setup, session, res); rerr == nil || rerr.ErrorType != apitype.SessionErrRepositoryAuthentication {
		t.Errorf("revoked token: %v", rerr)
	}
}

// TestGitEndpoint: the endpoint forwards git's smart-HTTP requests for a session's repository with its token
// and refuses everything else without reaching the repository; a 401 of the repository is not passed on (git
// would ask for credentials).
func TestGitEndpoint(t *testing.T) {
	t.Parallel()
	token := fmt.Sprintf("ghp_endpointToken%d", time.Now().UnixNano())
	srv := sandboxtest.NewGitServer(t, token)
	repo := srv.NewRepo(t, "o/proj")
	setup := proxytest.Host(t, srv)
	session, res := setup.Session(t, repo, token)
	other, otherRes := setup.Session(t, srv.NewRepo(t, "o/other"), token)
	eg, err := setup.Egress.Egress(context.Background(), &sandbox.Recipe{SessionID: session})
	if err != nil {
		t.Fatal(err)
	}
	if eg.Local == nil || len(eg.AllowInternal) != 1 || eg.AllowInternal[0] != srv.HostPort || eg.RootCAs == nil {
		t.Fatalf("egress: %+v", eg)
	}
	local := httptest.NewServer(eg.Local)
	defer local.Close()
	do := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, local.URL+path, strings.NewReader(""))
		resp, err := local.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := do("GET", "/git/"+res.ID+"/info/refs?service=git-upload-pack")
	if code != 200 || !strings.Contains(body, "refs/heads/main") {
		t.Fatalf("info/refs: %d %q", code, body)
	}
	if seen := srv.Seen(); len(seen) != 1 || seen[0] != proxy.BasicToken(token) {
		t.Fatalf("the repository saw %d requests, the last without the token", len(seen))
	}
	_ = other
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/git/" + otherRes.ID + "/info/refs?service=git-upload-pack", 403},
		{"POST", "/git/" + otherRes.ID + "/git-receive-pack", 403},
		{"GET", "/git/sesrsc_x/info/refs?service=git-upload-pack", 403},
		{"GET", "/git//info/refs?service=git-upload-pack", 403},
		{"GET", "/git/" + res.ID + "/info/refs", 404},
		{"GET", "/git/" + res.ID + "/info/refs?service=git-upload-archive", 404},
		{"GET", "/git/" + res.ID + "/git-upload-pack", 404},
		{"POST", "/git/" + res.ID + "/info/refs?service=git-upload-pack", 404},
		{"GET", "/git/" + res.ID + "/HEAD", 404},
		{"GET", "/git/" + res.ID + "/objects/info/packs", 404},
		{"GET", "/o/proj.git/info/refs?service=git-upload-pack", 404},
		{"GET", "/", 404},
	} {
		if code, body := do(tc.method, tc.path); code != tc.code || !strings.HasPrefix(body, "corral git endpoint: ") {
			t.Errorf("%s %s: %d %q, want %d", tc.method, tc.path, code, body, tc.code)
		}
	}
	if n := len(srv.Seen()); n != 1 {
		t.Errorf("refused requests reached the repository (%d requests)", n-1)
	}
	srv.SetToken("revoked")
	code, body = do("GET", "/git/"+res.ID+"/info/refs?service=git-receive-pack")
	if code != http.StatusForbidden || !strings.Contains(body, "refused the session's token") || strings.Contains(body, token) {
		t.Errorf("revoked token: %d %q", code, body)
	}
}
