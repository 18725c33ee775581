package workspace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/workspace"
)

// placerPool is a Pool over prov with a Placer of cfg.
func placerPool(t *testing.T, prov sandbox.Provider, root string, cfg workspace.Config) *sandbox.Pool {
	t.Helper()
	placer, err := workspace.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, Placer: placer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// resourcePool is a Pool over prov whose repositories may come from local paths (the test repositories).
func resourcePool(t *testing.T, prov sandbox.Provider, root string, allowLocal bool) *sandbox.Pool {
	t.Helper()
	return placerPool(t, prov, root, workspace.Config{AllowLocalURLs: allowLocal})
}

// repoResource is a github_repository resource; checkout is a JSON object or "".
func repoResource(url, mountPath, checkout string) apitype.Resource {
	r := apitype.Resource{ID: "sesrsc_" + filepath.Base(mountPath) + checkout, Type: "github_repository", URL: url, MountPath: mountPath}
	if checkout != "" {
		r.Checkout = new(apitype.Checkout)
		if err := json.Unmarshal([]byte(checkout), r.Checkout); err != nil {
			panic(err)
		}
	}
	return r
}

// provisionWith runs one tool call for a session with the resources and returns its result and the resource
// errors its provisioning reported.
func provisionWith(t *testing.T, p *sandbox.Pool, session string, res ...apitype.Resource) (sandbox.Result, []*sandbox.ResourceError) {
	t.Helper()
	var mu sync.Mutex
	var unplaced []*sandbox.ResourceError
	c := call(session)
	c.Recipe.Resources = res
	c.OnProvision = func(r sandbox.ProvisionReport) {
		mu.Lock()
		defer mu.Unlock()
		if r.Err != nil {
			t.Errorf("provisioning failed: %v", r.Err)
		}
		if !r.Done && r.ResourceErrors != nil {
			t.Error("resource errors reported at the start of provisioning")
		}
		unplaced = append(unplaced, r.ResourceErrors...)
	}
	out, err := p.Execute(context.Background(), c)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return out, unplaced
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gitOut runs git in a clone and returns its trimmed output.
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestResourcesRepositoryPlaced: repositories are cloned before the first sandbox, at the default mount path
// (/workspace/<repo-name>) and at custom ones, on the default branch, a named branch or a commit.
func TestResourcesRepositoryPlaced(t *testing.T) {
	t.Parallel()
	repo := sandboxtest.NewGitRepo(t)
	prov := &fakeProvider{}
	root := t.TempDir()
	p := resourcePool(t, prov, root, true)
	out, unplaced := provisionWith(t, p, "sess_repo",
		repoResource(repo.Path, "", ""),
		repoResource(repo.Path, "/workspace/src/branch", `{"type":"branch","name":"feature"}`),
		repoResource(repo.Path, "/workspace/at-commit/", `{"type":"commit","sha":"`+repo.First+`"}`),
	)
	if len(unplaced) != 0 {
		t.Fatalf("unplaced resources: %v", unplaced)
	}
	if len(out.Content) != 1 || strings.Contains(out.Content[0].Text, "Note:") {
		t.Errorf("result has a note although every resource was placed: %+v", out)
	}
	ws := filepath.Join(root, "sess_repo")
	def := filepath.Join(ws, "proj")
	if got := readFile(t, filepath.Join(def, "README")); got != "v2\n" {
		t.Errorf("default branch README = %q, want v2", got)
	}
	if got := gitOut(t, def, "rev-parse", "HEAD"); got != repo.Second {
		t.Errorf("default clone at %s, want %s", got, repo.Second)
	}
	br := filepath.Join(ws, "src", "branch")
	if got := readFile(t, filepath.Join(br, "feature.txt")); got != "feature\n" {
		t.Errorf("branch feature.txt = %q", got)
	}
	if got := gitOut(t, br, "rev-parse", "--abbrev-ref", "HEAD"); got != "feature" {
		t.Errorf("branch clone is on %q, want feature", got)
	}
	at := filepath.Join(ws, "at-commit")
	if got := readFile(t, filepath.Join(at, "README")); got != "v1\n" {
		t.Errorf("commit checkout README = %q, want v1", got)
	}
	if got := gitOut(t, at, "rev-parse", "HEAD"); got != repo.First {
		t.Errorf("commit clone at %s, want %s", got, repo.First)
	}
	// The clone's remote is the URL as given, and the workspace holds nothing else of the placement.
	if got := gitOut(t, def, "remote", "get-url", "origin"); got != repo.Path {
		t.Errorf("origin = %q, want %q", got, repo.Path)
	}
	entries, err := os.ReadDir(ws)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "at-commit proj src" {
		t.Errorf("workspace holds %v, want the three clones only", names)
	}
	if len(prov.recipes) != 1 || len(prov.recipes[0].Resources) != 3 {
		t.Errorf("provider got recipes %+v, want one with the resources", prov.recipes)
	}
}

// TestResourcesPlacedOnce: a re-provisioned sandbox (the first one died) and a new Pool over the same
// workspaces (a restarted server) find the repository as the session left it: it is not cloned again, and a
// resource that failed is not reported again.
func TestResourcesPlacedOnce(t *testing.T) {
	t.Parallel()
	repo := sandboxtest.NewGitRepo(t)
	prov := &fakeProvider{}
	root := t.TempDir()
	p := resourcePool(t, prov, root, true)
	res := []apitype.Resource{repoResource(repo.Path, "", ""), repoResource(repo.Path+"-missing", "/workspace/missing", "")}
	_, unplaced := provisionWith(t, p, "sess_once", res...)
	if len(unplaced) != 1 || unplaced[0].MountPath != "/workspace/missing" {
		t.Fatalf("unplaced = %v, want the missing repository", unplaced)
	}
	readme := filepath.Join(root, "sess_once", "proj", "README")
	if err := os.WriteFile(readme, []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prov.mu.Lock()
	prov.live[0].dead.Store(true)
	prov.mu.Unlock()
	c := call("sess_once")
	c.Recipe.Resources = res
	if _, err := p.Execute(context.Background(), c); !errors.Is(err, sandbox.ErrSandboxDead) {
		t.Fatalf("Execute on a dead sandbox: %v", err)
	}
	out, unplaced := provisionWith(t, p, "sess_once", res...)
	if n := prov.provisions.Load(); n != 2 {
		t.Fatalf("%d provisions, want 2", n)
	}
	if len(unplaced) != 0 || strings.Contains(out.Content[0].Text, "Note:") {
		t.Errorf("re-provisioning reported resources again: %v %+v", unplaced, out)
	}
	if got := readFile(t, readme); got != "edited\n" {
		t.Errorf("README = %q after re-provisioning, want the session's edit", got)
	}

	p2 := resourcePool(t, prov, root, true)
	if _, unplaced := provisionWith(t, p2, "sess_once", res...); len(unplaced) != 0 {
		t.Errorf("a new pool placed resources again: %v", unplaced)
	}
	if got := readFile(t, readme); got != "edited\n" {
		t.Errorf("README = %q after a restart, want the session's edit", got)
	}
}

// TestResourcesRefused: URLs other than https (unless allowed for tests), URLs with credentials, mount paths
// outside /workspace and file resources are refused with a clear error; the session's sandbox runs without
// them, and its first tool result (only the first) says so.
func TestResourcesRefused(t *testing.T) {
	t.Parallel()
	repo := sandboxtest.NewGitRepo(t)
	cases := []struct {
		name string
		res  apitype.Resource
		want string
	}{
		{"local path", repoResource(repo.Path, "/workspace/a", ""), "local paths are not allowed"},
		{"file url", repoResource("file://"+repo.Path, "/workspace/b", ""), "scheme file is not allowed"},
		{"file etc", repoResource("file:///etc", "/workspace/c", ""), "scheme file is not allowed"},
		{"http", repoResource("http://example.com/o/r", "/workspace/d", ""), "scheme http is not allowed"},
		{"ssh", repoResource("ssh://git@example.com/o/r", "/workspace/e", ""), `scheme "ssh" is not allowed`},
		{"scp-like", repoResource("git@example.com:o/r.git", "/workspace/f", ""), "is not allowed"},
		{"ext", repoResource("ext::sh -c touch% /tmp/pwned", "/workspace/g", ""), "is not allowed"},
		{"credentials", repoResource("https://user:secret@example.com/o/r", "/workspace/h", ""), "carries credentials"},
		{"outside workspace", repoResource("https://example.com/o/r", "/etc/r", ""), "must lie under /workspace/"},
		{"dotdot", repoResource("https://example.com/o/r", "/workspace/../etc", ""), "must lie under /workspace/"},
		{"workspace itself", repoResource("https://example.com/o/r", "/workspace", ""), "must lie under /workspace/"},
		{"relative", repoResource("https://example.com/o/r", "workspace/r", ""), "must be an absolute path"},
		{"bad branch", repoResource("https://example.com/o/r", "/workspace/i", `{"type":"branch","name":"--upload-pack=x"}`), "invalid branch name"},
		{"no repository name", repoResource("https://example.com/", "", ""), "names no repository"},
		{"file", apitype.Resource{ID: "sesrsc_file", Type: apitype.ResourceFile, FileID: "file_1"}, "this server has no file storage"},
		{"unknown type", apitype.Resource{ID: "sesrsc_x", Type: "volume"}, `unsupported resource type "volume"`},
	}
	prov := &fakeProvider{}
	root := t.TempDir()
	p := resourcePool(t, prov, root, false)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			session := "sess_" + strings.ReplaceAll(tc.name, " ", "_")
			out, unplaced := provisionWith(t, p, session, tc.res)
			if len(unplaced) != 1 || !strings.Contains(unplaced[0].Error(), tc.want) {
				t.Fatalf("unplaced = %v, want one error containing %q", unplaced, tc.want)
			}
			if tc.res.Type == "file" && unplaced[0].MountPath != "/mnt/session/uploads/file_1" {
				t.Errorf("file resource error at %q, want the default mount path", unplaced[0].MountPath)
			}
			if strings.Contains(unplaced[0].Error(), "secret") {
				t.Errorf("error reveals the URL's credentials: %v", unplaced[0])
			}
			if len(out.Content) != 2 || !strings.Contains(out.Content[0].Text, tc.want) || out.IsError {
				t.Errorf("first result = %+v, want a note about the resource and then the tool's output", out)
			}
			if out, _ := provisionWith(t, p, session, tc.res); len(out.Content) != 1 {
				t.Errorf("second result = %+v, want no note", out)
			}
			entries, err := os.ReadDir(filepath.Join(root, session))
			if err != nil || len(entries) != 0 {
				t.Errorf("workspace holds %v (%v), want nothing", entries, err)
			}
		})
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Error("the ext:: transport ran a command")
	}
}

