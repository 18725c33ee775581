package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/corralhq/corral/internal/sandbox/kubernetes"
)

// kubeFlags configure the kubernetes backend (--sandbox kubernetes).
type kubeFlags struct {
	kubeconfig, namespace, image, agentImage, runtimeClass, egressIP, owner, pullPolicy, workspaceClass, registry string
	workspaceMB, cpuRequest                                                                                       int64
	podPidsLimit                                                                                                  int
}

func (f *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "k8s-kubeconfig", os.Getenv("KUBECONFIG"), "kubernetes backend: kubeconfig `file` (default: the pod's service account when in a cluster; env KUBECONFIG)")
	fs.StringVar(&f.namespace, "k8s-namespace", envOr("CORRAL_K8S_NAMESPACE", "corral-sandboxes"), "kubernetes backend: the `namespace` of the sandboxes' pods (env CORRAL_K8S_NAMESPACE)")
	fs.StringVar(&f.image, "k8s-image", os.Getenv("CORRAL_K8S_IMAGE"), "kubernetes backend: the sandboxes' `image` (bash and the agents' tools; env CORRAL_K8S_IMAGE)")
	fs.StringVar(&f.agentImage, "k8s-agent-image", os.Getenv("CORRAL_K8S_AGENT_IMAGE"), "kubernetes backend: Corral's own `image`, whose "+kubernetes.DefaultAgentPath+" an init container copies into each pod (env CORRAL_K8S_AGENT_IMAGE)")
	fs.StringVar(&f.registry, "k8s-registry", os.Getenv("CORRAL_K8S_REGISTRY"), "kubernetes backend: the `repository` the environments' images are pushed to (e.g. registry.example.com/corral/env), with the credentials of the server's Docker configuration: the server builds them (--images debian) and pods run them; without it, pods run --k8s-image and an environment's packages are not installed (env CORRAL_K8S_REGISTRY)")
	fs.StringVar(&f.runtimeClass, "k8s-runtime-class", os.Getenv("CORRAL_K8S_RUNTIME_CLASS"), "kubernetes backend: the pods' RuntimeClass `name`, e.g. gvisor where the nodes have runsc (env CORRAL_K8S_RUNTIME_CLASS)")
	fs.StringVar(&f.egressIP, "k8s-egress-ip", os.Getenv("CORRAL_K8S_EGRESS_IP"), "kubernetes backend: this process's `address` as pods reach it: each sandbox's egress proxy listens on a port of its own there (default: env POD_IP, else the first address of an up interface; env CORRAL_K8S_EGRESS_IP)")
	fs.StringVar(&f.owner, "k8s-owner", os.Getenv("CORRAL_K8S_OWNER"), "kubernetes backend: this server's `name` on its pods, stable across restarts: a start deletes the pods a killed run left (default: the host name; env CORRAL_K8S_OWNER)")
	fs.StringVar(&f.pullPolicy, "k8s-pull-policy", envOr("CORRAL_K8S_PULL_POLICY", string(corev1.PullIfNotPresent)), "kubernetes backend: the images' pull `policy`: Always, IfNotPresent or Never")
	fs.Int64Var(&f.cpuRequest, "k8s-cpu-request", 100, "kubernetes backend: each pod's CPU request in `millicores` (what the scheduler reserves; --sandbox-cpus is the limit)")
	fs.StringVar(&f.workspaceClass, "k8s-workspace-class", os.Getenv("CORRAL_K8S_WORKSPACE_CLASS"), "kubernetes backend: a StorageClass `name` for the sessions' workspaces: each one a PersistentVolumeClaim that outlives its pods, deleted with the session (default: an emptyDir per pod, gone with it; env CORRAL_K8S_WORKSPACE_CLASS)")
	fs.IntVar(&f.podPidsLimit, "k8s-pod-pids-limit", 0, "kubernetes backend: the nodes' per-pod process `limit` (the kubelet's podPidsLimit; Kubernetes has no per-pod setting, so --sandbox-pids does not apply to pods), named in the error of a sandbox that reaches it")
	fs.Int64Var(&f.workspaceMB, "k8s-workspace", kubernetes.DefaultWorkspaceBytes>>20, "kubernetes backend: size limit of each pod's workspace volume in `MiB`")
}

// config resolves the flags into the backend's configuration.
func (f *kubeFlags) config() (kubernetes.Config, error) {
	var rc *rest.Config
	var err error
	if f.kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		rc, err = rest.InClusterConfig()
	} else if f.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		err = errors.New("no cluster: pass --k8s-kubeconfig, or run in a pod")
	}
	if err != nil {
		return kubernetes.Config{}, err
	}
	switch p := corev1.PullPolicy(f.pullPolicy); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return kubernetes.Config{}, fmt.Errorf("--k8s-pull-policy %q: want Always, IfNotPresent or Never", p)
	}
	if f.image == "" || f.agentImage == "" {
		return kubernetes.Config{}, errors.New("--k8s-image and --k8s-agent-image are required")
	}
	ip, err := egressIP(f.egressIP)
	if err != nil {
		return kubernetes.Config{}, err
	}
	owner := f.owner
	if owner == "" {
		if owner, err = os.Hostname(); err != nil {
			return kubernetes.Config{}, fmt.Errorf("--k8s-owner: %w", err)
		}
	}
	return kubernetes.Config{REST: rc, Namespace: f.namespace, Image: f.image, AgentImage: f.agentImage,
		ImagePullPolicy: corev1.PullPolicy(f.pullPolicy), RuntimeClassName: f.runtimeClass, EgressIP: ip, Owner: owner,
		WorkspaceBytes: f.workspaceMB << 20, CPURequestMilli: f.cpuRequest, PodPidsLimit: f.podPidsLimit,
		WorkspaceClass: f.workspaceClass}, nil
}

// egressIP is --k8s-egress-ip, else POD_IP (the chart sets it from the downward API), else the first
// non-loopback address of an up interface.
func egressIP(flagValue string) (netip.Addr, error) {
	s := flagValue
	if s == "" {
		s = os.Getenv("POD_IP")
	}
	if s != "" {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("--k8s-egress-ip %q: %w", s, err)
		}
		return ip, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Is4() {
				return pfx.Addr(), nil
			}
		}
	}
	return netip.Addr{}, errors.New("no address for the sandboxes' egress proxies: pass --k8s-egress-ip")
}

// kubeProvider connects the kubernetes backend, bounded so that a cluster that does not answer is reported.
func kubeProvider(o *backendOptions) (*kubernetes.Provider, error) {
	cfg, err := o.kube.config()
	if err != nil {
		return nil, err
	}
	cfg.Logger = o.logger
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// client-go logs through klog: into the server's log, not onto its stderr.
	klog.SetSlogLogger(cfg.Logger)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return kubernetes.New(ctx, cfg)
}
