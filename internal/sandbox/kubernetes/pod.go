package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/host"
)

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

// podParts say what a sandbox's pod is made of besides its recipe: its image ("" for Config.Image), its proxy's
// port, whether it has a CA bundle, and the session's workspace claim ("" for an emptyDir).
type podParts struct {
	image     string
	proxyPort int
	ca        bool
	claim     string
}

// pod is the sandbox's pod: restricted (non-root, no privilege escalation, no capabilities, the runtime's
// default seccomp profile, a read-only root), no service account token, no service links, no DNS, its limits
// from the recipe, its workspace and /tmp volumes bounded.
func (p *Provider) pod(name string, r *sandbox.Recipe, l sandbox.Limits, v podParts) *corev1.Pod {
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
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(p.cfg.WorkspaceBytes+sessionBytes+(1<<30), resource.BinarySI),
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
		{Name: "session", MountPath: sessionRoot},
	}
	if v.ca {
		mounts = append(mounts, corev1.VolumeMount{Name: "ca", MountPath: host.CABundlePath, SubPath: caKey, ReadOnly: true},
			corev1.VolumeMount{Name: "ca", MountPath: host.SystemCABundle, SubPath: caKey, ReadOnly: true})
	}
	var env []corev1.EnvVar
	for _, kv := range host.EnvFor(r.Egress) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	proxyAddr := netip.AddrPortFrom(p.cfg.EgressIP, uint16(v.proxyPort)).String()
	workspace := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ws}}
	if v.claim != "" {
		workspace = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.claim}}
	}
	// A claim's files keep their owner from one pod to the next: the kubelet need not walk them again.
	onMismatch := corev1.FSGroupChangeOnRootMismatch
	// The environment's image is named by its digest: pulled once per node whatever the operator's policy for
	// the others (unless it is Always).
	image, pull := p.cfg.Image, p.cfg.ImagePullPolicy
	if v.image != "" {
		image = v.image
		if pull != corev1.PullAlways {
			pull = corev1.PullIfNotPresent
		}
	}
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
				RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid, FSGroupChangePolicy: &onMismatch, RunAsNonRoot: &t,
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
				Name: "sandbox", Image: image, ImagePullPolicy: pull,
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
				{Name: "workspace", VolumeSource: workspace},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}},
				{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(128<<20, resource.BinarySI)}}},
				{Name: "session", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(sessionBytes, resource.BinarySI)}}},
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

// containerReasons says why a pod ended: the node's reason, if it ended the pod itself (an eviction, a deadline,
// an admission refused), and each container's end, or what it was waiting for.
func containerReasons(pod *corev1.Pod) string {
	var b bytes.Buffer
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		fmt.Fprintf(&b, "%s %s; ", pod.Status.Reason, pod.Status.Message)
	}
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		switch {
		case cs.State.Terminated != nil:
			t := cs.State.Terminated
			fmt.Fprintf(&b, "%s: %s (exit %d) %s; ", cs.Name, t.Reason, t.ExitCode, t.Message)
		case cs.State.Waiting != nil:
			fmt.Fprintf(&b, "%s: waiting: %s %s; ", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		}
	}
	return b.String()
}
