// Package kubernetes is the sandbox backend whose sandboxes are pods on a Kubernetes cluster (--sandbox
// kubernetes). Each sandbox is one pod, made directly with client-go: an init container copies the in-sandbox
// agent out of Corral's own image (which has no shell) into a volume, and the sandbox container runs it from
// there on the environment's image, as the pod's main process, with its stdin attached. The agent's JSON-lines
// protocol runs over that one long-lived attach stream; the stream ending is a dead sandbox (the container has
// stdinOnce, so the agent's stdin closes with it and the pod ends).
//
// Credentials never enter a pod: its spec holds only the environment's placeholders and the egress CA's
// certificate. Its traffic leaves only to its own egress proxy, which this process runs on a TCP port of its
// own per sandbox (accepting only the pod's address) with the rules, substitutions and TLS interception of the
// local backends' proxies: a NetworkPolicy Corral creates with the pod allows that one port and nothing else,
// not even DNS (the proxy resolves names), and Provision proves the policy is enforced before it returns.
//
// Pods are labelled with their session and their owner (this server); the owner's next start deletes what a
// killed one left, and every pod carries an expiry its owner extends while the sandbox lives, after which any
// Corral server sharing the namespace deletes it.
package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/sandbox/host"
)

// Labels and annotations Corral puts on what it creates.
const (
	LabelManaged = "app.kubernetes.io/managed-by" // = "corral"
	LabelSandbox = "corral.dev/sandbox"           // the sandbox's name (its pod's)
	LabelSession = "corral.dev/session"
	LabelOwner   = "corral.dev/owner" // Config.Owner
	// AnnotationExpires is when any Corral server may delete the pod (RFC 3339): its owner moves it forward
	// while the sandbox lives.
	AnnotationExpires = "corral.dev/expires"
)

// Defaults for Config fields left zero.
const (
	DefaultAgentPath       = "/usr/local/bin/corral-sandbox-agent"
	DefaultUID             = 65532
	DefaultWorkspaceBytes  = 10 << 30
	DefaultTTL             = 3 * time.Minute
	DefaultStartTimeout    = 3 * time.Minute
	defaultCPURequestMilli = 100
	defaultMemoryRequest   = 256 << 20
	// agentDir is where the init container puts the agent in the sandbox container (an emptyDir).
	agentDir = "/.corral/bin"
	// caKey is the CA bundle's key in the sandbox's ConfigMap, mounted at host.CABundlePath and over the
	// system bundle.
	caKey = "ca.pem"
)

