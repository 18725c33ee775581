package proxy

import (
	"context"
	"crypto/x509"
	"net/http"
	"slices"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
)

type egressFunc func() (*sandbox.Egress, error)

func (f egressFunc) Egress(context.Context, *sandbox.Recipe) (*sandbox.Egress, error) { return f() }

func TestMerge(t *testing.T) {
	t.Parallel()
	roots := x509.NewCertPool()
	op := &Fixed{AllowInternal: []string{"git.internal:443"}, RootCAs: roots}
	in := newInjector(nil, nil, discard())
	local := http.NotFoundHandler()
	none := egressFunc(func() (*sandbox.Egress, error) { return nil, nil })
	secrets := egressFunc(func() (*sandbox.Egress, error) {
		return &sandbox.Egress{Env: map[string]string{"A": "corral-secret-a"}, CACertPEM: []byte("ca"), Intercept: in}, nil
	})
	git := egressFunc(func() (*sandbox.Egress, error) {
		return &sandbox.Egress{Local: local, AllowInternal: []string{"127.0.0.1:8443"}}, nil
	})
	registries := egressFunc(func() (*sandbox.Egress, error) {
		return &sandbox.Egress{AllowHosts: []string{"pypi.org", "files.pythonhosted.org"}, Env: map[string]string{"PIP_INDEX_URL": "https://m/simple"}}, nil
	})
	ctx := context.Background()
	eg, err := Merge(op, none, secrets, git, registries).Egress(ctx, &sandbox.Recipe{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eg.AllowInternal, []string{"git.internal:443", "127.0.0.1:8443"}) || eg.RootCAs != roots ||
		!slices.Equal(eg.AllowHosts, []string{"pypi.org", "files.pythonhosted.org"}) || eg.Env["PIP_INDEX_URL"] != "https://m/simple" ||
		eg.Env["A"] != "corral-secret-a" || string(eg.CACertPEM) != "ca" || eg.Intercept != in || eg.Local == nil {
		t.Errorf("merged: %+v", eg)
	}
	if eg, err := Merge(none, none).Egress(ctx, &sandbox.Recipe{}); eg != nil || err != nil {
		t.Errorf("all nil: %v, %v", eg, err)
	}
	// The operator's list is not shared with the sandboxes' Egress.
	eg.AllowInternal[0] = "changed"
	if op.AllowInternal[0] != "git.internal:443" {
		t.Errorf("Fixed shares its AllowInternal")
	}
	for name, m := range map[string]sandbox.EgressSource{
		"two interceptors": Merge(secrets, secrets),
		"two locals":       Merge(git, git),
		"variable clash": Merge(secrets, egressFunc(func() (*sandbox.Egress, error) {
			return &sandbox.Egress{Env: map[string]string{"A": "other"}}, nil
		})),
	} {
		if _, err := m.Egress(ctx, &sandbox.Recipe{}); err == nil {
			t.Errorf("%s: merged without an error", name)
		}
	}
}
