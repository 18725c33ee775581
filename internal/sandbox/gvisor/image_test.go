package gvisor_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/proxy/proxytest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/gvisor"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

// TestImage: sandboxes on the base image run the image's programs and packages, see nothing of the host's
// /usr, and write only to their workspace and /tmp.
func TestImage(t *testing.T) { sandboxtest.RunImage(t, newProvider, imagetest.Base(t).RootFS) }

// TestOnImage runs the other suites with every sandbox on the base image.
func TestOnImage(t *testing.T) {
	onBase := sandboxtest.OnImage(newShortProvider, imagetest.Base(t).RootFS)
	t.Run("Conformance", func(t *testing.T) { sandboxtest.Run(t, onBase, sandboxtest.Options{NoHostProcesses: true}) })
	t.Run("RedTeam", func(t *testing.T) { sandboxtest.RunRedTeam(t, onBase) })
	t.Run("AgentGuard", func(t *testing.T) {
		sandboxtest.RunAgentGuard(t, onBase, sandboxtest.GuardOptions{ShellNamespace: "gVisor does not protect a pid namespace's init from its members' SIGKILL and SIGSTOP (pkg/sentry/kernel/task_signals.go)"})
	})
	t.Run("Limits", func(t *testing.T) { sandboxtest.RunLimits(t, onBase, sandboxtest.Options{NoHostProcesses: true}) })
	t.Run("Network", func(t *testing.T) { sandboxtest.RunNetwork(t, onBase) })
	t.Run("Hardening", func(t *testing.T) {
		sandboxtest.RunHardening(t, onBase, sandboxtest.HardeningOptions{AllowClone3: true})
	})
	t.Run("Secrets", func(t *testing.T) { sandboxtest.RunSecrets(t, onBase, proxytest.Setup) })
	t.Run("Repository", func(t *testing.T) { sandboxtest.RunRepository(t, onBase, proxytest.Host) })
}

// BenchmarkSandboxImage compares provisioning on the base image with provisioning on the host's /usr.
func BenchmarkSandboxImage(b *testing.B) {
	sandboxtest.BenchImage(b, newProvider, imagetest.Base(b).RootFS)
}

// TestRegistries: allow_package_managers opens the registries of the environment's managers, and nothing else,
// to a sandbox through its egress proxy.
func TestRegistries(t *testing.T) {
	sandboxtest.RunRegistries(t, newProvider, imagetest.ManagerEgress)
}

// newShortProvider is newProvider with state directories of short paths: the egress proxy's socket is made in
// them and its path must fit a Unix socket address, which t.TempDir's, named for the long names of the
// subtests on the image, do not.
func newShortProvider(t testing.TB) sandbox.Provider {
	t.Helper()
	sandboxtest.Require(t, "gvisor", gvisor.Available(runsc))
	root := shortDir(t)
	t.Cleanup(func() { _ = syscall.Unmount(filepath.Join(root, "null-netns"), syscall.MNT_DETACH) })
	p, err := gvisor.New(gvisor.Config{Runsc: runsc, OCI: oci.Config{AgentPath: agentPath, StateDir: shortDir(t), RuntimeRoot: root}})
	if err != nil {
		sandboxtest.Require(t, "gvisor", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gvisor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
