package kubernetes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/proxy/proxytest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/kubernetes"
	"github.com/corralhq/corral/internal/sandbox/kubernetes/kubetest"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var (
	cluster   *kubetest.Cluster
	agentPath string
)

const namespace = "corral-test"

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(m.Run()) // TestCrash's server: the parent's cluster, images and agent
	}
	// The agent is built where it is found again by the next run (kubetest.Main exits the process).
	dir := filepath.Join(os.TempDir(), "corral-kubernetes-test-agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var err error
	if agentPath, err = sandboxtest.BuildAgent(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kubetest.Main(m, &cluster)
}

var (
	imagesOnce sync.Once
	imagesErr  error
)

// images imports Corral's agent image (the agent at kubernetes.DefaultAgentPath, nothing else: no shell) and
// the sandbox image (the tests' Debian base) into the node, once.
func images(t testing.TB) {
	t.Helper()
	kubetest.Require(t, kubetest.StartErr())
	base := imagetest.Base(t)
	imagesOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		imagesErr = cluster.ImportSandboxImages(ctx, agentPath, kubernetes.DefaultAgentPath, base.RootFS)
		if imagesErr == nil {
			_, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				imagesErr = err
			}
		}
	})
	if imagesErr != nil {
		t.Fatal(imagesErr)
	}
}

var owners atomic.Int64

// config is a provider's configuration on the test cluster, with an owner of its own.
func config(t testing.TB) kubernetes.Config {
	images(t)
	return configOn(cluster.Config, cluster.NodeIP, fmt.Sprintf("test-%d-%d", os.Getpid(), owners.Add(1)))
}

func configOn(rc *rest.Config, nodeIP, owner string) kubernetes.Config {
	return kubernetes.Config{REST: rc, Namespace: namespace, Image: kubetest.SandboxImage, AgentImage: kubetest.AgentImage,
		ImagePullPolicy: corev1.PullNever, EgressIP: netip.MustParseAddr(nodeIP), Owner: owner, WorkspaceBytes: 1 << 30,
		// The node has two cores: the suites run dozens of pods at once.
		CPURequestMilli: 10, PodPidsLimit: kubetest.PodPidsLimit}
}

func newProviderWith(t testing.TB, cfg kubernetes.Config) *kubernetes.Provider {
	t.Helper()
	p, err := kubernetes.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// newProvider is a provider whose pods run on the tests' base image, which the suites are told (its RootFS:
// the image's own /root is not the host's), with the sessions' workspaces on claims of the cluster's storage
// class. The suites name their sessions alike: each provider's are its own.
func newProvider(t testing.TB) sandbox.Provider {
	cfg := config(t)
	cfg.WorkspaceClass = kubetest.StorageClass
	return onBase{Provider: newProviderWith(t, cfg), rootfs: imagetest.Base(t).RootFS, sessions: cfg.Owner + "-"}
}

type onBase struct {
	*kubernetes.Provider
	rootfs   string
	sessions string // the prefix of its sessions' ids
}

func (p onBase) RootFS() string { return p.rootfs }

func (p onBase) Provision(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) (sandbox.Sandbox, error) {
	own := *r
	own.SessionID = p.sessions + r.SessionID
	return p.Provider.Provision(ctx, &own, host)
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, newProvider, sandboxtest.Options{Remote: true})
}

func TestRedTeam(t *testing.T) {
	sandboxtest.RunRedTeamWith(t, newProvider, sandboxtest.RedTeamOptions{
		KernelCmdlineShown: "a runc pod sees the node's /proc/cmdline (containerd masks no such path); a gvisor RuntimeClass hides it"})
}

func TestNetwork(t *testing.T) { sandboxtest.RunNetwork(t, newProvider) }

func TestLimits(t *testing.T) {
	sandboxtest.RunLimits(t, newProvider, sandboxtest.Options{Remote: true, PidsLimit: kubetest.PodPidsLimit})
}

