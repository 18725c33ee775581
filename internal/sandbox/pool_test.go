package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeProvider provisions fakeSandboxes and counts them.
type fakeProvider struct {
	provisions atomic.Int32
	fail       atomic.Bool
	mu         sync.Mutex
	recipes    []sandbox.Recipe
	dirs       []sandbox.HostDirs // one per recipe
	live       []*fakeSandbox
	caps       *sandbox.Capabilities
}

func (p *fakeProvider) Name() string { return "fake" }

// fakeTools are the tools of fakeProvider.
var fakeTools = []sandbox.Tool{{Name: "bash", Description: "Run a command.", InputSchema: json.RawMessage(`{"type":"object"}`)}}

func (p *fakeProvider) Tools() []sandbox.Tool { return fakeTools }

// Capabilities are a local backend's, unless caps is set.
func (p *fakeProvider) Capabilities() sandbox.Capabilities {
	if p.caps != nil {
		return *p.caps
	}
	return sandbox.Local
}

func (p *fakeProvider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (sandbox.Sandbox, error) {
	p.provisions.Add(1)
	if p.fail.Load() {
		return nil, errors.New("no capacity")
	}
	sb := &fakeSandbox{}
	p.mu.Lock()
	p.recipes = append(p.recipes, *r)
	p.dirs = append(p.dirs, dirs)
	p.live = append(p.live, sb)
	p.mu.Unlock()
	return sb, nil
}

type fakeSandbox struct {
	closed atomic.Int32
	dead   atomic.Bool
	synced atomic.Int32 // Sync calls
}

// Sync counts the Pool's requests to copy the session's files back.
func (s *fakeSandbox) Sync(context.Context, *sandbox.Recipe, sandbox.HostDirs) error {
	s.synced.Add(1)
	return nil
}

// Execute answers with the call: "name input", after "[shell] " when the call names a shell.
func (s *fakeSandbox) Execute(ctx context.Context, shell, name string, input json.RawMessage) (sandbox.Result, error) {
	if s.dead.Load() || s.closed.Load() > 0 {
		return sandbox.Result{}, fmt.Errorf("%w: fake", sandbox.ErrSandboxDead)
	}
	if shell != "" {
		name = "[" + shell + "] " + name
	}
	return sandbox.Result{Content: []apitype.ContentBlock{apitype.TextBlock(name + " " + string(input))}}, nil
}

func (s *fakeSandbox) Close() error { s.closed.Add(1); return nil }

func newPool(t *testing.T, prov sandbox.Provider, idle time.Duration) *sandbox.Pool {
	t.Helper()
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir(), IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

func call(session string) *sandbox.Call {
	return &sandbox.Call{Recipe: sandbox.Recipe{SessionID: session}, Name: "bash", Input: json.RawMessage(`{"command":"true"}`)}
}

func TestPoolLazyAndReused(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	p := newPool(t, prov, 0)
	if prov.provisions.Load() != 0 {
		t.Fatal("provisioned before the first call")
	}
	var reports []sandbox.ProvisionReport
	c := call("s1")
	c.OnProvision = func(r sandbox.ProvisionReport) { reports = append(reports, r) }
	for range 3 {
		if _, err := p.Execute(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	if n := prov.provisions.Load(); n != 1 {
		t.Errorf("provisions = %d, want 1", n)
	}
	if len(reports) != 2 || reports[0].Done || !reports[1].Done || reports[1].Backend != "fake" || reports[1].Err != nil {
		t.Errorf("reports: %+v", reports)
	}
	if ws := prov.dirs[0].Workspace; !strings.HasSuffix(ws, "/s1") {
		t.Errorf("workspace %q", ws)
	}
}

// TestPoolShell: a call's Shell reaches the session's one sandbox; "" is the default shell.
func TestPoolShell(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	p := newPool(t, prov, 0)
	for _, shell := range []string{"sthr_a", "", "sthr_b"} {
		c := call("s1")
		c.Shell = shell
		res, err := p.Execute(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		want := `bash {"command":"true"}`
		if shell != "" {
			want = "[" + shell + "] " + want
		}
		if got := res.Content[0].Text; got != want {
			t.Errorf("shell %q: the sandbox ran %q, want %q", shell, got, want)
		}
	}
	if n := prov.provisions.Load(); n != 1 {
		t.Errorf("provisions = %d, want 1 (the shells share the sandbox)", n)
	}
}

func TestPoolConcurrentFirstCallsProvisionOnce(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	p := newPool(t, prov, 0)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Execute(context.Background(), call("s")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := prov.provisions.Load(); n != 1 {
		t.Errorf("provisions = %d, want 1", n)
	}
}

func TestPoolDeadSandboxReplaced(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	p := newPool(t, prov, 0)
	if _, err := p.Execute(context.Background(), call("s")); err != nil {
		t.Fatal(err)
	}
	prov.live[0].dead.Store(true)
	res, err := p.Execute(context.Background(), call("s"))
	if !errors.Is(err, sandbox.ErrSandboxDead) || !res.IsError || !strings.Contains(res.Content[0].Text, "sandbox died") {
		t.Fatalf("dead sandbox: %v %+v", err, res)
	}
	if prov.live[0].closed.Load() != 1 {
		t.Error("dead sandbox not closed")
	}
	if _, err := p.Execute(context.Background(), call("s")); err != nil {
		t.Fatal(err)
	}
	if n := prov.provisions.Load(); n != 2 {
		t.Errorf("provisions = %d, want 2", n)
	}
	if prov.dirs[0].Workspace != prov.dirs[1].Workspace {
		t.Error("re-provisioned with another workspace")
	}
}

func TestPoolProvisionFailure(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	prov.fail.Store(true)
	p := newPool(t, prov, 0)
	var last sandbox.ProvisionReport
	c := call("s")
	c.OnProvision = func(r sandbox.ProvisionReport) { last = r }
	res, err := p.Execute(context.Background(), c)
	if err == nil || !res.IsError || last.Err == nil || !last.Done {
		t.Fatalf("failure: %v %+v %+v", err, res, last)
	}
	prov.fail.Store(false)
	if _, err := p.Execute(context.Background(), call("s")); err != nil {
		t.Fatal(err)
	}
}

// slowProvider's runtime dies when the caller's context ends, as a killed runtime process does.
type slowProvider struct{ fakeProvider }

func (p *slowProvider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (sandbox.Sandbox, error) {
	<-ctx.Done()
	return nil, errors.New("runsc start: signal: killed")
}

func TestPoolProvisionCancelled(t *testing.T) {
	t.Parallel()
	p := newPool(t, &slowProvider{}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Execute(ctx, call("s"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("cancelled provisioning: err = %v, want the deadline and the runtime's error", err)
	}
}

func TestPoolIdleReapAndStop(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	p := newPool(t, prov, 20*time.Millisecond)
	for _, s := range []string{"a", "b"} {
		if _, err := p.Execute(context.Background(), call(s)); err != nil {
			t.Fatal(err)
		}
	}
	// The reaper forgets a session before it closes its sandbox, so wait for both.
	reaped := func() bool {
		for _, sb := range prov.live {
			if sb.closed.Load() == 0 {
				return false
			}
		}
		return p.Sessions() == 0
	}
	deadline := time.Now().Add(5 * time.Second)
	for !reaped() {
		if time.Now().After(deadline) {
			t.Fatal("not reaped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, sb := range prov.live {
		if sb.closed.Load() != 1 {
			t.Error("reaped sandbox not closed once")
		}
	}
	if _, err := p.Execute(context.Background(), call("a")); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if prov.live[2].closed.Load() != 1 {
		t.Error("Stop did not close the live sandbox")
	}
	if _, err := p.Execute(context.Background(), call("a")); !errors.Is(err, sandbox.ErrPoolStopped) {
		t.Errorf("after Stop: %v", err)
	}
}

func TestPoolRejectsBadSessionID(t *testing.T) {
	t.Parallel()
	p := newPool(t, &fakeProvider{}, 0)
	for _, id := range []string{"", "..", "a/b", "."} {
		if _, err := p.Execute(context.Background(), call(id)); err == nil {
			t.Errorf("session id %q accepted", id)
		}
	}
}

func TestPoolDefaultLimits(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	defaults := sandbox.Limits{MemoryBytes: 64 << 20, Pids: 32, CPUQuota: 0.5, CommandTimeout: time.Second, OutputBytes: 1000}
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir(), Limits: defaults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ctx := context.Background()
	if _, err := p.Execute(ctx, call("sesn_defaults")); err != nil {
		t.Fatal(err)
	}
	own := call("sesn_own")
	own.Recipe.Limits = sandbox.Limits{MemoryBytes: 128 << 20}
	if _, err := p.Execute(ctx, own); err != nil {
		t.Fatal(err)
	}
	prov.mu.Lock()
	defer prov.mu.Unlock()
	if got := prov.recipes[0].Limits; got != defaults {
		t.Errorf("recipe without limits provisioned with %+v, want the pool's %+v", got, defaults)
	}
	want := defaults
	want.MemoryBytes = 128 << 20
	if got := prov.recipes[1].Limits; got != want {
		t.Errorf("recipe with its own memory limit provisioned with %+v, want %+v", got, want)
	}
}

// goneDeleted is RemoveWorkspaces's lookup: sesn_deleted is gone, sesn_live is not, sesn_unknown cannot be
// looked up.
func goneDeleted(_ context.Context, id string) (bool, error) {
	switch id {
	case "sesn_deleted":
		return true, nil
	case "sesn_unknown":
		return false, errors.New("store unavailable")
	}
	return false, nil
}

func TestPoolRemoveWorkspaces(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	root := t.TempDir()
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ctx := context.Background()
	for _, id := range []string{"sesn_deleted", "sesn_live", "sesn_unknown"} {
		if _, err := p.Execute(ctx, call(id)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, id, "file"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := p.RemoveWorkspaces(ctx, goneDeleted)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "store unavailable") {
		t.Fatalf("RemoveWorkspaces = %d, %v; want 1 and the lookup error", n, err)
	}
	if _, err := os.Stat(filepath.Join(root, "sesn_deleted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted session's workspace remains: %v", err)
	}
	for _, id := range []string{"sesn_live", "sesn_unknown"} {
		if _, err := os.Stat(filepath.Join(root, id, "file")); err != nil {
			t.Errorf("%s's workspace was touched: %v", id, err)
		}
	}
	prov.mu.Lock()
	closed := prov.live[0].closed.Load()
	prov.mu.Unlock()
	if closed == 0 {
		t.Error("the deleted session's sandbox was not closed")
	}
}

// keeperProvider is a remote fakeProvider that keeps its sessions' workspaces (sandbox.WorkspaceKeeper).
type keeperProvider struct {
	fakeProvider
	mu   sync.Mutex
	kept map[string]bool
}

func (p *keeperProvider) Workspaces(context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.kept)), nil
}

func (p *keeperProvider) RemoveWorkspace(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.kept, id)
	return nil
}

// TestPoolRemoveKeptWorkspaces: a remote backend's kept workspaces of gone sessions are removed through it, the
// sessions' sandboxes closed first; the others are left.
func TestPoolRemoveKeptWorkspaces(t *testing.T) {
	t.Parallel()
	prov := &keeperProvider{kept: map[string]bool{"sesn_deleted": true, "sesn_live": true, "sesn_unknown": true}}
	prov.caps = &sandbox.Capabilities{RootFS: sandbox.RootFSImageRef, Egress: sandbox.EgressTCP}
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ctx := context.Background()
	if _, err := p.Execute(ctx, call("sesn_deleted")); err != nil {
		t.Fatal(err)
	}
	n, err := p.RemoveWorkspaces(ctx, goneDeleted)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "store unavailable") {
		t.Fatalf("RemoveWorkspaces = %d, %v; want 1 and the lookup error", n, err)
	}
	if got, _ := prov.Workspaces(ctx); !slices.Equal(got, []string{"sesn_live", "sesn_unknown"}) {
		t.Errorf("workspaces left: %v, want sesn_live and sesn_unknown", got)
	}
	prov.fakeProvider.mu.Lock()
	closed := prov.live[0].closed.Load()
	prov.fakeProvider.mu.Unlock()
	if closed == 0 {
		t.Error("the deleted session's sandbox was not closed")
	}
}

// countImages counts the images acquired.
type countImages struct{ n atomic.Int32 }

func (c *countImages) Acquire(context.Context, *apitype.EnvConfig) (string, func(), error) {
	c.n.Add(1)
	return "/nonexistent-image", func() {}, nil
}

// countCollector counts the collections of outputs.
type countCollector struct{ n atomic.Int32 }

func (c *countCollector) Collect(context.Context, *sandbox.Recipe, sandbox.HostDirs) error {
	c.n.Add(1)
	return nil
}

// TestPoolConsultsCapabilities: for a backend whose sandboxes run elsewhere (no host workspace, an image
// reference), the pool makes no directory on this host (not even its workspace root), acquires no image
// directory, places and collects nothing here, and gives the provider zero HostDirs; for a local one it does
// all of it, and the provider gets the session's workspace, session directory and image (a self-hosted
// environment's too: corral worker's Images choose it); for one that runs elsewhere from a staging copy, it
// makes, places in and collects from the copy, has the sandbox copy its files back first, and acquires no image.
func TestPoolConsultsCapabilities(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		caps      sandbox.Capabilities
		env       apitype.EnvironmentType
		workspace bool
		images    int32
	}{
		{"local", sandbox.Local, apitype.EnvironmentCloud, true, 1},
		{"local self-hosted", sandbox.Local, apitype.EnvironmentSelfHosted, true, 1},
		{"remote", sandbox.Capabilities{RootFS: sandbox.RootFSImageRef, Egress: sandbox.EgressTCP}, apitype.EnvironmentCloud, false, 0},
		{"staged", sandbox.Capabilities{StagedWorkspace: true, RootFS: sandbox.RootFSImageRef, Egress: sandbox.EgressTCP}, apitype.EnvironmentCloud, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prov := &fakeProvider{caps: &tc.caps}
			imgs := &countImages{}
			placer := &fakePlacer{}
			outputs := &countCollector{}
			root := filepath.Join(t.TempDir(), "workspaces")
			p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, Images: imgs, Placer: placer, Outputs: outputs})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop() })
			c := call("s1")
			c.Recipe.Environment.Type = tc.env
			c.Recipe.Resources = []apitype.Resource{{ID: "file_1", Type: apitype.ResourceFile}}
			res, err := p.Execute(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			// Resources the pool cannot place where the sandbox runs are reported, never silently left out.
			if noted := strings.Contains(res.Text(), sandbox.ErrNotPlacedRemote.Error()); noted == tc.workspace {
				t.Errorf("the result notes the resources as not placed: %v, want %v (%q)", noted, !tc.workspace, res.Text())
			}
			if err := p.CollectOutputs(context.Background(), &sandbox.Recipe{SessionID: "s1"}); err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(filepath.Join(root, "s1"))
			if made := statErr == nil; made != tc.workspace {
				t.Errorf("workspace made on the host: %v, want %v", made, tc.workspace)
			}
			if _, err := os.Stat(root); (err == nil) != tc.workspace {
				t.Errorf("workspace root made on the host: %v, want %v", err == nil, tc.workspace)
			}
			// The session directory: no other user of the host lists it or reads through it.
			for dir, want := range map[string]os.FileMode{filepath.Join(root, "s1"): 0o700, sandbox.SessionDir(root, "s1"): 0o711} {
				if fi, err := os.Stat(dir); tc.workspace && (err != nil || fi.Mode().Perm() != want) {
					t.Errorf("%s: %v, %v; want mode %v", dir, fi.Mode(), err, want)
				}
			}
			if n := imgs.n.Load(); n != tc.images {
				t.Errorf("images acquired: %d, want %d", n, tc.images)
			}
			var want sandbox.HostDirs
			if tc.workspace {
				want = sandbox.HostDirs{Workspace: filepath.Join(root, "s1"), Session: sandbox.SessionDir(root, "s1")}
			}
			if tc.images > 0 {
				want.RootFS = "/nonexistent-image"
			}
			if got := prov.dirs[0]; got != want {
				t.Errorf("the provider's host directories: %+v, want %+v", got, want)
			}
			wantN := 0
			if tc.workspace {
				wantN = 1
			}
			if placed, collected := len(placer.placed), int(outputs.n.Load()); placed != wantN || collected != wantN {
				t.Errorf("placements %d, collections %d; want %d of each", placed, collected, wantN)
			}
			// The live sandbox copies its files back before the collection (any Syncer: the local fake is one too).
			if synced := int(prov.live[0].synced.Load()); synced != wantN {
				t.Errorf("copies back %d, want %d", synced, wantN)
			}
		})
	}
}

// TestRecipeNamesNoHostPath: the Recipe is what a sandbox needs wherever it runs; where its files are on the
// Pool's host is HostDirs, apart, so that a backend whose sandboxes run on other machines gets nothing of
// this host. No field of the Recipe may be a host path (a *Dir, *Path or RootFS field).
func TestRecipeNamesNoHostPath(t *testing.T) {
	t.Parallel()
	rt := reflect.TypeFor[sandbox.Recipe]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if strings.HasSuffix(f.Name, "Dir") || strings.HasSuffix(f.Name, "Path") || strings.Contains(f.Name, "RootFS") {
			t.Errorf("sandbox.Recipe.%s names a host path; it belongs in sandbox.HostDirs", f.Name)
		}
	}
}

// statusImages is an Images whose image is building until ready is set.
type statusImages struct {
	countImages
	ready atomic.Bool
}

func (s *statusImages) Image(env *apitype.EnvConfig) *apitype.EnvironmentImage {
	img := &apitype.EnvironmentImage{ID: "base-test", Status: apitype.ImageBuilding}
	if s.ready.Load() {
		img.Status = apitype.ImageReady
	}
	return img
}

// TestPoolReportsImageWait: a provisioning whose image is still building (the base on a first start) says so
// in its start report, with the image; one whose image is built does not; nor does a backend that takes an
// image reference (it acquires no image here).
func TestPoolReportsImageWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		caps  sandbox.Capabilities
		ready bool
		want  bool
	}{
		{"building", sandbox.Local, false, true},
		{"built", sandbox.Local, true, false},
		{"remote", sandbox.Capabilities{RootFS: sandbox.RootFSImageRef, Egress: sandbox.EgressTCP}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			imgs := &statusImages{}
			imgs.ready.Store(tc.ready)
			p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: &fakeProvider{caps: &tc.caps}, WorkspaceRoot: t.TempDir(), Images: imgs})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop() })
			var mu sync.Mutex
			var reps []sandbox.ProvisionReport
			c := call("s1")
			c.OnProvision = func(r sandbox.ProvisionReport) { mu.Lock(); reps = append(reps, r); mu.Unlock() }
			if _, err := p.Execute(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reps) != 2 || reps[0].Done || !reps[1].Done {
				t.Fatalf("reports: %+v; want a start and an end", reps)
			}
			got := reps[0].Image
			if tc.want && (got == nil || got.ID != "base-test" || got.Status != apitype.ImageBuilding) {
				t.Errorf("the start report's image: %+v; want base-test, building", got)
			}
			if !tc.want && got != nil {
				t.Errorf("the start report names an image it does not wait for: %+v", got)
			}
			if reps[1].Image != nil {
				t.Errorf("the end report names an image: %+v", reps[1].Image)
			}
		})
	}
}

