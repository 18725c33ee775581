package bwrap_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/internal/proxy/proxytest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/host"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var agentPath string

func TestMain(m *testing.M) { sandboxtest.Main(m, &agentPath) }

func newProvider(t testing.TB) sandbox.Provider {
	return newProviderWith(t, bwrap.Config{AgentPath: agentPath})
}

// newProviderWith is a provider of cfg, closed when the test ends.
func newProviderWith(t testing.TB, cfg bwrap.Config) *bwrap.Provider {
	t.Helper()
	sandboxtest.Require(t, "bwrap", bwrap.Available(""))
	p, err := bwrap.New(cfg)
	if err != nil {
		sandboxtest.Require(t, "bwrap", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// TestCrash: sandboxes die with a SIGKILLed server, and the next start sweeps the state directories and
// cgroups it left.
func TestCrash(t *testing.T) { sandboxtest.RunCrash(t, newProvider) }

func TestConformance(t *testing.T) { sandboxtest.Run(t, newProvider, sandboxtest.Options{}) }

func TestRedTeam(t *testing.T) { sandboxtest.RunRedTeam(t, newProvider) }

func TestAgentGuard(t *testing.T) {
	sandboxtest.RunAgentGuard(t, newProvider, sandboxtest.GuardOptions{})
}

func TestRepository(t *testing.T) { sandboxtest.RunRepository(t, newProvider, proxytest.Host) }

func TestRedTeamRepository(t *testing.T) {
	sandboxtest.RunRedTeamRepository(t, newProvider, proxytest.Host)
}

func TestLimits(t *testing.T) { sandboxtest.RunLimits(t, newProvider, sandboxtest.Options{}) }

func TestNetwork(t *testing.T) { sandboxtest.RunNetwork(t, newProvider) }

func TestQuota(t *testing.T) { sandboxtest.RunQuota(t, newProvider) }

func TestHardening(t *testing.T) {
	sandboxtest.RunHardening(t, newProvider, sandboxtest.HardeningOptions{})
}

func BenchmarkSandbox(b *testing.B) { sandboxtest.Bench(b, newProvider) }

// BenchmarkQuotaFill replays the session of issue 14 that filled the store's filesystem (minutes; run with
// -benchtime=1x).
func BenchmarkQuotaFill(b *testing.B) { sandboxtest.BenchQuotaFill(b, newProvider) }

// BenchmarkSandboxNoCgroups measures bwrap without the cgroup setup, to show what the limits cost.
func BenchmarkSandboxNoCgroups(b *testing.B) {
	sandboxtest.Bench(b, func(t testing.TB) sandbox.Provider {
		return newProviderWith(t, bwrap.Config{AgentPath: agentPath, StateDir: sandboxtest.WorkspaceRoot(t), NoCgroups: true})
	})
}

// BenchmarkSandboxCold measures bwrap with no start kept ready (Config.Warm), to show what it saves.
func BenchmarkSandboxCold(b *testing.B) {
	sandboxtest.Bench(b, func(t testing.TB) sandbox.Provider {
		return newProviderWith(t, bwrap.Config{AgentPath: agentPath, Warm: -1})
	})
}

// TestPrivateWorkspaceRoot checks that workspaces under a directory private to root (0700 ancestors) work:
// they reach the sandbox through bind mounts staged under the state directory.
func TestPrivateWorkspaceRoot(t *testing.T) {
	prov := newProvider(t)
	root := filepath.Join(t.TempDir(), "private", "workspaces")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(root), 0o700); err != nil {
		t.Fatal(err)
	}
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Stop()
	res, err := pool.Execute(context.Background(), &sandbox.Call{
		Recipe: sandbox.Recipe{SessionID: "s"}, Name: "bash",
		Input: json.RawMessage(`{"command":"echo hello > f && cat f && id -u"}`),
	})
	if err != nil || res.IsError || res.Content[0].Text != "hello\n1000" {
		t.Fatalf("bash: %v %+v", err, res)
	}
	// The staging mounts are gone once the sandbox runs: what is left is the state directory's tmpfs.
	state := prov.(*bwrap.Provider).HostPaths()[0]
	if m := host.MountsUnder(state); len(m) > 0 {
		t.Errorf("staging mounts left while the sandbox runs: %v", m)
	}
	fi, err := os.Stat(filepath.Join(root, "s", "f"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid < 200000 {
		t.Errorf("file owned by host uid %d, want the sandbox's", st.Uid)
	}
	if err := pool.Stop(); err != nil {
		t.Fatal(err)
	}
	// The staging mounts are gone, and with the provider its state tmpfs.
	if m := host.MountsUnder(state); len(m) > 0 {
		t.Errorf("mounts left behind: %v", m)
	}
	if err := prov.(*bwrap.Provider).Close(); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(data), " "+state+" ") || len(host.MountsUnder(state)) > 0 {
		t.Errorf("the provider's mounts left behind after Close:\n%s", data)
	}
}