// TestWorkspaceClaim: with a workspace class, a session's workspace is a claim of its own that its next pod
// mounts again, and RemoveWorkspaces deletes it (and its volume) once the session is gone; without one, the
// workspace goes with the pod.
// A workspace class the cluster does not have: the sandbox does not start, and the error says why (the pod
// unschedulable on its claim) once the start timeout is up; the claim is left for the session's removal.
// TestWorkspaceClassMissing: a workspace class the cluster does not have is refused when the provider starts,
// with the reason; one whose StorageClass goes after the start fails each sandbox's start at its timeout with the
// scheduler's reason, and its claim is still removed with the session.
func TestWorkspaceClassMissing(t *testing.T) {
	ctx := context.Background()
	cfg := config(t)
	cfg.WorkspaceClass = "corral-no-such-class"
	if p, err := kubernetes.New(ctx, cfg); err == nil || !strings.Contains(err.Error(), `workspace class "corral-no-such-class": the cluster has no such StorageClass`) {
		if p != nil {
			p.Close()
		}
		t.Fatalf("New with a class the cluster does not have: %v", err)
	}
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: cfg.WorkspaceClass}, Provisioner: "corral.dev/nobody"}
	if _, err := cluster.Client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg.StartTimeout = 20 * time.Second
	p := newProviderWith(t, cfg)
	if err := cluster.Client.StorageV1().StorageClasses().Delete(ctx, class.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	session := "sesn_noclass_" + cfg.Owner
	sb, err := p.Provision(ctx, &sandbox.Recipe{SessionID: session}, sandbox.HostDirs{})
	if err == nil {
		sb.Close()
		t.Fatal("a sandbox started on a claim of a class the cluster does not have")
	}
	t.Logf("the error: %v", err)
	if msg := err.Error(); !strings.Contains(msg, "did not start") || !strings.Contains(msg, "Unschedulable") || !strings.Contains(msg, "PersistentVolumeClaim") {
		t.Errorf("error %q does not say the pod could not be scheduled on its claim", msg)
	}
	if ids, err := p.Workspaces(ctx); err != nil || !slices.Contains(ids, session) {
		t.Fatalf("Workspaces = %v, %v; want %s in it", ids, err, session)
	}
	if err := p.RemoveWorkspace(ctx, session); err != nil {
		t.Fatal(err)
	}
	if ids, err := p.Workspaces(ctx); err != nil || slices.Contains(ids, session) {
		t.Errorf("Workspaces after RemoveWorkspace = %v, %v", ids, err)
	}
}

