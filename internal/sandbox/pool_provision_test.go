package sandbox_test

import (
	"context"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
)

// TestPoolProvisionEagerly: Provision starts the session's sandbox without a tool call, reports it, and the
// next Provision and the first tool call reuse it.
func TestPoolProvisionEagerly(t *testing.T) {
	t.Parallel()
	prov := &fakeProvider{}
	p := newPool(t, prov, 0)
	var reports []sandbox.ProvisionReport
	c := call("sess_eager")
	c.OnProvision = func(r sandbox.ProvisionReport) { reports = append(reports, r) }
	ctx := context.Background()
	if err := p.Provision(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := prov.provisions.Load(); got != 1 {
		t.Fatalf("%d provisions after Provision, want 1", got)
	}
	if len(reports) != 2 || reports[0].Done || !reports[1].Done {
		t.Fatalf("reports = %+v, want start and end", reports)
	}
	if err := p.Provision(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Execute(ctx, call("sess_eager")); err != nil {
		t.Fatal(err)
	}
	if got := prov.provisions.Load(); got != 1 {
		t.Fatalf("%d provisions, want the first one reused", got)
	}
	if len(reports) != 2 {
		t.Fatalf("an existing sandbox was reported again: %+v", reports)
	}
	prov.fail.Store(true)
	if err := p.Provision(ctx, call("sess_other")); err == nil {
		t.Fatal("Provision succeeded while the provider fails")
	}
}
