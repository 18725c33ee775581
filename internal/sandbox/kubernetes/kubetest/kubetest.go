// Package kubetest runs a real one-node Kubernetes cluster on the test machine for the kubernetes sandbox
// backend's tests, and takes it down leaving the machine as it found it. It follows the recipe of
// deploy/testcluster (README.md): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd with
// runc and the CNI bridge, the kubelet, and kube-router enforcing NetworkPolicy; images are imported, never
// pulled. It needs root and the binaries deploy/testcluster/build.sh makes; without them Start says why, and
// Require skips (or, in CI, fails) the tests.
//
// One cluster runs on a machine at a time: Start holds an flock from Start to Stop, so test binaries of several
// packages take turns. If a test process dies without Stop (a panic, a timeout, a signal), a guard process it
// started undoes the cluster; failing that, the next Start does.
//
// A package's tests share one cluster:
//
//	var cluster *kubetest.Cluster
//
//	func TestMain(m *testing.M) { kubetest.Main(m, &cluster) }
//
//	func TestPod(t *testing.T) {
//		kubetest.Require(t, kubetest.StartErr())
//		// cluster.Client, cluster.ImportImage, ...
//	}
package kubetest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// BinEnv names the directory of the cluster's binaries (deploy/testcluster/build.sh).
	BinEnv = "CORRAL_K8S_BIN"
	// RequireEnv set to "1" makes a missing cluster a test failure instead of a skip (CI sets it).
	RequireEnv = "CORRAL_REQUIRE_K8S"

	// StateDir holds everything of the running cluster: configuration, certificates, data, logs (StateDir/logs)
	// and the baseline the undo needs. It is fixed so that a run can find what a killed earlier one left.
	StateDir = "/tmp/corral-kubetest"
	// lockPath is the flock that lets one cluster run at a time on the machine.
	lockPath = "/run/corral-kubetest.lock"
	// nodeName is the node's name. It is made up, so nothing resolves it: the API server reaches the kubelet
	// at its InternalIP.
	nodeName = "corral-kubetest"
	runcPath = "/usr/sbin/runc"

	// readyTimeout bounds each wait of Start (API server, containerd, node, kube-router); the machine may be
	// busy with other builds.
	readyTimeout = 3 * time.Minute
)

// binaries are the files Start needs under the BinEnv directory.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
	"containerd", "containerd-shim-runc-v2", "ctr", "kube-router",
	"cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap"}

// tools are the host's commands the components and the undo run.
var tools = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save",
	"ip6tables-restore", "ipset", "ip", "mount", "go"}

// Cluster is a running one-node cluster.
type Cluster struct {
	Kubeconfig string               // the admin kubeconfig (system:masters) file
	Config     *rest.Config         // the same, for client-go
	Client     kubernetes.Interface // a clientset of Config
	NodeIP     string               // the node's address; pods reach the host at it
	NodeName   string
	Dir        string // the state directory; the components' logs are in Dir/logs

	bin    string
	layout layout
	logf   func(string, ...any)
	lock   *os.File
	guard  *exec.Cmd
	guardW *os.File // closing it without writing tells the guard to undo the cluster
	procs  []*proc
	base   *baseline

	stopStorage context.CancelFunc // ends StorageClass's provisioner

	mu      sync.Mutex
	stopped bool
	stopErr error
}

// Start starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, the kubelet and
// kube-router (NetworkPolicy only), waits until the node is Ready, kube-router is healthy and the "default"
// service account exists in namespace default, and starts StorageClass's provisioner. It returns an error saying why when the cluster cannot run here
// (BinEnv unset or binaries missing, not root, a tool missing, a port taken) or did not come up; a failed Start has
// undone what it did. logf (nil for none) receives progress.
func Start(ctx context.Context, logf func(format string, args ...any)) (*Cluster, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	bin, err := checkHost()
	if err != nil {
		return nil, err
	}
	nodeIP, err := nodeAddress()
	if err != nil {
		return nil, err
	}
	lock, err := lockMachine(ctx, logf)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Kubeconfig: filepath.Join(StateDir, "admin.kubeconfig"),
		NodeIP:     nodeIP.String(),
		NodeName:   nodeName,
		Dir:        StateDir,
		bin:        bin,
		layout:     layout{StateDir},
		logf:       logf,
		lock:       lock,
	}
	began := time.Now()
	if err := c.start(ctx, nodeIP); err != nil {
		err = fmt.Errorf("kubetest: %w", err)
		if serr := c.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, err
	}
	logf("kubetest: cluster ready in %s (node %s at %s)", time.Since(began).Round(100*time.Millisecond), c.NodeName, c.NodeIP)
	return c, nil
}