func TestWorkspaceClaim(t *testing.T) {
	ctx := context.Background()
	cfg := config(t)
	cfg.WorkspaceClass = kubetest.StorageClass
	p := newProviderWith(t, cfg)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: p, WorkspaceRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Stop() })
	session := "sesn_claim_" + cfg.Owner
	run := func(cmd string) string {
		t.Helper()
		in, _ := json.Marshal(map[string]string{"command": cmd})
		res, err := pool.Execute(ctx, &sandbox.Call{Recipe: sandbox.Recipe{SessionID: session}, Name: "bash", Input: in})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %q", cmd, err, res.Text())
		}
		return strings.TrimSpace(res.Text())
	}
	run("echo kept > keep.txt; hostname > first")
	pods, err := cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=" + cfg.Owner})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v, %v", pods, err)
	}
	var claim string
	for _, v := range pods.Items[0].Spec.Volumes {
		if v.Name == "workspace" && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	pvc, err := cluster.Client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pod's workspace claim %q: %v", claim, err)
	}
	if pvc.Annotations[kubernetes.AnnotationSession] != session || pvc.Spec.Resources.Requests.Storage().Value() != cfg.WorkspaceBytes ||
		pvc.Status.Phase != corev1.ClaimBound {
		t.Errorf("claim: annotations %v, request %v, phase %s", pvc.Annotations, pvc.Spec.Resources.Requests, pvc.Status.Phase)
	}
	// The pod goes (closed, as the idle reaper does; TestPodDeleted and the suites delete or kill it): the next
	// one finds the workspace.
	if err := pool.Close(session); err != nil {
		t.Fatal(err)
	}
	if got := run("cat keep.txt; [ \"$(cat first)\" != \"$(hostname)\" ] && echo new-pod"); got != "kept\nnew-pod" {
		t.Errorf("the next pod's workspace: %q", got)
	}
	if ids, err := p.Workspaces(ctx); err != nil || !slices.Contains(ids, session) {
		t.Fatalf("Workspaces = %v, %v; want %s in it", ids, err, session)
	}
	n, err := pool.RemoveWorkspaces(ctx, func(_ context.Context, id string) (bool, error) { return id == session, nil })
	if n != 1 || err != nil {
		t.Fatalf("RemoveWorkspaces = %d, %v", n, err)
	}
	volume := pvc.Spec.VolumeName
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, cerr := cluster.Client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
		_, verr := cluster.Client.CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		if apierrors.IsNotFound(cerr) && apierrors.IsNotFound(verr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after RemoveWorkspaces: claim %v, volume %v", cerr, verr)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Without a class: an emptyDir, gone with its pod.
	plain := newProviderWith(t, config(t))
	sb, err := plain.Provision(ctx, &sandbox.Recipe{SessionID: session}, sandbox.HostDirs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Execute(ctx, "", "bash", json.RawMessage(`{"command":"echo kept > keep.txt"}`)); err != nil {
		t.Fatal(err)
	}
	sb.Close()
	if sb, err = plain.Provision(ctx, &sandbox.Recipe{SessionID: session}, sandbox.HostDirs{}); err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	res, err := sb.Execute(ctx, "", "bash", json.RawMessage(`{"command":"cat keep.txt 2>/dev/null || echo empty"}`))
	if err != nil || strings.TrimSpace(res.Text()) != "empty" {
		t.Errorf("an emptyDir workspace after its pod: %v %q", err, res.Text())
	}
}

// TestSecrets runs the credentials red team in pods, then searches every object of the cluster (through the
// API server) and every file of its state (etcd's data, containerd's and the kubelet's directories) for the
// secrets: none may hold one.
func TestSecrets(t *testing.T) {
	var forbidden map[string]string
	setup := func(t *testing.T, creds []sandboxtest.SecretCredential, trusted []string) (sandbox.EgressSource, map[string]string) {
		src, f := proxytest.Setup(t, creds, trusted)
		forbidden = map[string]string{}
		for k, v := range f {
			forbidden[k] = v
		}
		for _, c := range creds {
			forbidden["secret value of "+c.Name] = c.Value
		}
		return src, f
	}
	var seen atomic.Int64
	search := func(t *testing.T) {
		if forbidden == nil {
			t.Fatal("the secrets suite set up no credentials")
		}
		found, err := cluster.Search(context.Background(), forbidden)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found.Found {
			t.Error(f)
		}
		n := 0
		if pods, err := cluster.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{}); err == nil {
			n = len(pods.Items)
		}
		seen.Store(int64(n))
		t.Logf("searched the cluster's objects (%d sandbox pods) and %d files of its state for %d secrets", n, found.Files, len(forbidden))
	}
	wrap := func(tb testing.TB) sandbox.Provider {
		return &searchingProvider{Provider: newProvider(tb), search: func() { search(tb.(*testing.T)) }}
	}
	// Registered first, run last: after the suite's pools closed their sandboxes, which searched.
	t.Cleanup(func() {
		if seen.Load() == 0 {
			t.Error("the cluster was not searched while a sandbox pod ran: the search proves nothing")
		}
	})
	sandboxtest.RunSecrets(t, wrap, setup)
}

// searchingProvider searches the cluster for the secrets before it closes each sandbox, while its pod runs.
type searchingProvider struct {
	sandbox.Provider
	search func()
}

