package main

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox/kubernetes"
	"github.com/corralhq/corral/internal/sandbox/kubernetes/kubetest"
)

// kubeClusters are the test clusters of the running tests, by the kubeconfig their serve flags name: the
// credential tests search them too.
var kubeClusters sync.Map // string -> *kubetest.Cluster

// TestKubernetesSession is TestSecretInjectedAtEgress with `corral serve --sandbox kubernetes` on a real one-node
// cluster (kubetest): the session's bash calls run in pods, a vault secret is injected at egress (the pod holds
// a placeholder), and the secret is found nowhere the other backends' test looks, nor in any object of the
// cluster or file of its state (etcd's data, the kubelet's and containerd's directories). Then the session
// resources' tests of the other backends (files and outputs, skills, memory stores, a private repository
// pushed to through the git endpoint) run on it too.
func TestKubernetesSession(t *testing.T) {
	base := imagetest.Base(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := kubetest.StartForTest(t, ctx)
	if err := c.ImportSandboxImages(ctx, filepath.Join(binDir, "corral"), kubernetes.DefaultAgentPath, base.RootFS); err != nil {
		t.Fatal(err)
	}
	const ns = "corral-e2e"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubeClusters.Store(c.Kubeconfig, c)
	t.Cleanup(func() { kubeClusters.Delete(c.Kubeconfig) })
	args := func(owner string, more ...string) []string {
		return append([]string{"--sandbox", "kubernetes", "--k8s-kubeconfig", c.Kubeconfig, "--k8s-namespace", ns,
			"--k8s-image", kubetest.SandboxImage, "--k8s-agent-image", kubetest.AgentImage, "--k8s-pull-policy", "Never",
			"--k8s-egress-ip", c.NodeIP, "--k8s-owner", owner}, more...)
	}
	testSecretInjectedAtEgress(t, args("e2e"))
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=e2e"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Error("no sandbox pod of the server: the calls did not run on the cluster")
	}

	// The session's resources, placed in a staging copy on the server and copied into each pod; the outputs and
	// memory stores copied back when a turn ends. The other backends' tests, each on a server of its own (its
	// owner's pods are its own). The repository's test restarts its server: its workspace is a claim, which the
	// next pod mounts with the agent's commits in it (the resource is not copied over them).
	for _, tc := range []struct {
		name string
		test func(*testing.T, []string)
		args []string
	}{
		{"Files", testFilesInAndOut, args("e2e-files")},
		{"Skills", testSkillInSandbox, args("e2e-skills")},
		{"Memory", testMemoryMounted, args("e2e-memory")},
		{"PrivateRepository", testPrivateRepositoryPush, args("e2e-repo", "--k8s-workspace-class", kubetest.StorageClass)},
		{"EnvironmentImage", func(t *testing.T, args []string) { testEnvironmentImageInPods(t, c, ns, args) }, args("e2e-image")},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, tc.args) })
	}
}

// assertClusterClean searches the cluster of sandboxArgs, if they name one, for the forbidden strings: every
// object the API server lists and every file of its state (kubetest.Cluster.Search).
func assertClusterClean(t *testing.T, sandboxArgs []string, forbidden map[string]string) {
	v, ok := kubeClusters.Load(flagValue(sandboxArgs, "--k8s-kubeconfig"))
	if !ok {
		return
	}
	s, err := v.(*kubetest.Cluster).Search(context.Background(), forbidden)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range s.Found {
		t.Error(f)
	}
	t.Logf("searched the cluster's objects (%d pods) and %d files of its state for %d secrets", s.Pods, s.Files, len(forbidden))
}

// testEnvironmentImageInPods: with --k8s-registry, the server builds an environment's packages (--images
// debian), pushes the image to the registry (go-containerregistry's, on this host: the node's containerd pulls
// from localhost over HTTP) and its sessions' pods run it by digest: jq is there, without a note that the
// packages were not installed. A second session's pod runs the same image, pushed once.
func testEnvironmentImageInPods(t *testing.T, c *kubetest.Cluster, ns string, args []string) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(registry.NewDiskBlobHandler(t.TempDir()))))
	defer reg.Close()
	repo := "localhost:" + strings.TrimPrefix(reg.URL, "http://127.0.0.1:") + "/corral/env"
	model := modeltest.NewServer(t)
	jqCheck := modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo '{\"a\": 5}' | jq .a && dpkg-query -W -f '${Version}\\n' jq"}`}}}
	model.Script(jqCheck, modeltest.Turn{Text: "jq works."}, jqCheck, modeltest.Turn{Text: "jq works again."})
	s := startServer(t, t.TempDir(), model, append(args, "--images", "debian", "--k8s-registry", repo,
		"--egress-allow-internal", strings.Join(imagetest.RegistryGateways(), ","))...)
	cl := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, err := cl.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "jq", Config: apitype.EnvConfig{Type: "cloud", Packages: &apitype.Packages{Apt: []string{jqImage}}}})
	if err != nil {
		t.Fatal(err)
	}
	owner := flagValue(args, "--k8s-owner")
	for i := range 2 {
		events := waitIdleFor(ctx, t, cl, newEnvSession(t, cl, env.ID, "Use jq."))
		if out := resultText(events); !strings.Contains(out, `5\n1.6-2.1+deb12u2`) || strings.Contains(out, "not installed") {
			t.Errorf("session %d: jq in the pod: %s", i, out)
		}
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=" + owner})
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, p := range pods.Items {
		for _, ctr := range p.Spec.Containers {
			images = append(images, ctr.Image)
		}
	}
	if len(images) == 0 || !strings.HasPrefix(images[0], repo+"@sha256:") || len(slices.Compact(images)) != 1 {
		t.Errorf("the sessions' pods run %q; want one image of %s, by digest", images, repo)
	}
	if n := strings.Count(s.stderr.String(), "pushed an environment's image"); n != 1 {
		t.Errorf("the image was pushed %d times, want once", n)
	}
}
