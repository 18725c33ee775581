package helm_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/jackc/pgx/v5"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox/kubernetes"
	"github.com/corralhq/corral/internal/sandbox/kubernetes/kubetest"
)

// TestInstallOnCluster installs the chart with the real helm into a real one-node cluster (kubetest), on
// Corral's own image (cmd/corral-image) and a PostgreSQL database of its own, with the kubernetes sandbox
// backend: the API, the brains and the MCP proxy become ready, and a session driven through the official SDK
// runs its bash call in a pod the brain made with the chart's service account, in the release's namespace, on a
// workspace claim of the cluster's storage class.
func TestInstallOnCluster(t *testing.T) {
	base := os.Getenv("CORRAL_TEST_POSTGRES")
	if base == "" {
		t.Skip("CORRAL_TEST_POSTGRES is not set: the chart runs on PostgreSQL")
	}
	helmPath := helmBin(t)
	rootfs := imagetest.Base(t).RootFS
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := kubetest.StartForTest(t, ctx)

	// Corral's image, built as an operator builds it, and the sandboxes' image.
	tarPath := filepath.Join(t.TempDir(), "corral.tar")
	_, file, _, _ := runtime.Caller(0)
	build := exec.CommandContext(ctx, "go", "run", "./cmd/corral-image", "--tar", tarPath, "--tag", "localhost/corral/corral:test")
	build.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("corral-image: %v\n%s", err, out)
	}
	if err := c.ImportArchive(ctx, tarPath); err != nil {
		t.Fatal(err)
	}
	// The sandbox image needs no agent of its own: the init container copies Corral's image's.
	if err := c.ImportSandboxImage(ctx, rootfs); err != nil {
		t.Fatal(err)
	}

	// A database of its own, and the database and the fake model reachable from the pods at the node's address.
	db := "corral_helm_" + randomHex(6)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the database is dropped (its pods' connections forced off), then the
	// connection closes.
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			t.Errorf("drop the test's database %s: %v", db, err)
		}
	})
	pgURL, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	pgURL.Host = forward(t, c.NodeIP, pgURL.Host)
	pgURL.Path = "/" + db
	model := modeltest.NewServer(t)
	model.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo host=$(hostname) uid=$(id -u)"}`}}},
		modeltest.Turn{Text: "Done."})
	modelURL, _ := url.Parse(model.URL)
	modelURL.Host = forward(t, c.NodeIP, modelURL.Host)

	const ns = "corral"
	apiKey := "sk-corral-" + randomHex(16)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string]string{
		"corral-db":      {"url": pgURL.String()},
		"corral-vault":   {"vault-key": base64.StdEncoding.EncodeToString(key)},
		"corral-api-key": {"api-key": apiKey},
		"corral-model":   {"ANTHROPIC_API_KEY": "test-model-key", "ANTHROPIC_BASE_URL": modelURL.String()},
		"corral-proxy":   {"token": randomHex(16)},
	} {
		if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The test cluster runs no kube-proxy: the brains reach the API server at the node's address, which its
	// certificate names.
	install := exec.CommandContext(ctx, helmPath, "install", "rel", "corral", "--namespace", ns, "--wait", "--timeout", "5m",
		"--set", "image.repository=localhost/corral/corral", "--set", "image.tag=test", "--set", "image.pullPolicy=Never",
		"--set", "database.existingSecret=corral-db", "--set", "vault.existingSecret=corral-vault",
		"--set", "apiKey.existingSecret=corral-api-key", "--set", "model.existingSecret=corral-model",
		"--set", "proxy.existingSecret=corral-proxy",
		"--set", "api.replicas=1", "--set", "harness.replicas=1",
		"--set", "harness.sandbox=kubernetes", "--set", "harness.kubernetes.image="+kubetest.SandboxImage,
		"--set", "harness.kubernetes.workspaceClass="+kubetest.StorageClass,
		"--set", fmt.Sprintf("harness.kubernetes.podPidsLimit=%d", kubetest.PodPidsLimit),
		"--set", "extraEnv[0].name=KUBERNETES_SERVICE_HOST", "--set", "extraEnv[0].value="+c.NodeIP,
		"--set-string", "extraEnv[1].name=KUBERNETES_SERVICE_PORT", "--set-string", "extraEnv[1].value=16443")
	install.Dir = filepath.Dir(file)
	install.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	t0 := time.Now()
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s\n%s", err, out, podReport(ctx, c, ns))
	}
	t.Logf("helm install --wait: ready in %s", time.Since(t0).Round(time.Millisecond))

	// The harness may read its workspace class (the check at the backend's start) and no other StorageClass.
	for class, want := range map[string]bool{kubetest.StorageClass: true, "another-class": false} {
		review, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns + ":rel-corral-harness",
			ResourceAttributes: &authv1.ResourceAttributes{Group: "storage.k8s.io", Resource: "storageclasses", Name: class, Verb: "get"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != want {
			t.Errorf("the harness may get StorageClass %s: %v, want %v (%s)", class, review.Status.Allowed, want, review.Status.Reason)
		}
	}

	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=api"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("the API's pod: %v %v", pods, err)
	}
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL("http://"+net.JoinHostPort(pods.Items[0].Status.PodIP, "8080")),
		option.WithAPIKey(apiKey), option.WithMaxRetries(2))
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "chart", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "chart"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "Where are you?"}}})},
	}); err != nil {
		t.Fatal(err)
	}
	var result string
	for result == "" {
		iter := client.Beta.Sessions.Events.ListAutoPaging(ctx, sess.ID, anthropic.BetaSessionEventListParams{})
		for iter.Next() {
			if ev := iter.Current(); ev.Type == "agent.tool_result" {
				for _, b := range ev.AsAgentToolResult().Content {
					result += b.Text
				}
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no tool result: %s", podReport(context.Background(), c, ns))
		case <-time.After(300 * time.Millisecond):
		}
	}
	sandboxes, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelManaged + "=corral"})
	if err != nil || len(sandboxes.Items) != 1 {
		t.Fatalf("sandbox pods: %v %v", sandboxes, err)
	}
	sb := sandboxes.Items[0]
	if want := "host=" + sb.Name + " uid=65532"; !strings.Contains(result, want) {
		t.Errorf("the bash call answered %q; want %q (it ran in the sandbox's pod)", result, want)
	}
	if owner := sb.Labels[kubernetes.LabelOwner]; !strings.HasPrefix(owner, "rel-corral-harness-") || sb.Labels[kubernetes.LabelSession] != sess.ID {
		t.Errorf("the sandbox pod's labels: %v; want the harness pod as its owner and the session", sb.Labels)
	}
	// The session's workspace is a claim of the workspace class, which the chart's Role let the harness make.
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelSession + "=" + sess.ID})
	if err != nil || len(claims.Items) != 1 || claims.Items[0].Status.Phase != corev1.ClaimBound {
		t.Fatalf("the session's workspace claims: %v %v; want one, bound", claims, err)
	}
	mounted := false
	for _, v := range sb.Spec.Volumes {
		mounted = mounted || v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claims.Items[0].Name
	}
	if !mounted {
		t.Errorf("the sandbox pod does not mount the session's claim %s", claims.Items[0].Name)
	}
}

// forward serves a TCP port on ip that forwards each connection to target, until the test ends, and returns
// its address: pods reach the host's loopback services through it.
func forward(t *testing.T, ip, target string) string {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// podReport says where each pod of the namespace is, with its containers' states, for a failure's message.
func podReport(ctx context.Context, c *kubetest.Cluster, ns string) string {
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		st, _ := json.Marshal(p.Status.ContainerStatuses)
		fmt.Fprintf(&b, "%s %s %s\n", p.Name, p.Status.Phase, st)
		for _, cs := range p.Status.ContainerStatuses {
			if logs, err := c.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, TailLines: new(int64(20))}).DoRaw(ctx); err == nil {
				fmt.Fprintf(&b, "  %s: %s\n", cs.Name, logs)
			}
		}
	}
	return b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
