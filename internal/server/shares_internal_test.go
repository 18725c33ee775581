package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// countingProvider's sandboxes answer every call, and count how many are live.
type countingProvider struct{ live atomic.Int32 }

func (p *countingProvider) Name() string                       { return "counting" }
func (p *countingProvider) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }
func (p *countingProvider) Tools() []sandbox.Tool              { return nil }
func (p *countingProvider) Provision(context.Context, *sandbox.Recipe, sandbox.HostDirs) (sandbox.Sandbox, error) {
	p.live.Add(1)
	return &countedSandbox{p: p}, nil
}

type countedSandbox struct{ p *countingProvider }

func (s *countedSandbox) Execute(context.Context, string, string, json.RawMessage) (sandbox.Result, error) {
	return sandbox.Result{Content: []apitype.ContentBlock{apitype.TextBlock("ok")}}, nil
}
func (s *countedSandbox) Close() error { s.p.live.Add(-1); return nil }

// TestWorkspaceSandboxes: two pools (two brains) on one store give a workspace its share of live sandboxes
// between them: a session beyond it gets a tool error that says why, another workspace's sessions get theirs,
// and a sandbox that closes frees its place.
func TestWorkspaceSandboxes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for id, ws := range map[string]string{"sesn_a1": "wrkspc_a", "sesn_a2": "wrkspc_a", "sesn_a3": "wrkspc_a", "sesn_b1": "wrkspc_b"} {
		if err := st.Own(ctx, id, ws); err != nil {
			t.Fatal(err)
		}
	}
	prov := &countingProvider{}
	pools := make([]*sandbox.Pool, 2)
	for i := range pools {
		p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, IdleTimeout: 48 * time.Hour,
			Quota: &workspaceSandboxes{store: st, max: 2, log: slog.New(slog.DiscardHandler)}})
		if err != nil {
			t.Fatal(err)
		}
		pools[i] = p
		t.Cleanup(func() { _ = p.Stop() })
	}
	call := func(p *sandbox.Pool, session string) (sandbox.Result, error) {
		return p.Execute(ctx, &sandbox.Call{Recipe: sandbox.Recipe{SessionID: session}, Name: "bash", Input: json.RawMessage(`{}`)})
	}
	for _, c := range []struct {
		pool    int
		session string
	}{{0, "sesn_a1"}, {1, "sesn_a2"}, {1, "sesn_b1"}, {0, "sesn_a1"}} {
		if res, err := call(pools[c.pool], c.session); err != nil || res.IsError {
			t.Fatalf("%s on pool %d: %+v %v", c.session, c.pool, res, err)
		}
	}
	res, err := call(pools[0], "sesn_a3")
	if err == nil || !res.IsError || !strings.Contains(res.Content[0].Text, "workspace wrkspc_a has 2 live sandboxes, its share") {
		t.Fatalf("a's third sandbox: %+v %v, want refused", res, err)
	}
	if n := prov.live.Load(); n != 3 {
		t.Fatalf("%d live sandboxes, want 3", n)
	}
	if err := pools[1].Close("sesn_a2"); err != nil {
		t.Fatal(err)
	}
	if res, err := call(pools[0], "sesn_a3"); err != nil || res.IsError {
		t.Fatalf("a's third sandbox after another closed: %+v %v", res, err)
	}
}