// Config configures a Provider.
type Config struct {
	// REST is how to reach the cluster's API server (rest.InClusterConfig, or a kubeconfig). Required.
	REST *rest.Config
	// Namespace holds the sandboxes' pods. Required.
	Namespace string
	// Image is the sandboxes' image (an operator's image with bash and the tools its agents use). Required.
	Image string
	// AgentImage is Corral's own image: its AgentPath is the in-sandbox agent, which an init container copies
	// into each pod. Required.
	AgentImage string
	// AgentPath is the agent in AgentImage; default DefaultAgentPath.
	AgentPath string
	// ImagePullPolicy of both images; default IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// RuntimeClassName, if set, runs the pods under that RuntimeClass (gVisor where nodes have runsc).
	RuntimeClassName string
	// EgressIP is the address of this process that pods reach its egress proxies at (a node's or this pod's
	// IP): each sandbox's proxy listens on a port of its own there. Required.
	EgressIP netip.Addr
	// Owner names this server in its pods' LabelOwner: stable across its restarts (its next start deletes what
	// a killed one left). Required; at most 63 letters, digits, '-', '_' and '.'.
	Owner string
	// UID is the user (and group) the sandbox runs as; default DefaultUID.
	UID int64
	// WorkspaceBytes bounds the workspace volume (and the pod's ephemeral storage); default
	// DefaultWorkspaceBytes.
	WorkspaceBytes int64
	// TTL is how long a pod outlives its owner's last sign of life; default DefaultTTL.
	TTL time.Duration
	// CPURequestMilli is each sandbox's CPU request in thousandths of a core (what the scheduler reserves, not
	// a limit: the recipe's CPUQuota is); default 100.
	CPURequestMilli int64
	// StartTimeout bounds a pod's start (scheduling, image pull, the agent's first answer); default
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

func (c *Config) fill() error {
	switch {
	case c.REST == nil:
		return errors.New("kubernetes: no cluster configuration")
	case c.Namespace == "":
		return errors.New("kubernetes: a namespace is required")
	case c.Image == "":
		return errors.New("kubernetes: a sandbox image is required")
	case c.AgentImage == "":
		return errors.New("kubernetes: Corral's image (for the agent) is required")
	case !c.EgressIP.IsValid():
		return errors.New("kubernetes: the address pods reach this server's egress proxies at is required")
	case !validLabel(c.Owner):
		return fmt.Errorf("kubernetes: owner %q must be 1 to 63 letters, digits, '-', '_' or '.'", c.Owner)
	}
	if c.AgentPath == "" {
		c.AgentPath = DefaultAgentPath
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.UID == 0 {
		c.UID = DefaultUID
	}
	if c.WorkspaceBytes <= 0 {
		c.WorkspaceBytes = DefaultWorkspaceBytes
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.CPURequestMilli <= 0 {
		c.CPURequestMilli = defaultCPURequestMilli
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Provider provisions sandboxes as pods.
type Provider struct {
	cfg    Config
	cs     kubernetes.Interface
	canary net.Listener // a port no policy allows: a pod that reaches it is not yet confined

	mu     sync.Mutex
	live   map[string]*Sandbox
	closed bool

	stop chan struct{}
	done chan struct{}
}

var _ sandbox.Provider = (*Provider)(nil)

// New connects to the cluster, deletes what an earlier run of this owner left (a killed server's pods), makes
// sure the namespace denies every pod's traffic unless a policy allows it, and starts keeping its pods alive
// and reaping expired ones.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	// The attach streams are long-lived (every request carries its own context instead of a client timeout),
	// and a busy server provisions many pods at once: client-go's default 5 requests/s would queue them.
	cfg.REST = rest.CopyConfig(cfg.REST)
	cfg.REST.Timeout = 0
	if cfg.REST.QPS == 0 {
		cfg.REST.QPS, cfg.REST.Burst = 50, 100
	}
	cs, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	canary, err := net.Listen("tcp", netip.AddrPortFrom(cfg.EgressIP, 0).String())
	if err != nil {
		return nil, fmt.Errorf("kubernetes: listen on the egress address: %w", err)
	}
	p := &Provider{cfg: cfg, cs: cs, canary: canary, live: map[string]*Sandbox{}, stop: make(chan struct{}), done: make(chan struct{})}
	go acceptAndClose(canary)
	if err := p.denyByDefault(ctx); err != nil {
		canary.Close()
		return nil, err
	}
	if err := p.deleteWhere(ctx, LabelOwner+"="+cfg.Owner); err != nil {
		canary.Close()
		return nil, fmt.Errorf("kubernetes: delete what an earlier run left: %w", err)
	}
	go p.keep()
	return p, nil
}

// Name is the backend's name.
func (p *Provider) Name() string { return "kubernetes" }

// Tools are the agent's tools.
func (p *Provider) Tools() []sandbox.Tool { return host.Tools() }

// Capabilities: the sandboxes run elsewhere, on the images their pods name, and reach their proxies over TCP.
func (p *Provider) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{RootFS: sandbox.RootFSImageRef, Egress: sandbox.EgressTCP}
}

// Close closes every sandbox and stops the keeper. The pods of sandboxes the Pool still holds are deleted.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	live := make([]*Sandbox, 0, len(p.live))
	for _, sb := range p.live {
		live = append(live, sb)
	}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	var errs []error
	for _, sb := range live {
		errs = append(errs, sb.Close())
	}
	errs = append(errs, p.canary.Close())
	return errors.Join(errs...)
}

// denyByDefault makes the namespace's default-deny policy: a pod that no other policy selects reaches nothing
// and is reached by nothing.
func (p *Provider) denyByDefault(ctx context.Context) error {
	np := &netv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "corral-default-deny", Labels: map[string]string{LabelManaged: "corral"}},
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "corral"}},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
		},
	}
	_, err := p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Create(ctx, np, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubernetes: default-deny network policy: %w", err)
	}
	return nil
}