// TestResourcesCloneFailure: a repository that cannot be cloned is a repository_clone_error; an eager
// Provision keeps it for the first tool result.
func TestResourcesCloneFailure(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	root := t.TempDir()
	p := resourcePool(t, prov, root, true)
	missing := filepath.Join(t.TempDir(), "nothing.git")
	c := call("sess_fail")
	c.Recipe.Resources = []apitype.Resource{repoResource(missing, "", "")}
	var reports []sandbox.ProvisionReport
	c.OnProvision = func(r sandbox.ProvisionReport) { reports = append(reports, r) }
	if err := p.Provision(context.Background(), c); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if len(reports) != 2 || reports[1].Err != nil || len(reports[1].ResourceErrors) != 1 {
		t.Fatalf("reports = %+v, want a successful provisioning with one resource error", reports)
	}
	rerr := reports[1].ResourceErrors[0]
	if rerr.ErrorType != apitype.SessionErrRepositoryClone || rerr.URL != missing || rerr.MountPath != "/workspace/nothing" ||
		!strings.Contains(rerr.Error(), "could not clone the repository") {
		t.Errorf("resource error = %+v (%v)", rerr, rerr)
	}
	out, err := p.Execute(context.Background(), c)
	if err != nil || out.IsError || len(out.Content) != 2 || !strings.Contains(out.Content[0].Text, "could not clone") {
		t.Errorf("first tool result = %+v, %v; want the note, then the output", out, err)
	}
	if _, err := os.Stat(filepath.Join(root, "sess_fail", "nothing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed clone left %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "sess_fail"))
	if len(entries) != 0 {
		t.Errorf("a failed clone left %v in the workspace", entries)
	}
}

// TestResourcesCommitCheckoutFailure: a commit the repository does not have is a repository_checkout_error and
// leaves no partial clone.
func TestResourcesCommitCheckoutFailure(t *testing.T) {
	t.Parallel()
	repo := sandboxtest.NewGitRepo(t)
	p := resourcePool(t, &fakeProvider{}, t.TempDir(), true)
	_, unplaced := provisionWith(t, p, "sess_sha", repoResource(repo.Path, "", `{"type":"commit","sha":"0123456789abcdef0123456789abcdef01234567"}`))
	if len(unplaced) != 1 || unplaced[0].ErrorType != apitype.SessionErrRepositoryCheckout {
		t.Fatalf("unplaced = %v, want a checkout error", unplaced)
	}
}

// TestResourcesCleanGitEnvironment: the server's environment does not reach git (a GIT_DIR would break the
// checkout, a GIT_CONFIG_PARAMETERS would re-allow local URLs).
func TestResourcesCleanGitEnvironment(t *testing.T) {
	repo := sandboxtest.NewGitRepo(t)
	t.Setenv("GIT_DIR", "/nonexistent")
	t.Setenv("GIT_CONFIG_PARAMETERS", "'protocol.allow'='always'")
	p := resourcePool(t, &fakeProvider{}, t.TempDir(), true)
	if _, unplaced := provisionWith(t, p, "sess_env", repoResource(repo.Path, "", `{"type":"commit","sha":"`+repo.First+`"}`)); len(unplaced) != 0 {
		t.Fatalf("unplaced = %v", unplaced)
	}
}

// TestResourcesUnreadableRecord: when the record of placed resources cannot be read, nothing is placed over
// what the workspace holds, and the failure is reported.
func TestResourcesUnreadableRecord(t *testing.T) {
	t.Parallel()
	repo := sandboxtest.NewGitRepo(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, ".sess_rec.resources.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := resourcePool(t, &fakeProvider{}, root, true)
	_, unplaced := provisionWith(t, p, "sess_rec", repoResource(repo.Path, "", ""))
	if len(unplaced) != 1 || !strings.Contains(unplaced[0].Error(), "unreadable") {
		t.Fatalf("unplaced = %v, want the unreadable record", unplaced)
	}
	if _, err := os.Stat(filepath.Join(root, "sess_rec", "proj")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("repository cloned despite the unreadable record: %v", err)
	}
}

// TestResourcesCloneFollowsNetworking: the clone runs on the server, so its host is checked against the
// session's networking (the egress proxy's rules) and git is pinned to the addresses checked.
func TestResourcesCloneFollowsNetworking(t *testing.T) {
	t.Parallel()
	newPool := func(resolve func(context.Context, *apitype.Networking, string, string) ([]net.IP, error)) *sandbox.Pool {
		return placerPool(t, &fakeProvider{}, t.TempDir(), workspace.Config{Resolve: resolve, CloneTimeout: 20 * time.Second})
	}
	// The server's own loopback (its API, its database) is refused under unrestricted networking.
	p := newPool(egress.Resolve)
	_, unplaced := provisionWith(t, p, "sess_loopback", repoResource("https://127.0.0.1:5432/db.git", "", ""))
	if len(unplaced) != 1 || !errors.Is(unplaced[0], egress.ErrDenied) || unplaced[0].ErrorType != "repository_clone_error" {
		t.Fatalf("clone from loopback: %v", unplaced)
	}
	// A host missing from a limited environment's allowed_hosts is refused.
	c := call("sess_limited")
	c.Recipe.Resources = []apitype.Resource{repoResource("https://github.com/corralhq/corral.git", "", "")}
	c.Recipe.Environment.Networking = &apitype.Networking{Type: "limited", AllowedHosts: []string{"example.com"}}
	var errs []*sandbox.ResourceError
	c.OnProvision = func(r sandbox.ProvisionReport) { errs = append(errs, r.ResourceErrors...) }
	if _, err := p.Execute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], egress.ErrDenied) {
		t.Fatalf("clone from a host not allowed: %v", errs)
	}
	// An allowed host is pinned to the addresses the check returned: git connects there without resolving
	// the name itself (example.invalid resolves nowhere).
	pinned := newPool(func(_ context.Context, _ *apitype.Networking, host, port string) ([]net.IP, error) {
		if host != "example.invalid" || port != "1" {
			return nil, fmt.Errorf("asked for %s:%s", host, port)
		}
		return []net.IP{net.IPv4(127, 0, 0, 1)}, nil
	})
	_, unplaced = provisionWith(t, pinned, "sess_pinned", repoResource("https://example.invalid:1/r.git", "", ""))
	// (The probe of the refs, with Go's client pinned the same way, is the first to connect.)
	if len(unplaced) != 1 || strings.Contains(unplaced[0].Error(), "resolve host") || strings.Contains(unplaced[0].Error(), "lookup") ||
		!strings.Contains(unplaced[0].Error(), "dial tcp 127.0.0.1:1: connect: connection refused") {
		t.Fatalf("pinned clone: %v (want a refused connection to the pinned address, not a failed name lookup)", unplaced)
	}
}

// TestResourcesCheckoutValidated: the clone checks a checkout with the API's rule (apitype.Checkout.Validate)
// before git sees it: one the API would refuse (as a stored resource from before the rule could hold) is a
// repository_checkout_error, and nothing is cloned.
func TestResourcesCheckoutValidated(t *testing.T) {
	t.Parallel()
	repo := sandboxtest.NewGitRepo(t)
	root := t.TempDir()
	p := resourcePool(t, &fakeProvider{}, root, true)
	for i, tc := range []struct{ checkout, want string }{
		{`{"type":"commit","sha":"` + repo.First[:7] + `"}`, "checkout.sha: invalid commit sha"},
		{`{"type":"branch","name":"feat\u0009ure"}`, "checkout.name: invalid branch name"},
		{`{"type":"branch","name":"feature","sha":"` + repo.First + `"}`, "checkout.sha: not allowed for a branch checkout"},
		{`{"type":"tag","name":"v1"}`, `checkout.type: must be "branch" or "commit"`},
	} {
		session := fmt.Sprintf("sess_checkout%d", i)
		_, unplaced := provisionWith(t, p, session, repoResource(repo.Path, "/workspace/r", tc.checkout))
		if len(unplaced) != 1 || unplaced[0].ErrorType != apitype.SessionErrRepositoryCheckout || !strings.Contains(unplaced[0].Error(), tc.want) {
			t.Errorf("checkout %s: unplaced = %v, want one checkout error containing %q", tc.checkout, unplaced, tc.want)
		}
		if entries, err := os.ReadDir(filepath.Join(root, session)); err != nil || len(entries) != 0 {
			t.Errorf("checkout %s: workspace holds %v (%v), want nothing", tc.checkout, entries, err)
		}
	}
}

// TestResourcesRecordForgotten: when the Pool removes a deleted session's workspace, the Placer forgets its
// record; the record of a live session stays.
func TestResourcesRecordForgotten(t *testing.T) {
	t.Parallel()
	repo := sandboxtest.NewGitRepo(t)
	root := t.TempDir()
	p := resourcePool(t, &fakeProvider{}, root, true)
	for _, s := range []string{"sess_gone", "sess_live"} {
		if _, unplaced := provisionWith(t, p, s, repoResource(repo.Path, "", "")); len(unplaced) != 0 {
			t.Fatalf("%s: unplaced = %v", s, unplaced)
		}
		if _, err := os.Stat(filepath.Join(root, "."+s+".resources.json")); err != nil {
			t.Fatalf("%s: no record: %v", s, err)
		}
	}
	n, err := p.RemoveWorkspaces(context.Background(), func(_ context.Context, id string) (bool, error) { return id == "sess_gone", nil })
	if err != nil || n != 1 {
		t.Fatalf("RemoveWorkspaces = %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(root, ".sess_gone.resources.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed workspace's record remains: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, ".sess_live.resources.json")); err != nil {
		t.Errorf("the live session's record: %v", err)
	}
	placer, err := workspace.New(workspace.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := placer.Forget(filepath.Join(root, "sess_gone")); err != nil {
		t.Errorf("Forget again: %v, want nil (idempotent)", err)
	}
}

// TestNewConfig: New refuses a negative clone timeout.
func TestNewConfig(t *testing.T) {
	t.Parallel()
	if _, err := workspace.New(workspace.Config{CloneTimeout: -time.Second}); err == nil {
		t.Error("New accepted a negative CloneTimeout")
	}
}
