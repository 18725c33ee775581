package oci_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// newDefaultProvider is newProvider in the default runtime root and state directory, which New sweeps.
func newDefaultProvider(t testing.TB) sandbox.Provider {
	t.Helper()
	sandboxtest.Require(t, "oci", oci.Available("runc"))
	p, err := oci.New(oci.Config{AgentPath: agentPath})
	if err != nil {
		sandboxtest.Require(t, "oci", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestCrash: containers die with a SIGKILLed server, and the next start sweeps the runtime state, bundles and
// cgroups it left.
func TestCrash(t *testing.T) { sandboxtest.RunCrash(t, newDefaultProvider) }

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
	p, err := oci.New(oci.Config{AgentPath: agentPath, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
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

// TestNeutralStateDir checks the default bundle directory: a neutral name, which a sandbox's mount table shows,
// with a link named for the server's pid, which sweep reads.
func TestNeutralStateDir(t *testing.T) {
	sandboxtest.Require(t, "oci", oci.Available("runc"))
	const name = "ocistatetest"
	base := filepath.Join(os.TempDir(), "corral-"+name)
	t.Cleanup(func() {
		_ = os.RemoveAll(base)
		_ = os.RemoveAll("/run/corral-" + name)
	})
	p, err := oci.New(oci.Config{AgentPath: agentPath, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ents, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	var links, dirs int
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(base, e.Name()))
		switch {
		case err == nil:
			links++
			owner, _, _ := strings.Cut(e.Name(), ".")
			if owner != strconv.Itoa(os.Getpid()) || !strings.HasPrefix(target, "s-") {
				t.Errorf("link %s -> %s", e.Name(), target)
			}
			if fi, err := os.Stat(filepath.Join(base, target)); err != nil || !fi.IsDir() {
				t.Errorf("link %s -> %s: %v", e.Name(), target, err)
			}
		case e.IsDir():
			dirs++
			if strings.Contains(e.Name(), strconv.Itoa(os.Getpid())) {
				t.Errorf("state dir %s is named for the pid", e.Name())
			}
		}
	}
	if links != 1 || dirs != 1 {
		t.Errorf("%d links and %d directories in %s, want one each", links, dirs, base)
	}
}