// deleteWhere deletes the sandbox pods, policies and config maps the label selector picks.
func (p *Provider) deleteWhere(ctx context.Context, selector string) error {
	sel := LabelManaged + "=corral," + LabelSandbox + "," + selector
	opts := metav1.ListOptions{LabelSelector: sel}
	now := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &now}
	ns := p.cfg.Namespace
	return errors.Join(
		p.cs.CoreV1().Pods(ns).DeleteCollection(ctx, del, opts),
		p.cs.NetworkingV1().NetworkPolicies(ns).DeleteCollection(ctx, del, opts),
		p.cs.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, del, opts))
}

// keep extends the expiry of this provider's live pods and deletes the expired pods of any owner, every third
// of the TTL.
func (p *Provider) keep() {
	defer close(p.done)
	t := time.NewTicker(p.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.TTL/3)
		p.mu.Lock()
		live := make([]*Sandbox, 0, len(p.live))
		for _, sb := range p.live {
			live = append(live, sb)
		}
		p.mu.Unlock()
		for _, sb := range live {
			if err := p.extend(ctx, sb.name); err != nil && !apierrors.IsNotFound(err) {
				p.cfg.Logger.Warn("kubernetes: extend a sandbox pod's expiry", "pod", sb.name, "err", err)
			}
		}
		if err := p.reapExpired(ctx); err != nil {
			p.cfg.Logger.Warn("kubernetes: reap expired sandbox pods", "err", err)
		}
		cancel()
	}
}

func (p *Provider) expiry() string { return time.Now().Add(p.cfg.TTL).UTC().Format(time.RFC3339) }

func (p *Provider) extend(ctx context.Context, pod string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationExpires: p.expiry()}}})
	_, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// reapExpired deletes the sandboxes (pod, policy and config map) of any owner whose pod's expiry has passed: a
// server that died and never came back under its owner name.
func (p *Provider) reapExpired(ctx context.Context) error {
	pods, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=corral," + LabelSandbox})
	if err != nil {
		return err
	}
	var errs []error
	for _, pod := range pods.Items {
		exp, err := time.Parse(time.RFC3339, pod.Annotations[AnnotationExpires])
		if err == nil && time.Now().Before(exp) {
			continue
		}
		p.cfg.Logger.Info("kubernetes: deleting an expired sandbox pod", "pod", pod.Name, "owner", pod.Labels[LabelOwner])
		errs = append(errs, p.deleteWhere(ctx, LabelSandbox+"="+pod.Labels[LabelSandbox]))
	}
	return errors.Join(errs...)
}

