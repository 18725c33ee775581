package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeProvider provisions fakeSandboxes and records their recipes: the Placer runs on the host before the
// provider, so its tests need no real sandbox.
type fakeProvider struct {
	provisions atomic.Int32
	mu         sync.Mutex
	recipes    []sandbox.Recipe
	dirs       []sandbox.HostDirs // one per recipe
	live       []*fakeSandbox
}

func (p *fakeProvider) Name() string { return "fake" }

func (p *fakeProvider) Capabilities() sandbox.Capabilities { return sandbox.Local }

// Tools declares the one tool the pool tests call.
func (p *fakeProvider) Tools() []sandbox.Tool {
	return []sandbox.Tool{{Name: "bash", Description: "Run a command.", InputSchema: json.RawMessage(`{"type":"object"}`)}}
}

func (p *fakeProvider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (sandbox.Sandbox, error) {
	p.provisions.Add(1)
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
}

func (s *fakeSandbox) Execute(ctx context.Context, _, name string, input json.RawMessage) (sandbox.Result, error) {
	if s.dead.Load() || s.closed.Load() > 0 {
		return sandbox.Result{}, fmt.Errorf("%w: fake", sandbox.ErrSandboxDead)
	}
	return sandbox.Result{Content: []apitype.ContentBlock{apitype.TextBlock(name + " " + string(input))}}, nil
}

func (s *fakeSandbox) Close() error { s.closed.Add(1); return nil }

func call(session string) *sandbox.Call {
	return &sandbox.Call{Recipe: sandbox.Recipe{SessionID: session}, Name: "bash", Input: json.RawMessage(`{"command":"true"}`)}
}
