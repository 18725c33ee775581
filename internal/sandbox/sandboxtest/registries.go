package sandboxtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// RunRegistries checks allow_package_managers through the real egress proxy of real sandboxes: under limited
// networking with allow_package_managers true the registries of the environment's package managers are
// reachable, with the mirrors' variables in the sandbox's environment, and no other host is; with
// allow_package_managers false none is. registries builds the server's egress source of
// allow_package_managers (image.ManagerEgress) from --package-registry values; the registries here are mirrors on 127.0.0.1 that the operator trusts
// (--egress-allow-internal), as is a third server that no registry names. (This machine's registry.npmjs.org
// resolves to a documentation address, 203.0.113.80, which the egress proxy refuses as internal: the default
// hosts are checked by image's unit tests, not reached.)
func RunRegistries(t *testing.T, newProvider func(testing.TB) sandbox.Provider, registries func(mirrors []string) (sandbox.EgressSource, error)) {
	serve := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) }))
		t.Cleanup(srv.Close)
		return srv
	}
	pip, npm, other := serve("pip-mirror"), serve("npm-mirror"), serve("other-host")
	regs, err := registries([]string{"pip=" + pip.URL + "/simple", "npm=" + npm.URL})
	if err != nil {
		t.Fatal(err)
	}
	var trusted []string
	for _, s := range []*httptest.Server{pip, npm, other} {
		trusted = append(trusted, strings.TrimPrefix(s.URL, "http://"))
	}
	prov := newProvider(t)
	pool := poolWith(t, prov, egressFunc(func(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
		eg, err := regs.Egress(ctx, r)
		if eg == nil {
			eg = &sandbox.Egress{}
		}
		eg.AllowInternal = append(eg.AllowInternal, trusted...)
		return eg, err
	}))
	// Each URL fetched through the proxy, then the mirrors' variables.
	probe := "for u in " + pip.URL + "/simple/ " + npm.URL + "/ " + other.URL + "/; do " +
		"curl -sS --max-time 10 --noproxy '' -x \"$http_proxy\" -o /dev/null -w \"$u %{http_code}\\n\" $u 2>/dev/null || echo \"$u failed\"; done; " +
		"echo \"PIP_INDEX_URL=$PIP_INDEX_URL npm_config_registry=$npm_config_registry\""
	run := func(session string, n *apitype.Networking, pk *apitype.Packages) string {
		c := bash(session, probe)
		c.Recipe.Environment = apitype.EnvConfig{Type: apitype.EnvironmentCloud, Networking: n, Packages: pk}
		return mustRun(t, pool, c)
	}
	limited := func(allow bool) *apitype.Networking {
		return &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: []string{}, AllowPackageManagers: &allow}
	}
	reached := func(got string, s *httptest.Server) bool {
		return strings.Contains(got, s.URL+"/ 200") || strings.Contains(got, s.URL+"/simple/ 200")
	}
	check := func(t *testing.T, got string, want map[*httptest.Server]bool, env string) {
		t.Helper()
		t.Logf("%s", got)
		for s, ok := range want {
			if reached(got, s) != ok {
				t.Errorf("%s reachable = %v, want %v: %q", s.URL, !ok, ok, got)
			}
		}
		if last := got[strings.LastIndex(got, "\n")+1:]; last != env {
			t.Errorf("the mirrors' variables: %q, want %q", last, env)
		}
	}

	t.Run("ListedManagers", func(t *testing.T) {
		got := run("listed", limited(true), &apitype.Packages{Type: apitype.PackagesList, Pip: []string{"requests==2.32.3"}})
		check(t, got, map[*httptest.Server]bool{pip: true, npm: false, other: false},
			"PIP_INDEX_URL="+pip.URL+"/simple npm_config_registry=")
	})
	t.Run("NoPackagesListed", func(t *testing.T) {
		got := run("all", limited(true), nil)
		check(t, got, map[*httptest.Server]bool{pip: true, npm: true, other: false},
			"PIP_INDEX_URL="+pip.URL+"/simple npm_config_registry="+npm.URL)
	})
	t.Run("NotAllowed", func(t *testing.T) {
		got := run("none", limited(false), &apitype.Packages{Type: apitype.PackagesList, Pip: []string{"requests"}})
		check(t, got, map[*httptest.Server]bool{pip: false, npm: false, other: false}, "PIP_INDEX_URL= npm_config_registry=")
	})
	t.Run("AllowedHostsStillApply", func(t *testing.T) {
		n := limited(true)
		n.AllowedHosts = []string{strings.TrimPrefix(other.URL, "http://")}
		got := run("hosts", n, &apitype.Packages{Type: apitype.PackagesList, Npm: []string{"left-pad"}})
		check(t, got, map[*httptest.Server]bool{pip: false, npm: true, other: true}, "PIP_INDEX_URL= npm_config_registry="+npm.URL)
	})
}

// poolWith is a started Pool over prov whose sandboxes get their Egress from eg, stopped at the end of the test.
func poolWith(t *testing.T, prov sandbox.Provider, eg sandbox.EgressSource) *sandbox.Pool {
	t.Helper()
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: WorkspaceRoot(t), Egress: eg})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pool.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return pool
}
