package sandbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
)

// fakeVolumes records the pool's calls and counts what each workspace holds.
type fakeVolumes struct {
	mu      sync.Mutex
	held    map[string]int
	calls   []string
	failing error
	closed  int
}

func (v *fakeVolumes) Attach(_ context.Context, dir string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, "attach "+filepath.Base(dir))
	if v.failing != nil {
		return v.failing
	}
	v.held[dir]++
	return nil
}

func (v *fakeVolumes) Detach(dir string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, "detach "+filepath.Base(dir))
	if v.held[dir] == 0 {
		return errors.New("detach without attach")
	}
	v.held[dir]--
	return nil
}

func (v *fakeVolumes) Remove(dir string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, "remove "+filepath.Base(dir))
	return nil
}

func (v *fakeVolumes) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed++
	return nil
}

func (v *fakeVolumes) log() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return strings.Join(v.calls, ", ")
}

// TestPoolVolumes: a session's workspace volume is attached once before its first sandbox, stays attached
// across a dead sandbox, is detached when the slot closes and attached again by the next call, is removed
// with the workspace, and a failure to attach is the call's error result. Stop detaches and closes.
func TestPoolVolumes(t *testing.T) {
	prov := &fakeProvider{}
	vols := &fakeVolumes{held: map[string]int{}}
	root := t.TempDir()
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := p.Execute(ctx, call("s1")); err != nil {
			t.Fatal(err)
		}
	}
	prov.mu.Lock()
	prov.live[0].dead.Store(true)
	prov.mu.Unlock()
	if _, err := p.Execute(ctx, call("s1")); !errors.Is(err, sandbox.ErrSandboxDead) {
		t.Fatalf("dead sandbox: %v", err)
	}
	if _, err := p.Execute(ctx, call("s1")); err != nil {
		t.Fatal(err)
	}
	if got, want := vols.log(), "attach s1, attach .mnt-s1"; got != want {
		t.Errorf("calls after four calls and a dead sandbox: %q, want %q", got, want)
	}
	if err := p.Close("s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Execute(ctx, call("s1")); err != nil {
		t.Fatal(err)
	}
	n, err := p.RemoveWorkspaces(ctx, func(context.Context, string) (bool, error) { return true, nil })
	if err != nil || n != 1 {
		t.Fatalf("RemoveWorkspaces: %d, %v", n, err)
	}
	// The session directory is a volume too, attached after the workspace and detached before it.
	if got, want := vols.log(), "attach s1, attach .mnt-s1, detach .mnt-s1, detach s1, attach s1, attach .mnt-s1, "+
		"detach .mnt-s1, detach s1, remove s1, remove .mnt-s1"; got != want {
		t.Errorf("calls: %q, want %q", got, want)
	}

	vols.failing = errors.New("the server's disk is nearly full")
	res, err := p.Execute(ctx, call("s2"))
	if !errors.Is(err, vols.failing) || !res.IsError || !strings.Contains(res.Content[0].Text, "nearly full") {
		t.Fatalf("attach failure: %v, %+v", err, res)
	}
	vols.failing = nil
	if _, err := p.Execute(ctx, call("s3")); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if vols.held[filepath.Join(root, "s3")] != 0 || vols.closed != 1 {
		t.Errorf("after Stop: held %v, closed %d", vols.held, vols.closed)
	}
}
