package bwrap_test

import (
	"testing"

	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/proxy/proxytest"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

// TestImage: sandboxes on the base image run the image's programs and packages, see nothing of the host's
// /usr, and write only to their workspace and /tmp.
func TestImage(t *testing.T) { sandboxtest.RunImage(t, newProvider, imagetest.Base(t).RootFS) }

// TestOnImage runs the other suites with every sandbox on the base image.
func TestOnImage(t *testing.T) {
	onBase := sandboxtest.OnImage(newProvider, imagetest.Base(t).RootFS)
	t.Run("Conformance", func(t *testing.T) { sandboxtest.Run(t, onBase, sandboxtest.Options{}) })
	t.Run("RedTeam", func(t *testing.T) { sandboxtest.RunRedTeam(t, onBase) })
	t.Run("AgentGuard", func(t *testing.T) {
		sandboxtest.RunAgentGuard(t, onBase, sandboxtest.GuardOptions{})
	})
	t.Run("Limits", func(t *testing.T) { sandboxtest.RunLimits(t, onBase, sandboxtest.Options{}) })
	t.Run("Network", func(t *testing.T) { sandboxtest.RunNetwork(t, onBase) })
	t.Run("Hardening", func(t *testing.T) { sandboxtest.RunHardening(t, onBase, sandboxtest.HardeningOptions{}) })
	t.Run("Secrets", func(t *testing.T) { sandboxtest.RunSecrets(t, onBase, proxytest.Setup) })
	t.Run("Repository", func(t *testing.T) { sandboxtest.RunRepository(t, onBase, proxytest.Host) })
	// The image is bound under the state directory: a SIGKILLed server leaves it to the next start's sweep.
	t.Run("Crash", func(t *testing.T) { sandboxtest.RunCrash(t, onBase) })
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
