package kubetest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var cluster *Cluster

func TestMain(m *testing.M) { Main(m, &cluster) }

// probeSource is the test pods' program. It reports how it was confined, then tries a TCP connection to each
// address every interval for a while, printing one line per attempt: "ADDR +MS ok" or "ADDR +MS fail: ERR",
// where MS counts from the program's start. The last line of each address is its final answer.
const probeSource = `package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

func main() {
	start := time.Now()
	duration, _ := time.ParseDuration(os.Args[1])
	interval, _ := time.ParseDuration(os.Args[2])
	addrs := os.Args[3:]
	fmt.Printf("uid %d\n", os.Getuid())
	if err := os.WriteFile("/probe", nil, 0o644); errors.Is(err, syscall.EROFS) {
		fmt.Println("rootfs read-only")
	}
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "CapEff:") || strings.HasPrefix(line, "NoNewPrivs:") || strings.HasPrefix(line, "Seccomp:") {
			fmt.Println(strings.Join(strings.Fields(line), " "))
		}
	}
	for {
		for _, a := range addrs {
			ms := time.Since(start).Milliseconds()
			conn, err := net.DialTimeout("tcp", a, 500*time.Millisecond)
			if err != nil {
				fmt.Printf("%s +%d fail: %v\n", a, ms, err)
				continue
			}
			conn.Close()
			fmt.Printf("%s +%d ok\n", a, ms)
		}
		if time.Since(start) >= duration {
			return
		}
		time.Sleep(interval)
	}
}
`

// TestPodsAndNetworkPolicy runs a restricted pod from an imported image and checks that a NetworkPolicy confines
// its egress to the host: the pod may reach one port on the node's IP and not another. Traffic to the host goes
// through the INPUT chain, not FORWARD, so this is the case a policy enforcer may miss. A pod the policy does not
// select reaches both ports, which shows that the check can fail.
func TestPodsAndNetworkPolicy(t *testing.T) {
	Require(t, StartErr())
	c := cluster
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	img, err := GoImage(ctx, probeSource)
	if err != nil {
		t.Fatal(err)
	}
	const ref = "localhost/corral/kubetest-probe:1"
	if err := c.ImportImage(ctx, img, ref); err != nil {
		t.Fatal(err)
	}
	addrA, addrB := listen(t, c.NodeIP), listen(t, c.NodeIP)
	_, portA, _ := net.SplitHostPort(addrA)
	pa, _ := strconv.Atoi(portA)
	_, portB, _ := net.SplitHostPort(addrB)
	if pb, _ := strconv.Atoi(portB); pb >= 30000 && pb <= 32767 {
		// kube-router lets every pod reach the node's addresses at the NodePort range, policy or not.
		t.Fatalf("port %d is in the NodePort range, which kube-router never blocks towards the node: "+
			"net.ipv4.ip_local_port_range overlaps it", pb)
	}

	ns := "kubetest-" + randomSuffix()
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, namespace, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt(pa)
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "node-port-a-only"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "restricted"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: c.NodeIP + "/32"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
	if _, err := c.Client.NetworkingV1().NetworkPolicies(ns).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The pods try for a while, so that the answer does not depend on how soon kube-router programs the policy
	// for a new pod; the log shows how soon that was.
	args := []string{"5s", "50ms", addrA, addrB}
	var wg sync.WaitGroup
	logs := map[string]string{}
	var mu sync.Mutex
	for _, role := range []string{"restricted", "open"} {
		wg.Go(func() {
			out, err := runPod(ctx, c, ns, "probe-"+role, role, ref, args)
			if err != nil {
				t.Errorf("pod %s: %v\n%s", role, err, out)
			}
			mu.Lock()
			logs[role] = out
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	for role, out := range logs {
		for _, want := range []string{"uid 65532", "rootfs read-only", "CapEff: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2"} {
			if !strings.Contains(out, want) {
				t.Errorf("pod %s: the log lacks %q:\n%s", role, want, out)
			}
		}
	}
	open, restricted := attempts(logs["open"]), attempts(logs["restricted"])
	t.Logf("restricted pod: %s: %s; %s: %s", addrA, summary(restricted[addrA]), addrB, summary(restricted[addrB]))
	t.Logf("open pod: %s: %s; %s: %s", addrA, summary(open[addrA]), addrB, summary(open[addrB]))
	if !final(open[addrA]) || !final(open[addrB]) {
		t.Errorf("the pod no policy selects does not reach both ports on the node, so the check below proves "+
			"nothing:\n%s", logs["open"])
	}
	if !final(restricted[addrA]) {
		t.Errorf("the restricted pod does not reach the port its policy allows (%s):\n%s", addrA, logs["restricted"])
	}
	if final(restricted[addrB]) {
		t.Errorf("the restricted pod reaches %s, which its policy does not allow:\n%s", addrB, logs["restricted"])
	}
	if r := restricted[addrB]; len(r) > 0 && r[0].ok {
		// The policy exists before the pod; if kube-router programs it only after the pod has started, a
		// sandbox is unconfined for a moment. Worth knowing, though not this harness's to fix.
		t.Logf("NOTE: the restricted pod reached %s before kube-router confined it", addrB)
	}
}

// listen accepts and closes TCP connections on host at a free port, for the test's lifetime.
func listen(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	return ln.Addr().String()
}

// runPod runs the probe image as a pod confined as a sandbox pod is, waits for it to end and returns its log.
func runPod(ctx context.Context, c *Cluster, ns, name, role, image string, args []string) (string, error) {
	no, yes := false, true
	uid := int64(65532)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": role}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &uid,
				RunAsGroup:     &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					ReadOnlyRootFilesystem:   &yes,
					RunAsNonRoot:             &yes,
				},
			}},
		},
	}
	pods := c.Client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	var status *corev1.ContainerStateTerminated
	for status == nil {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		for _, cs := range p.Status.ContainerStatuses {
			status = cs.State.Terminated
		}
		if status == nil {
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("pod not done: %v; phase %s, conditions %+v, container statuses %+v",
					ctx.Err(), p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	out, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return string(out), fmt.Errorf("logs: %w", err)
	}
	if status.ExitCode != 0 {
		return string(out), fmt.Errorf("exit code %d (%s: %s)", status.ExitCode, status.Reason, status.Message)
	}
	return string(out), nil
}

type attempt struct {
	ms  int
	ok  bool
	err string
}

// attempts parses the probe's log into each address's attempts, in order.
func attempts(log string) map[string][]attempt {
	m := map[string][]attempt{}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		addr, rest, ok := strings.Cut(sc.Text(), " +")
		if !ok {
			continue
		}
		msText, result, _ := strings.Cut(rest, " ")
		ms, err := strconv.Atoi(msText)
		if err != nil {
			continue
		}
		m[addr] = append(m[addr], attempt{ms: ms, ok: result == "ok", err: strings.TrimPrefix(result, "fail: ")})
	}
	return m
}