func (p *searchingProvider) Provision(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) (sandbox.Sandbox, error) {
	sb, err := p.Provider.Provision(ctx, r, host)
	if err != nil {
		return nil, err
	}
	return &searchingSandbox{Sandbox: sb, search: p.search}, nil
}

type searchingSandbox struct {
	sandbox.Sandbox
	search func()
	once   sync.Once
}

func (s *searchingSandbox) Close() error {
	s.once.Do(s.search)
	return s.Sandbox.Close()
}

// TestPodSpec checks what a sandbox's pod is: restricted, with no token, no service links, no resolver, its
// limits, its labels, and a network policy that allows one port of the egress address and nothing else.
func TestPodSpec(t *testing.T) {
	cfg := config(t)
	p := newProviderWith(t, cfg)
	r := &sandbox.Recipe{SessionID: "sesn_podspec", Limits: sandbox.Limits{MemoryBytes: 512 << 20, CPUQuota: 0.5},
		Environment: apitype.EnvConfig{Packages: &apitype.Packages{Pip: []string{"requests"}, Apt: []string{"jq"}}}}
	sb, err := p.Provision(context.Background(), r, sandbox.HostDirs{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := context.Background()
	pods, err := cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=" + cfg.Owner})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the owner: %v, %v; want one", pods, err)
	}
	pod := pods.Items[0]
	if pod.Labels[kubernetes.LabelSession] != "sesn_podspec" || pod.Annotations[kubernetes.AnnotationExpires] == "" {
		t.Errorf("labels %v, annotations %v", pod.Labels, pod.Annotations)
	}
	spec := pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Error("the pod mounts a service account token or gets service links")
	}
	if spec.DNSPolicy != corev1.DNSNone || spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("dns %s, host network %v pid %v ipc %v", spec.DNSPolicy, spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 ||
			sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s is not restricted: %+v", c.Name, sc)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				t.Errorf("container %s takes %s from another object", c.Name, e.Name)
			}
		}
	}
	lim := spec.Containers[0].Resources.Limits
	if lim.Memory().Value() != 512<<20 || lim.Cpu().MilliValue() != 500 || lim.StorageEphemeral().Value() == 0 {
		t.Errorf("limits %v", lim)
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil || v.HostPath != nil || v.Projected != nil {
			t.Errorf("volume %s mounts a secret, a host path or a projection", v.Name)
		}
		if v.Name == "workspace" && (v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil) {
			t.Errorf("the workspace has no size limit: %+v", v)
		}
	}
	nps, err := cluster.Client.NetworkingV1().NetworkPolicies(namespace).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelSandbox + "=" + pod.Name})
	if err != nil || len(nps.Items) != 1 {
		t.Fatalf("policies: %v, %v", nps, err)
	}
	eg := nps.Items[0].Spec.Egress
	if len(eg) != 1 || len(eg[0].To) != 1 || eg[0].To[0].IPBlock == nil || eg[0].To[0].IPBlock.CIDR != cluster.NodeIP+"/32" || len(eg[0].Ports) != 1 ||
		len(nps.Items[0].Spec.Ingress) != 0 {
		t.Errorf("policy: %+v", nps.Items[0].Spec)
	}
	// From inside: no name resolves, and nothing but the proxy's port answers (the API server's port, on the
	// same address, does not).
	res, err := sb.Execute(ctx, "", "bash", json.RawMessage(fmt.Sprintf(
		`{"command":"getent hosts kubernetes.default || echo no-dns; timeout 3 bash -c 'exec 3<>/dev/tcp/%s/16443' 2>/dev/null && echo apiserver-reached || echo apiserver-refused; ls /var/run/secrets 2>&1 | head -1"}`, cluster.NodeIP)))
	if err != nil {
		t.Fatal(err)
	}
	out := res.Text()
	if !strings.Contains(out, "no-dns") || !strings.Contains(out, "apiserver-refused") || !strings.Contains(out, "No such file") {
		t.Errorf("from inside the pod: %q", out)
	}
	// The environment's packages are not installed in a pod: its first result says so, once.
	if !strings.HasPrefix(out, "Note: the environment's packages were not installed (apt: jq; pip: requests)") {
		t.Errorf("the first result does not say the packages were not installed: %q", out)
	}
	if res, err = sb.Execute(ctx, "", "bash", json.RawMessage(`{"command":"echo again"}`)); err != nil || res.Text() != "again" {
		t.Errorf("the second result: %v %q", err, res.Text())
	}
}

