package kubetest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestHold keeps this package's cluster up for work by hand (corral serve or corral bench with --sandbox
// kubernetes): with CORRAL_KUBETEST_HOLD naming a file, it imports the sandbox images (the agent binary
// CORRAL_KUBETEST_AGENT at /usr/local/bin/corral-sandbox-agent, the root filesystem CORRAL_KUBETEST_ROOTFS),
// writes the serve flags that reach the cluster into that file, and waits until the file is removed. Run it
// with -timeout 0:
//
//	CORRAL_K8S_BIN=/opt/corral-k8s/v1.37.2 CORRAL_KUBETEST_HOLD=/tmp/k8s.flags CORRAL_KUBETEST_AGENT=... \
//	CORRAL_KUBETEST_ROOTFS=... go test -run '^TestHold$' -timeout 0 ./internal/sandbox/kubernetes/kubetest/
func TestHold(t *testing.T) {
	hold := os.Getenv("CORRAL_KUBETEST_HOLD")
	if hold == "" {
		t.Skip("CORRAL_KUBETEST_HOLD is not set: nothing to hold the cluster for")
	}
	Require(t, StartErr())
	ctx := context.Background()
	if err := cluster.ImportSandboxImages(ctx, os.Getenv("CORRAL_KUBETEST_AGENT"), "/usr/local/bin/corral-sandbox-agent", os.Getenv("CORRAL_KUBETEST_ROOTFS")); err != nil {
		t.Fatal(err)
	}
	flags := fmt.Sprintf("--k8s-kubeconfig %s --k8s-namespace default --k8s-image %s --k8s-agent-image %s --k8s-pull-policy Never --k8s-egress-ip %s\n",
		cluster.Kubeconfig, SandboxImage, AgentImage, cluster.NodeIP)
	if err := os.WriteFile(hold, []byte(flags), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("holding the cluster until %s is removed: %s", hold, flags)
	for {
		if _, err := os.Stat(hold); os.IsNotExist(err) {
			return
		}
		time.Sleep(time.Second)
	}
}
