package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
)

// toolsProvider is a fakeProvider that declares the given tools.
type toolsProvider struct {
	fakeProvider
	tools []sandbox.Tool
}

func (p *toolsProvider) Tools() []sandbox.Tool { return p.tools }

func TestPoolTools(t *testing.T) {
	t.Parallel()
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: &fakeProvider{}, WorkspaceRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	var h sandbox.Hands = p
	if got := h.Tools(); !slices.EqualFunc(got, fakeTools, func(a, b sandbox.Tool) bool {
		return a.Name == b.Name && a.Description == b.Description && string(a.InputSchema) == string(b.InputSchema)
	}) {
		t.Errorf("Tools() = %+v, want the provider's %+v", got, fakeTools)
	}
}

func TestPoolRejectsBadTools(t *testing.T) {
	t.Parallel()
	obj := json.RawMessage(`{"type":"object"}`)
	for name, tools := range map[string][]sandbox.Tool{
		"empty name":    {{Name: "", InputSchema: obj}},
		"repeated name": {{Name: "bash", InputSchema: obj}, {Name: "bash", InputSchema: obj}},
		"no schema":     {{Name: "bash"}},
		"not an object": {{Name: "bash", InputSchema: json.RawMessage(`{"type":"string"}`)}},
	} {
		p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: &toolsProvider{tools: tools}, WorkspaceRoot: t.TempDir()})
		if err == nil {
			p.Stop()
			t.Errorf("%s: NewPool accepted %+v", name, tools)
		} else if !strings.Contains(err.Error(), "provider fake") {
			t.Errorf("%s: error %q does not name the provider", name, err)
		}
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	const reason = "bubblewrap is not installed: apt-get install bubblewrap"
	h := sandbox.Unavailable(fakeTools, reason)
	if got := h.Tools(); len(got) != 1 || got[0].Name != "bash" {
		t.Errorf("Tools() = %+v, want the tools it was given", got)
	}
	res, err := h.Execute(context.Background(), &sandbox.Call{Recipe: sandbox.Recipe{SessionID: "s"}, Name: "bash"})
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
	if !res.IsError || len(res.Content) != 1 || res.Content[0].Text != reason {
		t.Errorf("result = %+v, want an error result with the reason", res)
	}
}