// Provision starts a pod for r and returns once its agent answers and its network policy is enforced.
func (p *Provider) Provision(ctx context.Context, r *sandbox.Recipe, _ sandbox.HostDirs) (_ sandbox.Sandbox, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	limits := host.WithDefaults(r.Limits)
	sb := &Sandbox{p: p, name: "corral-" + randomID(), limits: limits, stderr: host.NewTailWriter(4096)}
	defer func() {
		if err != nil {
			_ = sb.Close()
		}
	}()

	// The proxy first: the pod's command names its port.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(p.cfg.EgressIP, 0).String())
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	sb.ln = &podListener{Listener: ln}
	proxy, err := egress.Listen(egress.Config{Listener: sb.ln, Policy: egress.PolicyFor(r.Environment.Networking), Egress: r.Egress,
		Logger: p.cfg.Logger.With("sandbox", sb.name, "session", r.SessionID)})
	if err != nil {
		ln.Close()
		return nil, err
	}
	sb.proxy = proxy
	bundle, err := host.CABundle(nil, r.Egress)
	if err != nil {
		return nil, err
	}

	pod := p.pod(sb.name, r, limits, ln.Addr().(*net.TCPAddr).Port, bundle != nil)
	if !p.track(sb) {
		return nil, errors.New("kubernetes: provider closed")
	}
	created, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod: %w", err)
	}
	sb.created = true
	// The policy and the CA bundle belong to the pod (the garbage collector deletes them with it). No code of
	// the pod runs before both exist: its volumes, the bundle's included, are set up before its first
	// container starts.
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: created.Name, UID: created.UID}}
	if _, err := p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Create(ctx, p.policy(sb.name, r, owner, ln.Addr().(*net.TCPAddr).Port), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create network policy: %w", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: p.meta(sb.name, r, owner), Data: map[string]string{}}
	if bundle != nil {
		cm.Data[caKey] = string(bundle)
	}
	if _, err := p.cs.CoreV1().ConfigMaps(p.cfg.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create config map: %w", err)
	}

	ip, err := p.waitRunning(ctx, sb.name)
	if err != nil {
		return nil, err
	}
	sb.ln.allow(ip)
	if err := sb.attach(); err != nil {
		return nil, err
	}
	if err := sb.ping(ctx); err != nil {
		return nil, err
	}
	if err := sb.confined(ctx, p.canary.Addr().(*net.TCPAddr).Port); err != nil {
		return nil, err
	}
	return sb, nil
}

func (p *Provider) track(sb *Sandbox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.live[sb.name] = sb
	return true
}

func (p *Provider) untrack(sb *Sandbox) {
	p.mu.Lock()
	delete(p.live, sb.name)
	p.mu.Unlock()
}

// meta is the metadata of a sandbox's objects: its name, labels and expiry, and the owner given.
func (p *Provider) meta(name string, r *sandbox.Recipe, owner []metav1.OwnerReference) metav1.ObjectMeta {
	labels := map[string]string{LabelManaged: "corral", LabelSandbox: name, LabelOwner: p.cfg.Owner}
	if validLabel(r.SessionID) {
		labels[LabelSession] = r.SessionID
	}
	return metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{AnnotationExpires: p.expiry()}, OwnerReferences: owner}
}

// policy allows the sandbox's pod to reach its proxy's port on the egress address, and nothing else (no DNS:
// the proxy resolves); nothing reaches the pod.
func (p *Provider) policy(name string, r *sandbox.Recipe, owner []metav1.OwnerReference, port int) *netv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	portV := intstr.FromInt32(int32(port))
	bits := 32
	if p.cfg.EgressIP.Is6() {
		bits = 128
	}
	return &netv1.NetworkPolicy{
		ObjectMeta: p.meta(name, r, owner),
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: name}},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
			Egress: []netv1.NetworkPolicyEgressRule{{
				To:    []netv1.NetworkPolicyPeer{{IPBlock: &netv1.IPBlock{CIDR: netip.PrefixFrom(p.cfg.EgressIP, bits).String()}}},
				Ports: []netv1.NetworkPolicyPort{{Protocol: &tcp, Port: &portV}},
			}},
		},
	}
}