// refImages are images in a registry: Ref gives ref, or fails with err.
type refImages struct {
	countImages
	refs atomic.Int32
	ref  string
	err  error
}

func (r *refImages) Ref(context.Context, *apitype.EnvConfig) (string, error) {
	r.refs.Add(1)
	return r.ref, r.err
}

// TestPoolImageRefs: a provider that pulls images gets the image's reference from Images that are ImageRefs
// (nothing acquired on this host); a failed Ref fails the provisioning with its error; a local provider still
// acquires a directory.
func TestPoolImageRefs(t *testing.T) {
	t.Parallel()
	remote := sandbox.Capabilities{RootFS: sandbox.RootFSImageRef, Egress: sandbox.EgressTCP}
	for _, tc := range []struct {
		name      string
		caps      sandbox.Capabilities
		err       error
		wantImage string
		wantRefs  int32
		wantDirs  int32
	}{
		{"remote", remote, nil, "registry.example/env@sha256:1", 1, 0},
		{"remote, push failed", remote, &sandbox.ImageError{ImageBuildError: apitype.ImageBuildError{Message: "pushing the image: denied"}}, "", 1, 0},
		{"local", sandbox.Local, nil, "", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prov := &fakeProvider{caps: &tc.caps}
			imgs := &refImages{ref: "registry.example/env@sha256:1", err: tc.err}
			p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: t.TempDir(), Images: imgs})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop() })
			res, err := p.Execute(context.Background(), call("s1"))
			if tc.err != nil {
				var ie *sandbox.ImageError
				if err != nil && !errors.As(err, &ie) || err == nil && !strings.Contains(res.Text(), "pushing the image: denied") {
					t.Errorf("a failed Ref: %v, %q; want its error", err, res.Text())
				}
				if prov.provisions.Load() != 0 {
					t.Error("provisioned without the image")
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if n := imgs.refs.Load(); n != tc.wantRefs {
				t.Errorf("Ref called %d times, want %d", n, tc.wantRefs)
			}
			if n := imgs.n.Load(); n != tc.wantDirs {
				t.Errorf("Acquire called %d times, want %d", n, tc.wantDirs)
			}
			if tc.err == nil {
				if got := prov.dirs[0].Image; got != tc.wantImage {
					t.Errorf("HostDirs.Image = %q, want %q", got, tc.wantImage)
				}
			}
		})
	}
}