// TestPodDeleted: a pod deleted under a session is a dead sandbox, and the pool's next call gets a fresh one.
func TestPodDeleted(t *testing.T) {
	cfg := config(t)
	p := newProviderWith(t, cfg)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: p, WorkspaceRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Stop() })
	call := &sandbox.Call{Recipe: sandbox.Recipe{SessionID: "sesn_deleted"}, Name: "bash", Input: json.RawMessage(`{"command":"hostname"}`)}
	ctx := context.Background()
	first, err := pool.Execute(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := cluster.Client.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=" + cfg.Owner}); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Execute(ctx, &sandbox.Call{Recipe: call.Recipe, Name: "bash", Input: json.RawMessage(`{"command":"sleep 30"}`)})
	if !errors.Is(err, sandbox.ErrSandboxDead) {
		t.Fatalf("a call on a deleted pod: %v; want ErrSandboxDead", err)
	}
	second, err := pool.Execute(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	if first.Text() == second.Text() {
		t.Errorf("the same pod answered after its deletion: %q", first.Text())
	}
}

// TestReap: the pods of a server that died (it never closed them) are deleted by its next start, and by any
// other server once their expiry passes.
func TestReap(t *testing.T) {
	ctx := context.Background()
	cfg := config(t)
	dead, err := kubernetes.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := dead.Provision(ctx, &sandbox.Recipe{SessionID: "sesn_reap"}, sandbox.HostDirs{}); err != nil {
			t.Fatal(err)
		}
	}
	kubernetes.Abandon(dead) // as a SIGKILL leaves it: its pods stay
	count := func(owner string) int {
		pods, err := cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=" + owner})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				n++
			}
		}
		return n
	}
	if n := count(cfg.Owner); n != 2 {
		t.Fatalf("%d pods before the restart; want 2", n)
	}
	newProviderWith(t, cfg) // the same owner starts again
	if n := count(cfg.Owner); n != 0 {
		t.Errorf("%d pods of the dead run after the restart; want 0", n)
	}

	// Another server reaps the pods of one that never comes back, once their expiry passes.
	gone := config(t)
	gone.TTL = 3 * time.Second
	dead, err = kubernetes.New(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Provision(ctx, &sandbox.Recipe{SessionID: "sesn_reap"}, sandbox.HostDirs{}); err != nil {
		t.Fatal(err)
	}
	kubernetes.Abandon(dead)
	other := config(t)
	other.TTL = 3 * time.Second
	newProviderWith(t, other)
	deadline := time.Now().Add(30 * time.Second)
	for count(gone.Owner) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the expired pod of a dead server is still there after 30 s")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// crashChildEnv names, in the environment of TestCrash's child (the server it kills), the file it reports to;
// crashKubeconfigEnv, crashNodeEnv and crashOwnerEnv are the cluster and the owner name it runs with.
const (
	crashChildEnv      = "CORRAL_K8S_CRASH_CHILD"
	crashKubeconfigEnv = "CORRAL_K8S_CRASH_KUBECONFIG"
	crashNodeEnv       = "CORRAL_K8S_CRASH_NODE"
	crashOwnerEnv      = "CORRAL_K8S_CRASH_OWNER"
)

// TestCrash: a server (a child process) provisions two pods, with processes left running in the background of
// each, and is SIGKILLed. Its pods end without any help (the attach stream dropped, the agent's stdin closed,
// the container ended with every process in it), and the next start under the same owner name deletes them.
func TestCrash(t *testing.T) {
	if report := os.Getenv(crashChildEnv); report != "" {
		crashChild(t, report)
		return
	}
	images(t)
	owner := fmt.Sprintf("crash-%d", os.Getpid())
	report := filepath.Join(t.TempDir(), "report")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+report, crashKubeconfigEnv+"="+cluster.Kubeconfig,
		crashNodeEnv+"="+cluster.NodeIP, crashOwnerEnv+"="+owner)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(report); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the server exited before it was killed (%v):\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("no report from the server after 3 minutes:\n%s", out.String())
		}
	}
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=" + owner}
	pods, err := cluster.Client.CoreV1().Pods(namespace).List(ctx, sel)
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("the server's pods: %v (%v); want 2", pods, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited

	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		pods, err := cluster.Client.CoreV1().Pods(namespace).List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		var running []string
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				running = append(running, p.Name+" "+string(p.Status.Phase))
			}
		}
		if len(running) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods of the killed server still run 60 s after it died: %v", running)
		}
	}

	newProviderWith(t, configOn(cluster.Config, cluster.NodeIP, owner)) // the server starts again
	pods, err = cluster.Client.CoreV1().Pods(namespace).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s of the killed server is still there after the restart", p.Name)
		}
	}
	if n, err := policiesAndConfigMaps(ctx, sel); err != nil || n != 0 {
		t.Errorf("config maps or policies of the killed server after the restart: %d (%v)", n, err)
	}
}

