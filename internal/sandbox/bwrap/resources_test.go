package bwrap_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/workspace"
)

// TestRepositoryResource: a repository cloned on the host into a session's workspace belongs to the sandbox's
// uid, and the sandbox's bash tool reads and modifies it (git inside the sandbox accepts it as its own).
func TestRepositoryResource(t *testing.T) {
	prov := newProvider(t)
	repo := sandboxtest.NewGitRepo(t)
	root := sandboxtest.WorkspaceRoot(t)
	placer, err := workspace.New(workspace.Config{AllowLocalURLs: true})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, Placer: placer})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Stop()
	var reports []sandbox.ProvisionReport
	run := func(command string) string {
		t.Helper()
		input, _ := json.Marshal(map[string]string{"command": command})
		res, err := pool.Execute(context.Background(), &sandbox.Call{
			Recipe: sandbox.Recipe{SessionID: "s", Resources: []apitype.Resource{
				{ID: "sesrsc_1", Type: "github_repository", URL: repo.Path},
				{ID: "sesrsc_2", Type: "github_repository", URL: repo.Path, MountPath: "/workspace/deep/feature",
					Checkout: &apitype.Checkout{Type: apitype.CheckoutBranch, Name: "feature"}},
			}},
			Name: "bash", Input: input,
			OnProvision: func(r sandbox.ProvisionReport) { reports = append(reports, r) },
		})
		if err != nil || res.IsError || len(res.Content) != 1 {
			t.Fatalf("bash %q: %v %+v", command, err, res)
		}
		return res.Content[0].Text
	}
	out := run("cat proj/README && echo edited > proj/README && touch proj/new deep/feature/new2 deep/new3 && " +
		"cat deep/feature/feature.txt && git -C proj status --porcelain && git -C proj log --format=%s")
	want := "v2\nfeature\n M README\n?? new\nsecond\nfirst"
	if out != want {
		t.Errorf("bash output:\n%s\nwant:\n%s", out, want)
	}
	if len(reports) != 2 || reports[1].Err != nil || len(reports[1].ResourceErrors) != 0 {
		t.Fatalf("provision reports = %+v", reports)
	}
	for _, name := range []string{"proj/README", "proj/new", "proj/.git/config", "deep", "deep/feature/new2"} {
		fi, err := os.Lstat(filepath.Join(root, "s", name))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid < 200000 || st.Gid != st.Uid {
			t.Errorf("%s owned by %d:%d, want the sandbox's uid", name, st.Uid, st.Gid)
		}
	}
	if got, err := os.ReadFile(filepath.Join(root, "s", "proj", "README")); err != nil || string(got) != "edited\n" {
		t.Errorf("README on the host = %q, %v", got, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "s")); len(entries) != 2 {
		t.Errorf("workspace holds %d entries, want proj and deep", len(entries))
	}
	// A re-provisioned sandbox finds the session's edits: nothing is cloned again.
	if err := pool.Close("s"); err != nil {
		t.Fatal(err)
	}
	if out := run("cat proj/README"); out != "edited" {
		t.Errorf("README after re-provisioning = %q, want the edit", out)
	}
	if len(reports) != 4 || len(reports[3].ResourceErrors) != 0 {
		t.Errorf("reports after re-provisioning = %+v", reports)
	}
}
