// Package proxytest builds the server side of a session with a private repository for the sandbox suites
// (sandboxtest.RunRepository, sandboxtest.RunRedTeamRepository): a SQLite store and a vault in a temporary
// directory, the git endpoint (proxy.Git) and the workspace Placer wired as corral serve wires them, with the
// test's git server trusted as an operator's internal destination.
package proxytest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
	"github.com/corralhq/corral/internal/workspace"
)

// Host is a sandboxtest.RepoHost: the Placer, the git endpoint and sessions in a real store.
func Host(t testing.TB, srv *sandboxtest.GitServer) sandboxtest.RepoSetup {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	key := vault.NewKey()
	v, err := vault.Open(ctx, st, key)
	if err != nil {
		t.Fatal(err)
	}
	allow := []string{srv.HostPort}
	git, err := proxy.NewGit(proxy.GitConfig{Store: st, Vault: v, AllowInternal: allow, RootCAs: srv.RootCAs})
	if err != nil {
		t.Fatal(err)
	}
	placer, err := workspace.New(workspace.Config{Tokens: git, ExtraRootCAsPEM: srv.CAPEM, Resolve: proxy.Resolver(allow)})
	if err != nil {
		t.Fatal(err)
	}
	return sandboxtest.RepoSetup{
		Placer:    placer,
		Egress:    git,
		MasterKey: key.Encode(),
		Session: func(t testing.TB, repoURL, token string) (string, apitype.Resource) {
			t.Helper()
			now := apitype.Now()
			res := apitype.Resource{ID: apitype.NewID(apitype.PrefixResource), Type: apitype.ResourceGitHubRepository,
				URL: repoURL, CreatedAt: now, UpdatedAt: now}
			sess := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), EnvironmentID: "env_test",
				Status: apitype.StatusIdle, Agent: apitype.SessionAgent{Type: apitype.ObjectAgent, ID: "agent_test", Version: 1, Name: "test"},
				Resources: []apitype.Resource{res}, Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
			if _, _, err := st.SessionCreate(ctx, &store.SessionCreateParams{Session: sess}); err != nil {
				t.Fatal(err)
			}
			if token != "" {
				sealed, err := v.Seal(res.ID, proxy.TokenSecretName, []byte(token))
				if err != nil {
					t.Fatal(err)
				}
				if err := st.ResourceSecretPut(ctx, sess.ID, sealed); err != nil {
					t.Fatal(err)
				}
			}
			return sess.ID, res
		},
	}
}