// crashChild is TestCrash's server: it provisions two sandboxes, leaves processes running in each, reports and
// waits to be killed.
func crashChild(t *testing.T, report string) {
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv(crashKubeconfigEnv))
	if err != nil {
		t.Fatal(err)
	}
	p, err := kubernetes.New(context.Background(), configOn(rc, os.Getenv(crashNodeEnv), os.Getenv(crashOwnerEnv)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		sb, err := p.Provision(context.Background(), &sandbox.Recipe{SessionID: fmt.Sprintf("sesn_crash%d", i)}, sandbox.HostDirs{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Execute(context.Background(), "", "bash", json.RawMessage(`{"command":"(sleep 1000 &); setsid sleep 1000 >/dev/null 2>&1 &"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(report, []byte("ready"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {} // until killed
}

// TestProvisionFails: a pod that cannot start (its image is not on the node, and may not be pulled) fails
// Provision as soon as the kubelet says so, with its reason (not at the start timeout), and leaves nothing of the sandbox on the cluster.
func TestProvisionFails(t *testing.T) {
	cfg := config(t)
	cfg.Image = "localhost/corral/no-such-image:1"
	p := newProviderWith(t, cfg)
	start := time.Now()
	_, err := p.Provision(context.Background(), &sandbox.Recipe{SessionID: "sesn_noimage"}, sandbox.HostDirs{})
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("Provision on a missing image: %v; want the kubelet's ErrImageNeverPull", err)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=" + cfg.Owner}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		pods, err := cluster.Client.CoreV1().Pods(namespace).List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				live++
			}
		}
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods of the failed sandbox are still there", live)
		}
	}
	if n, err := policiesAndConfigMaps(ctx, sel); err != nil || n != 0 {
		t.Errorf("config maps or policies of the failed sandbox: %d (%v)", n, err)
	}
}

// policiesAndConfigMaps counts the network policies and config maps sel picks.
func policiesAndConfigMaps(ctx context.Context, sel metav1.ListOptions) (int, error) {
	cms, err := cluster.Client.CoreV1().ConfigMaps(namespace).List(ctx, sel)
	if err != nil {
		return 0, err
	}
	nps, err := cluster.Client.NetworkingV1().NetworkPolicies(namespace).List(ctx, sel)
	if err != nil {
		return 0, err
	}
	return len(cms.Items) + len(nps.Items), nil
}