func final(as []attempt) bool { return len(as) > 0 && as[len(as)-1].ok }

func summary(as []attempt) string {
	if len(as) == 0 {
		return "no attempts"
	}
	var oks, fails int
	firstFail, lastOK := -1, -1
	for _, a := range as {
		if a.ok {
			oks++
			lastOK = a.ms
		} else {
			fails++
			if firstFail < 0 {
				firstFail = a.ms
			}
		}
	}
	s := fmt.Sprintf("%d ok, %d failed", oks, fails)
	if fails > 0 {
		first := as[slices.IndexFunc(as, func(a attempt) bool { return !a.ok })]
		s += fmt.Sprintf(" (first failure at +%dms: %s)", firstFail, first.err)
	}
	if oks > 0 {
		s += fmt.Sprintf(", last success at +%dms", lastOK)
	}
	return s
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestStop stops the cluster (Main's Stop is then a no-op) and checks that the machine is as Start found it,
// comparing with the baseline Start took while it held the flock. It must stay the last test of the file.
func TestStop(t *testing.T) {
	Require(t, StartErr())
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Stop(); err != nil {
		t.Fatalf("the second Stop: %v", err)
	}
	base := cluster.base
	// All the kernel settings, not only those the undo restores: a change the list misses shows here.
	now := kernelSettings()
	for name, was := range base.Kernel {
		if now[name] != was {
			t.Errorf("sysctl %s = %s after Stop, %s before Start", name, now[name], was)
		}
	}
	if l := links(); !slices.Equal(base.Links, l) {
		t.Errorf("links: %v before Start, %v after Stop", base.Links, l)
	}
	for cmd, was := range base.IPTables {
		out, err := exec.Command(cmd + "-save").Output()
		if err != nil {
			t.Fatal(err)
		}
		if now := stripSaveNoise(string(out)); now != stripSaveNoise(was) {
			t.Errorf("%s-save before Start:\n%s\nafter Stop:\n%s", cmd, stripSaveNoise(was), now)
		}
	}
	if sets, err := ipsets(); err != nil || !slices.Equal(base.IPSets, sets) {
		t.Errorf("ipsets: %v before Start, %v after Stop (%v)", base.IPSets, sets, err)
	}
	for p, existed := range base.Paths {
		if _, err := os.Lstat(p); (err == nil) != existed {
			t.Errorf("%s: existed before Start: %t, after Stop: %v", p, existed, err)
		}
	}
	if m := mountsUnder(func(p string) bool {
		return within(p, StateDir) || filepath.Dir(p) == "/run/netns" && podNetns(base, filepath.Base(p))
	}); len(m) > 0 {
		t.Errorf("still mounted: %v", m)
	}
	if cg := podCgroups(); !slices.Equal(cg, base.Cgroups) {
		t.Errorf("pod cgroups: %v before Start, %v after Stop", base.Cgroups, cg)
	}
	if _, err := os.Stat(StateDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there: %v", StateDir, err)
	}
	for _, p := range listProcs() {
		if strings.Contains(p.cmdline, StateDir) {
			t.Errorf("process %d still runs: %s", p.pid, p.cmdline)
		}
	}
}

// stripSaveNoise drops iptables-save's comment lines, which carry the time, and its packet counters.
func stripSaveNoise(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, ":") {
			if i := strings.LastIndex(line, " ["); i >= 0 {
				line = line[:i] + "\n"
			}
		}
		b.WriteString(line)
	}
	return b.String()
}