// pod is the sandbox's pod: restricted (non-root, no privilege escalation, no capabilities, the runtime's
// default seccomp profile, a read-only root), no service account token, no service links, no DNS, its limits
// from the recipe, its workspace and /tmp volumes bounded.
func (p *Provider) pod(name string, r *sandbox.Recipe, l sandbox.Limits, proxyPort int, ca bool) *corev1.Pod {
	f, t := false, true
	uid := p.cfg.UID
	restricted := &corev1.SecurityContext{
		RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &t,
		AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t, Privileged: &f,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	ws := resource.NewQuantity(p.cfg.WorkspaceBytes, resource.BinarySI)
	tmp := resource.NewQuantity(l.TmpBytes, resource.BinarySI)
	limits := corev1.ResourceList{
		corev1.ResourceMemory:           *resource.NewQuantity(l.MemoryBytes, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(p.cfg.WorkspaceBytes+(1<<30), resource.BinarySI),
	}
	requests := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(p.cfg.CPURequestMilli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(min(l.MemoryBytes, defaultMemoryRequest), resource.BinarySI),
	}
	if l.CPUQuota > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.CPUQuota*1000), resource.DecimalSI)
		requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(min(int64(l.CPUQuota*1000), p.cfg.CPURequestMilli), resource.DecimalSI)
	}
	mounts := []corev1.VolumeMount{
		{Name: "workspace", MountPath: agent.Workspace},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "agent", MountPath: agentDir, ReadOnly: true},
	}
	if ca {
		mounts = append(mounts, corev1.VolumeMount{Name: "ca", MountPath: host.CABundlePath, SubPath: caKey, ReadOnly: true},
			corev1.VolumeMount{Name: "ca", MountPath: host.SystemCABundle, SubPath: caKey, ReadOnly: true})
	}
	var env []corev1.EnvVar
	for _, kv := range host.EnvFor(r.Egress) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	proxyAddr := netip.AddrPortFrom(p.cfg.EgressIP, uint16(proxyPort)).String()
	var runtimeClass *string
	if p.cfg.RuntimeClassName != "" {
		runtimeClass = &p.cfg.RuntimeClassName
	}
	return &corev1.Pod{
		ObjectMeta: p.meta(name, r, nil),
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			RuntimeClassName:              runtimeClass,
			TerminationGracePeriodSeconds: new(int64),
			// No resolver: names are the proxy's to resolve, and DNS would be a way out.
			DNSPolicy: corev1.DNSNone,
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid, RunAsNonRoot: &t,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name: "agent", Image: p.cfg.AgentImage, ImagePullPolicy: p.cfg.ImagePullPolicy,
				Command:         []string{p.cfg.AgentPath, agent.InstallArg, agentDir + "/corral-sandbox-agent"},
				VolumeMounts:    []corev1.VolumeMount{{Name: "agent", MountPath: agentDir}},
				SecurityContext: restricted,
				// Its requests count for the pod's scheduling (an init container's are not added to the
				// sandbox's, the larger wins): as small as the sandbox's.
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi"), corev1.ResourceCPU: *resource.NewMilliQuantity(min(p.cfg.CPURequestMilli, 500), resource.DecimalSI)},
				},
			}},
			Containers: []corev1.Container{{
				Name: "sandbox", Image: p.cfg.Image, ImagePullPolicy: p.cfg.ImagePullPolicy,
				Command:         []string{agentDir + "/corral-sandbox-agent", "-proxy-addr", proxyAddr, "-proxy-socket", ""},
				WorkingDir:      agent.Workspace,
				Env:             env,
				Stdin:           true,
				StdinOnce:       true,
				VolumeMounts:    mounts,
				SecurityContext: restricted,
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ws}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}},
				{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(128<<20, resource.BinarySI)}}},
				{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}},
			},
		},
	}
}

// waitRunning waits until the pod's sandbox container runs and returns the pod's address; a pod that fails
// first (an image that cannot be pulled, an init container that failed, a pod deleted) is an error that says
// why.
func (p *Provider) waitRunning(ctx context.Context, name string) (netip.Addr, error) {
	pods := p.cs.CoreV1().Pods(p.cfg.Namespace)
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("watch pod: %w", err)
	}
	defer w.Stop()
	last := "pending"
	for {
		select {
		case <-ctx.Done():
			return netip.Addr{}, fmt.Errorf("pod %s did not start (%s): %w", name, last, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The watch ended (the server's timeout): look once and watch again.
				return p.waitRunningAgain(ctx, name)
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == "DELETED" {
				return netip.Addr{}, fmt.Errorf("pod %s was deleted while it started", name)
			}
			ip, state, err := podState(pod)
			if err != nil || ip.IsValid() {
				return ip, err
			}
			last = state
		}
	}
}

func (p *Provider) waitRunningAgain(ctx context.Context, name string) (netip.Addr, error) {
	pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("pod %s: %w", name, err)
	}
	if ip, _, err := podState(pod); err != nil || ip.IsValid() {
		return ip, err
	}
	return p.waitRunning(ctx, name)
}

