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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/sandbox/host"
)

// Labels and annotations Corral puts on what it creates.
const (
	LabelManaged = "app.kubernetes.io/managed-by" // = "corral"
	LabelSandbox = "corral.dev/sandbox"           // the sandbox's name (its pod's)
	LabelSession = "corral.dev/session"
	LabelOwner   = "corral.dev/owner" // Config.Owner
	// LabelWorkspace marks a session's workspace claim (its name).
	LabelWorkspace = "corral.dev/workspace"
	// AnnotationSession is the session id of a workspace claim (ids are not all label values).
	AnnotationSession = "corral.dev/session-id"
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
	// WorkspaceClass is the StorageClass of the sessions' workspaces: each session's is a PersistentVolumeClaim
	// of WorkspaceBytes, which outlives its pods (the next pod of the session mounts it) until the session is
	// gone (RemoveWorkspace). Empty: each pod's workspace is an emptyDir of WorkspaceBytes, gone with the pod.
	WorkspaceClass string
	// TTL is how long a pod outlives its owner's last sign of life; default DefaultTTL.
	TTL time.Duration
	// CPURequestMilli is each sandbox's CPU request in thousandths of a core (what the scheduler reserves, not
	// a limit: the recipe's CPUQuota is); default 100.
	CPURequestMilli int64
	// PodPidsLimit is the nodes' per-pod process limit (the kubelet's podPidsLimit), which is said in the error
	// of a sandbox that reaches it. Kubernetes has no per-pod setting: a recipe's Limits.Pids is not applied
	// to a pod. Zero: not known.
	PodPidsLimit int
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
// sure the namespace denies every pod's traffic unless a policy allows it, refuses a workspace class the cluster
// does not have, and starts keeping its pods alive and reaping expired ones.
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
	if cfg.WorkspaceClass != "" {
		if err := p.checkClass(ctx); err != nil {
			canary.Close()
			return nil, err
		}
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

// Capabilities: the sandboxes run elsewhere, on the images their pods name, reach their proxies over TCP, and
// get their session's files from a staging copy on this host (staged.go).
func (p *Provider) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{StagedWorkspace: true, RootFS: sandbox.RootFSImageRef, Egress: sandbox.EgressTCP}
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

// Provision starts a pod for r and returns once its agent answers, its network policy is enforced and the
// session's files (dirs: their staging copy) are in it.
func (p *Provider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (_ sandbox.Sandbox, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	limits := host.WithDefaults(r.Limits)
	sb := &Sandbox{p: p, name: "corral-" + randomID(), limits: limits, stderr: host.NewTailWriter(4096),
		note: packagesNote(r.Environment.Packages, dirs.Image)}
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

	claim := ""
	if p.cfg.WorkspaceClass != "" {
		if claim, err = p.ensureClaim(ctx, r.SessionID); err != nil {
			return nil, err
		}
	}
	pod := p.pod(sb.name, r, limits, podParts{image: dirs.Image, proxyPort: ln.Addr().(*net.TCPAddr).Port, ca: bundle != nil, claim: claim})
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
	if err := sb.ping(ctx, pingTimeout); err != nil {
		return nil, err
	}
	if err := sb.confined(ctx, p.canary.Addr().(*net.TCPAddr).Port); err != nil {
		return nil, err
	}
	if err := sb.seed(ctx, r, dirs); err != nil {
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

// pidsLimit names the process limit a pod reaches.
func (p *Provider) pidsLimit() string {
	if p.cfg.PodPidsLimit > 0 {
		return fmt.Sprintf("its limit of %d processes (the kubelet's podPidsLimit)", p.cfg.PodPidsLimit)
	}
	return "the process limit its node sets per pod (the kubelet's podPidsLimit)"
}

func (p *Provider) untrack(sb *Sandbox) {
	p.mu.Lock()
	delete(p.live, sb.name)
	p.mu.Unlock()
}