// checkHost returns the binaries' directory, or why the cluster cannot run on this machine.
func checkHost() (string, error) {
	bin := os.Getenv(BinEnv)
	if bin == "" {
		return "", fmt.Errorf("kubetest: %s is unset (deploy/testcluster/build.sh builds the binaries it names)", BinEnv)
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return "", fmt.Errorf("kubetest: %s=%s lacks %s (deploy/testcluster/build.sh builds it): %w", BinEnv, bin, b, err)
		}
	}
	if os.Geteuid() != 0 {
		return "", errors.New("kubetest: a cluster needs root")
	}
	if _, err := os.Stat(runcPath); err != nil {
		return "", fmt.Errorf("kubetest: no runc (apt-get install runc): %w", err)
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return "", fmt.Errorf("kubetest: %s is missing (apt-get install iptables ipset iproute2 conntrack): %w", t, err)
		}
	}
	return bin, nil
}

// nodeAddress returns the machine's first non-loopback IPv4 address of an interface that is up: the API server
// refuses a loopback advertise address, and pods reach the host at it.
func nodeAddress() (net.IP, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || ifc.Name == bridgeName {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ipn.IP.To4(), nil
			}
		}
	}
	return nil, errors.New("kubetest: no up interface with an IPv4 address besides loopback")
}

// lockMachine takes the machine-wide flock, waiting for another test process's cluster to stop first.
func lockMachine(ctx context.Context, logf func(string, ...any)) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	for waited := false; ; waited = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("kubetest: flock %s: %w", lockPath, err)
		}
		if !waited {
			logf("kubetest: waiting for another test process's cluster (flock %s)", lockPath)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("kubetest: waiting for flock %s: %w", lockPath, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func (c *Cluster) start(ctx context.Context, nodeIP net.IP) error {
	l := c.layout
	if _, err := os.Stat(l.dir); err == nil {
		c.logf("kubetest: undoing the cluster an earlier run left in %s", l.dir)
		if err := undo(l.dir, c.logf); err != nil {
			return err
		}
	}
	for _, port := range ports {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			return fmt.Errorf("port %d is taken: %w", port, err)
		}
		ln.Close()
	}
	for _, d := range []string{"logs", "pids", "pki"} {
		if err := os.MkdirAll(l.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := c.startGuard(); err != nil {
		return err
	}
	base, err := takeBaseline(c.bin)
	if err != nil {
		return err
	}
	c.base = base
	if err := base.write(l.path("baseline.json")); err != nil {
		return err
	}
	// The undo tells the cluster's cgroups and bridge from the machine's by their names: those must be new.
	if len(base.Cgroups) > 0 {
		return fmt.Errorf("cgroups %s exist: another kubelet or containerd runs here, or a cluster's undo failed",
			strings.Join(base.Cgroups, ", "))
	}
	if slices.Contains(base.Links, bridgeName) {
		return fmt.Errorf("link %s exists: another cluster's bridge (ip link delete %s)", bridgeName, bridgeName)
	}
	p, err := newPKI(nodeIP, nodeName)
	if err != nil {
		return err
	}
	if err := p.write(l.path("pki")); err != nil {
		return err
	}
	if err := writeConfigs(l, c.bin, p); err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host: fmt.Sprintf("https://127.0.0.1:%d", apiserverPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAData: p.caCert, CertData: p.admin, KeyData: p.adminKey,
		},
		QPS: 50, Burst: 100,
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}

	// The pause image builds while the control plane starts.
	type result struct {
		img v1.Image
		err error
	}
	pause := make(chan result, 1)
	buildCtx, cancelBuild := context.WithCancel(ctx)
	var building sync.WaitGroup
	building.Go(func() {
		img, err := GoImage(buildCtx, pauseSource)
		pause <- result{img, err}
	})
	defer building.Wait()
	defer cancelBuild()

	env := append(slices.Clone(os.Environ()), "PATH="+c.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	comps := components(l, c.bin, c.NodeIP, c.NodeName)
	startComp := func(name string) error {
		for _, comp := range comps {
			if comp.name == name {
				p, err := startProc(l, comp, env)
				if p != nil {
					c.procs = append(c.procs, p)
				}
				return err
			}
		}
		return fmt.Errorf("no component %s", name)
	}
	began := time.Now()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := startComp(name); err != nil {
			return err
		}
	}
	if err := c.waitFor(ctx, "API server ready", "kube-apiserver", c.apiserverReady); err != nil {
		return err
	}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "containerd"} {
		if err := startComp(name); err != nil {
			return err
		}
	}
	if err := c.waitFor(ctx, "containerd serving", "containerd", c.containerdReady); err != nil {
		return err
	}
	built := <-pause
	if built.err != nil {
		return fmt.Errorf("build the pause image: %w", built.err)
	}
	if err := c.ImportImage(ctx, built.img, PauseImage); err != nil {
		return err
	}
	if err := startComp("kubelet"); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "node Ready", "kubelet", c.nodeReady); err != nil {
		return err
	}
	c.logf("kubetest: node Ready %s after the first component started", time.Since(began).Round(100*time.Millisecond))
	// kube-router reads its node at start and exits if the kubelet has not registered it yet.
	if err := startComp("kube-router"); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "kube-router healthy", "kube-router", kubeRouterHealthy); err != nil {
		return err
	}
	if err := c.waitFor(ctx, `service account "default"`, "kube-controller-manager", func(ctx context.Context) error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	storageCtx, cancel := context.WithCancel(context.Background())
	c.stopStorage = cancel
	return c.startStorage(storageCtx)
}

