package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// fakePlacer fails every resource it is given once, and records its calls.
type fakePlacer struct {
	mu      sync.Mutex
	placed  []string // session ids, one per Place
	forgot  []string // workspace dirs
	done    map[string]bool
	workdir []bool // whether the workspace existed when Place ran
}

func (f *fakePlacer) Place(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) []*sandbox.ResourceError {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.placed = append(f.placed, r.SessionID)
	_, err := os.Stat(host.Workspace)
	f.workdir = append(f.workdir, err == nil)
	var errs []*sandbox.ResourceError
	for _, res := range r.Resources {
		if f.done[res.ID] {
			continue
		}
		if f.done == nil {
			f.done = map[string]bool{}
		}
		f.done[res.ID] = true
		errs = append(errs, &sandbox.ResourceError{ResourceID: res.ID, Type: string(res.Type), MountPath: res.MountPath,
			ErrorType: apitype.SessionErrRepositoryClone, Err: errors.New("unreachable")})
	}
	return errs
}

func (f *fakePlacer) Forget(ws string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, ws)
	return nil
}

// TestPoolPlacer: the Pool has its Placer place a session's resources in the existing workspace before each
// provisioning, reports the failures in the provisioning report and, once, in front of the next tool result,
// and has the Placer forget a workspace it removes.
func TestPoolPlacer(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	placer := &fakePlacer{}
	root := t.TempDir()
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, Placer: placer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	c := call("sesn_placed")
	c.Recipe.Resources = []apitype.Resource{{ID: "sesrsc_1", Type: "github_repository", MountPath: "/workspace/r"}}
	var reports []sandbox.ProvisionReport
	c.OnProvision = func(r sandbox.ProvisionReport) { reports = append(reports, r) }
	out, err := p.Execute(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 || len(reports[0].ResourceErrors) != 0 || len(reports[1].ResourceErrors) != 1 ||
		reports[1].ResourceErrors[0].ResourceID != "sesrsc_1" {
		t.Fatalf("reports = %+v, want the resource error when provisioning is done", reports)
	}
	want := "session resource github_repository at /workspace/r: unreachable"
	if len(out.Content) != 2 || !strings.Contains(out.Content[0].Text, want) || out.IsError {
		t.Errorf("first result = %+v, want a note with %q, then the output", out, want)
	}
	if out, _ := p.Execute(context.Background(), c); len(out.Content) != 1 {
		t.Errorf("second result = %+v, want no note", out)
	}
	// A re-provisioning asks the Placer again (it decides what is left to place).
	if err := p.Close("sesn_placed"); err != nil {
		t.Fatal(err)
	}
	if out, _ := p.Execute(context.Background(), c); len(out.Content) != 1 {
		t.Errorf("result after re-provisioning = %+v, want no note", out)
	}
	placer.mu.Lock()
	if strings.Join(placer.placed, " ") != "sesn_placed sesn_placed" || !placer.workdir[0] {
		t.Errorf("Place calls %v (workspace existed: %v), want one per provisioning, in an existing workspace", placer.placed, placer.workdir)
	}
	placer.mu.Unlock()

	// A recipe without resources is handed to the Placer too: it removes the files of deleted resources.
	if _, err := p.Execute(context.Background(), call("sesn_bare")); err != nil {
		t.Fatal(err)
	}
	n, err := p.RemoveWorkspaces(context.Background(), func(context.Context, string) (bool, error) { return true, nil })
	if err != nil || n != 2 {
		t.Fatalf("RemoveWorkspaces = %d, %v", n, err)
	}
	placer.mu.Lock()
	defer placer.mu.Unlock()
	if len(placer.placed) != 3 || placer.placed[2] != "sesn_bare" {
		t.Errorf("Place calls %v, want one for the session without resources too", placer.placed)
	}
	forgot := strings.Join(placer.forgot, " ")
	if len(placer.forgot) != 2 || !strings.Contains(forgot, filepath.Join(root, "sesn_placed")) || !strings.Contains(forgot, filepath.Join(root, "sesn_bare")) {
		t.Errorf("Forget calls %v, want both removed workspaces", placer.forgot)
	}
}

// TestPoolWithoutPlacer: a Pool without a Placer provisions a session that has resources, and says that they
// were not placed.
func TestPoolWithoutPlacer(t *testing.T) {
	t.Parallel()
	p := newPool(t, &fakeProvider{}, 0)
	c := call("sesn_noplacer")
	c.Recipe.Resources = []apitype.Resource{{ID: "sesrsc_1", Type: "github_repository", MountPath: "/workspace/r"}}
	var errs []*sandbox.ResourceError
	c.OnProvision = func(r sandbox.ProvisionReport) { errs = append(errs, r.ResourceErrors...) }
	out, err := p.Execute(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], sandbox.ErrNoPlacer) {
		t.Fatalf("resource errors = %v, want ErrNoPlacer", errs)
	}
	if len(out.Content) != 2 || !strings.Contains(out.Content[0].Text, "no workspace placer") {
		t.Errorf("result = %+v, want the note, then the output", out)
	}
}