// podState returns the pod's address once its sandbox container runs, or an error once it cannot, or else a
// word on where its start is.
func podState(pod *corev1.Pod) (netip.Addr, string, error) {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return netip.Addr{}, "", fmt.Errorf("pod %s ended before it served (%s): %s", pod.Name, pod.Status.Phase, containerReasons(pod))
	}
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return netip.Addr{}, "", fmt.Errorf("pod %s: container %s: %s: %s", pod.Name, cs.Name, w.Reason, w.Message)
			}
		}
		if t := cs.State.Terminated; t != nil && (t.ExitCode != 0 || cs.Name == "sandbox") {
			return netip.Addr{}, "", fmt.Errorf("pod %s: container %s ended: %s (exit %d) %s", pod.Name, cs.Name, t.Reason, t.ExitCode, t.Message)
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "sandbox" && cs.State.Running != nil {
			ip, err := netip.ParseAddr(pod.Status.PodIP)
			if err != nil {
				return netip.Addr{}, "", fmt.Errorf("pod %s runs with no address (%q)", pod.Name, pod.Status.PodIP)
			}
			return ip.Unmap(), "", nil
		}
	}
	state := string(pod.Status.Phase)
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Reason != "" {
			state += ": " + c.Reason + " " + c.Message
		}
	}
	return netip.Addr{}, state, nil
}

func containerReasons(pod *corev1.Pod) string {
	var b bytes.Buffer
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if t := cs.State.Terminated; t != nil {
			fmt.Fprintf(&b, "%s: %s (exit %d) %s; ", cs.Name, t.Reason, t.ExitCode, t.Message)
		}
	}
	return b.String()
}