// waitFor polls check until it returns nil, for at most readyTimeout. It gives up early when a component exits,
// and its error ends with the log of the component that exited, or else of blame.
func (c *Cluster) waitFor(ctx context.Context, what, blame string, check func(context.Context) error) error {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	lastLog := began
	for {
		for _, p := range c.procs {
			if p.exited() {
				return fmt.Errorf("%s exited (%v) while waiting for %s; its log ends:\n%s", p.name, p.err, what, logTail(p.log, 40))
			}
		}
		checkCtx, cancelCheck := context.WithTimeout(ctx, 10*time.Second)
		err := check(checkCtx)
		cancelCheck()
		if err == nil {
			c.logf("kubetest: %s after %s", what, time.Since(began).Round(100*time.Millisecond))
			return nil
		}
		if time.Since(lastLog) >= 15*time.Second {
			c.logf("kubetest: still waiting for %s (%s): %v", what, time.Since(began).Round(time.Second), err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s within %s: %v; the %s log ends:\n%s", what, time.Since(began).Round(time.Second), err,
				blame, logTail(c.layout.path("logs", blame+".log"), 40))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Cluster) apiserverReady(ctx context.Context) error {
	body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s", err, body)
	}
	return nil
}

func (c *Cluster) containerdReady(ctx context.Context) error {
	ctr := exec.CommandContext(ctx, filepath.Join(c.bin, "ctr"), "--address", c.layout.containerdSock(), "version")
	out, err := ctr.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr version: %w: %s", err, out)
	}
	return nil
}

func (c *Cluster) nodeReady(ctx context.Context) error {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s: %s: %s", cond.Status, cond.Reason, cond.Message)
		}
	}
	return errors.New("node has no Ready condition yet")
}

// kubeRouterHealthy asks kube-router's health endpoint, which answers 200 once its network policy controller has
// synced: before, a NetworkPolicy would not be enforced yet.
func kubeRouterHealthy(ctx context.Context) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeRouterHealthPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-router /healthz: %s: %s", resp.Status, body)
	}
	return nil
}

// guardEnv carries the state directory to the guard process.
const guardEnv = "CORRAL_KUBETEST_GUARD"

// init turns the process into the guard when Start re-executes the test binary as one: the guard waits for its
// parent to end. If the parent went through Stop, it has written a byte and the guard exits; if it died (a
// panic, a go test timeout, a signal), the guard undoes the cluster. It inherits the flock, so the next cluster
// waits until the undo is over.
func init() {
	if dir := os.Getenv(guardEnv); dir != "" {
		os.Exit(runGuard(dir))
	}
}

