package oci_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/internal/proxy/proxytest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var agentPath string

func TestMain(m *testing.M) { sandboxtest.Main(m, &agentPath) }

func newProvider(t testing.TB) sandbox.Provider {
	t.Helper()
	sandboxtest.Require(t, "oci", oci.Available("runc"))
	p, err := oci.New(oci.Config{AgentPath: agentPath, StateDir: t.TempDir(), RuntimeRoot: t.TempDir()})
	if err != nil {
		sandboxtest.Require(t, "oci", err)
	}
	return p
}

func TestConformance(t *testing.T) { sandboxtest.Run(t, newProvider, sandboxtest.Options{}) }

func TestRedTeam(t *testing.T) { sandboxtest.RunRedTeam(t, newProvider) }

func TestRepository(t *testing.T) { sandboxtest.RunRepository(t, newProvider, proxytest.Host) }

func TestRedTeamRepository(t *testing.T) {
	sandboxtest.RunRedTeamRepository(t, newProvider, proxytest.Host)
}

func TestLimits(t *testing.T) { sandboxtest.RunLimits(t, newProvider, sandboxtest.Options{}) }

func TestNetwork(t *testing.T) { sandboxtest.RunNetwork(t, newProvider) }

func TestHardening(t *testing.T) {
	sandboxtest.RunHardening(t, newProvider, sandboxtest.HardeningOptions{})
}

func BenchmarkSandbox(b *testing.B) { sandboxtest.Bench(b, newProvider) }

// TestSweep checks that New deletes the containers a server that is gone left in its default runtime root.
func TestSweep(t *testing.T) {
	sandboxtest.Require(t, "oci", oci.Available("runc"))
	const name, deadPID = "ocisweeptest", "4194303"
	if syscall.Kill(4194303, 0) != syscall.ESRCH {
		t.Skip("pid 4194303 exists")
	}
	root := filepath.Join("/run/corral-"+name, deadPID)
	bundle := filepath.Join(os.TempDir(), "corral-"+name, deadPID, "box")
	t.Cleanup(func() {
		_ = exec.Command("runc", "--root", root, "delete", "--force", "left").Run()
		_ = os.RemoveAll("/run/corral-" + name)
		_ = os.RemoveAll(filepath.Join(os.TempDir(), "corral-"+name))
	})
	ws := t.TempDir()
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := oci.WriteBundle(bundle, oci.BundleSpec{UID: 399999, WorkspaceDir: ws, AgentPath: agentPath}); err != nil {
		t.Fatal(err)
	}
	// A created container, as a crashed server leaves it.
	// Its stdio is /dev/null: a pipe would be held open by the container.
	if err := exec.Command("runc", "--root", root, "create", "--bundle", bundle, "left").Run(); err != nil {
		t.Fatalf("runc create: %v", err)
	}
	if out, _ := exec.Command("runc", "--root", root, "list", "-q").Output(); strings.TrimSpace(string(out)) != "left" {
		t.Fatalf("container not created: %q", out)
	}
	if _, err := oci.New(oci.Config{AgentPath: agentPath, Name: name}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, bundle} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", dir, err)
		}
	}
	// (runc list makes the root again.)
	if out, _ := exec.Command("runc", "--root", root, "list", "-q").Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers left: %q", out)
	}
}