// Sandbox is one pod.
type Sandbox struct {
	p       *Provider
	name    string
	limits  sandbox.Limits
	ln      *podListener
	proxy   *egress.Proxy
	created bool
	stderr  *host.TailWriter

	client *host.Client
	stdin  *io.PipeWriter     // the agent's stdin: closing it ends the agent, and then the stream
	cancel context.CancelFunc // ends the attach stream
	ended  chan struct{}      // closed when the stream has ended

	once     sync.Once
	closeErr error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// hangGrace is how long past a call's timeout the host waits before it declares the agent hung.
const hangGrace = 15 * time.Second

// attach opens the stream to the agent's stdin and stdout.
func (sb *Sandbox) attach() error {
	p := sb.p
	req := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.cfg.Namespace).Name(sb.name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: "sandbox", Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(p.cfg.REST, "POST", req.URL())
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(p.cfg.REST, "GET", req.URL().String())
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	sb.cancel, sb.ended, sb.stdin = cancel, make(chan struct{}), inW
	sb.client = host.NewClient(inW, outR)
	go func() {
		defer close(sb.ended)
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: sb.stderr})
		if err == nil {
			err = errors.New("the attach stream ended")
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	return nil
}

// ping waits until the agent answers.
func (sb *Sandbox) ping(ctx context.Context) error {
	res, err := sb.client.Call(ctx, "", agent.PingTool, json.RawMessage(`{}`), 30*time.Second, 0, 5*time.Second)
	if err != nil {
		if t := strings.TrimSpace(sb.stderr.String()); t != "" {
			err = fmt.Errorf("%w (agent stderr: %s)", err, t)
		}
		return err
	}
	if res.IsError {
		return errors.New("agent: ping failed")
	}
	return nil
}

// confined proves the pod's network policy is enforced: from inside, the provider's canary port (which no
// policy allows) must be unreachable. A policy engine programs a new pod's rules a moment after it starts;
// until then the pod is not handed out.
func (sb *Sandbox) confined(ctx context.Context, canaryPort int) error {
	probe, _ := json.Marshal(map[string]any{"command": fmt.Sprintf(
		"timeout 2 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null && echo reached || echo refused", sb.p.cfg.EgressIP, canaryPort)})
	for {
		res, err := sb.client.Call(ctx, "", "bash", probe, 10*time.Second, 0, 5*time.Second)
		if err != nil {
			return fmt.Errorf("network policy probe: %w", err)
		}
		out := resultText(res)
		if bytes.Contains([]byte(out), []byte("refused")) {
			return nil
		}
		if !bytes.Contains([]byte(out), []byte("reached")) {
			return fmt.Errorf("network policy probe: %s", out)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pod's network policy was not enforced in time: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Execute runs one tool call in the pod.
func (sb *Sandbox) Execute(ctx context.Context, shell, name string, input json.RawMessage) (sandbox.Result, error) {
	res, err := sb.client.Call(ctx, shell, name, input, sb.limits.CommandTimeout, sb.limits.OutputBytes, hangGrace)
	if err != nil && errors.Is(err, sandbox.ErrSandboxDead) {
		why, oom := sb.status()
		if why != "" {
			err = fmt.Errorf("%w (%s)", err, why)
		}
		if oom {
			err = fmt.Errorf("%w: it ran out of memory (limit %d MiB)%w", err, sb.limits.MemoryBytes>>20, host.LimitHit)
		}
	}
	return res, err
}

// status is what the cluster says of the pod once the stream to it ended, and whether the kernel killed its
// agent at the memory limit.
func (sb *Sandbox) status() (why string, oom bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pod, err := sb.p.cs.CoreV1().Pods(sb.p.cfg.Namespace).Get(ctx, sb.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "its pod was deleted", false
	case err != nil:
		return "", false
	case pod.DeletionTimestamp != nil:
		return "its pod is being deleted", false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			oom = true
		}
	}
	return strings.TrimSpace(string(pod.Status.Phase) + " " + containerReasons(pod)), oom
}

// Close deletes the pod (its policy and config map with it) and stops its proxy. Idempotent.
func (sb *Sandbox) Close() error {
	sb.once.Do(func() {
		if sb.cancel != nil {
			// The agent's stdin closes first (the container has stdinOnce: the agent ends, and the stream with
			// it); a stream that outlives that is cut.
			sb.stdin.Close()
			select {
			case <-sb.ended:
			case <-time.After(3 * time.Second):
			}
			sb.cancel()
			<-sb.ended
		}
		var errs []error
		if sb.created {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			errs = append(errs, sb.p.deleteWhere(ctx, LabelSandbox+"="+sb.name))
			cancel()
		}
		if sb.proxy != nil {
			errs = append(errs, sb.proxy.Close())
		} else if sb.ln != nil {
			errs = append(errs, sb.ln.Close())
		}
		sb.p.untrack(sb)
		sb.closeErr = errors.Join(errs...)
	})
	return sb.closeErr
}

// podListener accepts connections only from the pod's address, once it is known: another pod, or anything
// else that reaches the port, is cut at once.
type podListener struct {
	net.Listener
	mu sync.Mutex
	ip netip.Addr
}

func (l *podListener) allow(ip netip.Addr) {
	l.mu.Lock()
	l.ip = ip
	l.mu.Unlock()
}

func (l *podListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		from, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		l.mu.Lock()
		ok := l.ip.IsValid() && from.Addr().Unmap() == l.ip
		l.mu.Unlock()
		if ok {
			return c, nil
		}
		c.Close()
	}
}

func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func resultText(r sandbox.Result) string {
	var b bytes.Buffer
	for _, c := range r.Content {
		if c.Type == apitype.ContentText {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// validLabel reports whether s can be a label value: 1 to 63 letters, digits, '-', '_' and '.', starting and
// ending with a letter or digit.
func validLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return true
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