func runGuard(dir string) int {
	// The guard outlives its parent and its terminal: only the undo should end it.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	var b [1]byte
	if n, _ := os.Stdin.Read(b[:]); n == 1 {
		return 0
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	logf("kubetest guard: the test process ended without stopping the cluster: undoing it")
	if err := undo(dir, logf); err != nil {
		logf("kubetest guard: %v", err)
		return 1
	}
	logf("kubetest guard: undone")
	return 0
}

// startGuard starts the guard: the test binary again, which init turns into the guard.
func (c *Cluster) startGuard() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), guardEnv+"="+c.Dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, os.Stderr, os.Stderr
	cmd.ExtraFiles = []*os.File{c.lock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start the guard: %w", err)
	}
	c.guard, c.guardW = cmd, w
	return nil
}

// Stop stops every process and undoes what the cluster changed on the machine (deploy/testcluster/README.md,
// "Side effects a test must undo"): the processes, including the pods' and the containerd shims; every mount under
// the state directory and the pods' network namespaces; the kubepods and k8s.io cgroups under every hierarchy; the
// KUBE-* iptables chains and the rules jumping to them (v4 and v6) and kube-router's ipsets that were not there
// before Start; the kube-bridge link; the sysctls the kubelet and the bridge plugin changed; the paths made outside
// the state directory; then the state directory. It is idempotent: later calls return the first call's result.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	began := time.Now()
	if c.stopStorage != nil {
		c.stopStorage()
	}
	// The kubelet and kube-router first, so that nothing restarts or reprograms what the rest takes down; then the
	// runtime and the control plane, all at once. The state is thrown away, so a graceful shutdown is not worth
	// more than a moment: the API server alone would take longer than the whole undo.
	stopNames := func(keep func(string) bool) {
		var batch []*proc
		for _, p := range c.procs {
			if keep(p.name) {
				p.signal(syscall.SIGTERM)
				batch = append(batch, p)
			}
		}
		for _, p := range batch {
			if !p.wait(2 * time.Second) {
				c.logf("kubetest: killed %s after 2s", p.name)
			}
		}
	}
	first := func(name string) bool { return name == "kubelet" || name == "kube-router" }
	stopNames(first)
	stopNames(func(name string) bool { return !first(name) })
	c.logf("kubetest: components stopped in %s", time.Since(began).Round(100*time.Millisecond))
	c.stopErr = undo(c.Dir, c.logf)
	if c.stopErr != nil {
		c.stopErr = fmt.Errorf("kubetest: %w", c.stopErr)
	}
	if c.guard != nil {
		// The byte tells the guard that the undo is done; it exits and lets go of the flock.
		if _, err := c.guardW.Write([]byte{1}); err != nil {
			c.stopErr = errors.Join(c.stopErr, fmt.Errorf("kubetest: release the guard: %w", err))
		}
		c.guardW.Close()
		_ = c.guard.Wait() // Its exit status says whether it undid anything; Stop already did.
	}
	c.lock.Close()
	c.logf("kubetest: stopped and undone in %s", time.Since(began).Round(100*time.Millisecond))
	return c.stopErr
}

// Require skips tb with the reason when err (why there is no cluster) is non-nil, or fails it when RequireEnv is
// "1".
func Require(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("%v (%s=1 requires the cluster)", err, RequireEnv)
	}
	tb.Skipf("no Kubernetes cluster: %v", err)
}

var (
	mainMu  sync.Mutex
	errMain = errors.New("kubetest: Main did not run")
)

// StartErr reports why Main has no cluster for the tests, for Require: nil once Main started one.
func StartErr() error {
	mainMu.Lock()
	defer mainMu.Unlock()
	return errMain
}

// Main is a TestMain helper: it starts the cluster once for the package and stores it in *c (or records why it
// cannot run, which StartErr returns for Require to report per test), runs the tests, stops the cluster and exits.
// With -short it does not start one. A panic or a timeout ends the test process without reaching Stop: the guard
// undoes the cluster then.
func Main(m *testing.M, c **Cluster) {
	flag.Parse()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	var cluster *Cluster
	err := errors.New("kubetest: not started in -short mode")
	if list := flag.Lookup("test.list"); list != nil && list.Value.String() != "" {
		err = errors.New("kubetest: not started for -test.list")
	} else if !testing.Short() {
		// Waiting for another package's cluster counts here, not against the tests' -timeout.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		cluster, err = Start(ctx, logf)
		cancel()
	}
	mainMu.Lock()
	errMain = err
	mainMu.Unlock()
	*c = cluster
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			logf("%v", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}
