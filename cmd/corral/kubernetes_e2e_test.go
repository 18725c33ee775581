package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/sandbox/kubernetes"
	"github.com/corralhq/corral/internal/sandbox/kubernetes/kubetest"
)

// kubeClusters are the test clusters of the running tests, by the kubeconfig their serve flags name: the
// credential tests search them too.
var kubeClusters sync.Map // string -> *kubetest.Cluster

// TestKubernetesSession is TestSecretInjectedAtEgress with `corral serve --sandbox kubernetes` on a real one-node
// cluster (kubetest): the session's bash calls run in pods, a vault secret is injected at egress (the pod holds
// a placeholder), and the secret is found nowhere the other backends' test looks, nor in any object of the
// cluster or file of its state (etcd's data, the kubelet's and containerd's directories).
func TestKubernetesSession(t *testing.T) {
	if os.Geteuid() != 0 {
		kubetest.Require(t, errors.New("the test cluster needs root"))
	}
	base := imagetest.Base(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := kubetest.Start(ctx, t.Logf)
	kubetest.Require(t, err)
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := c.ImportSandboxImages(ctx, filepath.Join(binDir, "corral"), kubernetes.DefaultAgentPath, base.RootFS); err != nil {
		t.Fatal(err)
	}
	const ns = "corral-e2e"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubeClusters.Store(c.Kubeconfig, c)
	t.Cleanup(func() { kubeClusters.Delete(c.Kubeconfig) })
	testSecretInjectedAtEgress(t, []string{"--sandbox", "kubernetes", "--k8s-kubeconfig", c.Kubeconfig, "--k8s-namespace", ns,
		"--k8s-image", kubetest.SandboxImage, "--k8s-agent-image", kubetest.AgentImage, "--k8s-pull-policy", "Never",
		"--k8s-egress-ip", c.NodeIP, "--k8s-owner", "e2e"})
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=e2e"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Error("no sandbox pod of the server: the calls did not run on the cluster")
	}
}

// assertClusterClean searches the cluster of sandboxArgs, if they name one, for the forbidden strings: every
// object the API server lists (pods, config maps, secrets, events, network policies, in every namespace) and
// every file of its state.
func assertClusterClean(t *testing.T, sandboxArgs []string, forbidden map[string]string) {
	v, ok := kubeClusters.Load(flagValue(sandboxArgs, "--k8s-kubeconfig"))
	if !ok {
		return
	}
	c := v.(*kubetest.Cluster)
	ctx := context.Background()
	lists := map[string]func() (any, error){
		"pods":        func() (any, error) { return c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{}) },
		"config maps": func() (any, error) { return c.Client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}) },
		"secrets":     func() (any, error) { return c.Client.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}) },
		"events":      func() (any, error) { return c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{}) },
		"networkpolicies": func() (any, error) {
			return c.Client.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
		},
	}
	for kind, list := range lists {
		o, err := list()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(o)
		for label, s := range forbidden {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("the cluster's %s hold %s", kind, label)
			}
		}
	}
	files := 0
	err := filepath.WalkDir(c.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file that went while the walk ran
		}
		if d.IsDir() {
			if d.Name() == "snapshots" && strings.Contains(path, "overlayfs") {
				return filepath.SkipDir // the images' files: nothing of a session's
			}
			return nil
		}
		if fi, err := d.Info(); err != nil || !fi.Mode().IsRegular() || fi.Size() > 256<<20 {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		files++
		for label, s := range forbidden {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds %s", path, label)
			}
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Errorf("the cluster's state: %d files searched: %v", files, err)
	}
	t.Logf("searched the cluster's objects and %d files of its state for %s", files, fmt.Sprint(len(forbidden))+" secrets")
}
