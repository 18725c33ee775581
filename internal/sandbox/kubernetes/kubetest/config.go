package kubetest

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The cluster's fixed addresses. The ports are off the defaults so that nothing clashes with the machine's own
// services; the flock serializes the clusters that would clash with each other.
const (
	etcdPort              = 23790
	etcdPeerPort          = 23800
	apiserverPort         = 16443
	kubeletPort           = 20250
	kubeletHealthzPort    = 20248
	controllerManagerPort = 20257
	schedulerPort         = 20259
	kubeRouterHealthPort  = 20244

	serviceCIDR         = "10.96.0.0/16"
	nodePortRange       = "30000-32767" // the API server's default
	kubernetesServiceIP = "10.96.0.1"
	clusterCIDR         = "10.244.0.0/16"
	// podCIDR is the node's share of clusterCIDR: the controller manager gives the first /24 to the only node, and
	// the bridge plugin's host-local IPAM hands out the same range.
	podCIDR = "10.244.0.0/24"

	// bridgeName is the Linux bridge the CNI plugin creates for the pods.
	bridgeName = "kube-bridge"
)

// ports lists every TCP port the components listen on, so that Start can name a clash before it starts anything.
var ports = []int{etcdPort, etcdPeerPort, apiserverPort, kubeletPort, kubeletHealthzPort, controllerManagerPort,
	schedulerPort, kubeRouterHealthPort}

// layout names the files of one cluster under its state directory.
type layout struct{ dir string }

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.dir}, elem...)...)
}
func (l layout) pki(name string) string  { return l.path("pki", name) }
func (l layout) containerdSock() string  { return l.path("containerd", "containerd.sock") }
func (l layout) adminKubeconfig() string { return l.path("admin.kubeconfig") }

// writeConfigs writes the kubeconfigs and the configuration files of containerd, the CNI plugins and the kubelet.
func writeConfigs(l layout, bin string, p *pki) error {
	server := fmt.Sprintf("https://127.0.0.1:%d", apiserverPort)
	files := map[string]string{
		"admin.kubeconfig":   kubeconfig(server, p.caCert, p.admin, p.adminKey),
		"kubelet.kubeconfig": kubeconfig(server, p.caCert, p.node, p.nodeKey),
		"containerd.toml":    containerdConfig(l, bin),
		"cni/10-bridge.conflist": fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "corral-kubetest",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isDefaultGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, bridgeName, l.path("cni-ipam"), podCIDR),
		"kubelet.yaml": kubeletConfig(l),
	}
	for name, text := range files {
		path := l.path(name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// kubeconfig embeds the certificates, so that the file stands on its own.
func kubeconfig(server string, ca, cert, key []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kubetest
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kubetest
  context: {cluster: kubetest, user: kubetest}
current-context: kubetest
`, server, b64(ca), b64(cert), b64(key))
}

// containerdConfig keeps every path containerd would otherwise put under /var/lib, /run or /opt inside the state
// directory, except the shims' sockets (/run/containerd/s is hard-coded for root: the undo removes it). Two
// settings are what this machine needs: root lacks CAP_SYS_RESOURCE, so runc must not lower oom_score_adj
// (restrict_oom_score_adj), and the pause image is imported and pinned, never pulled.
func containerdConfig(l layout, bin string) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[debug]
  address = %[4]q
[plugins.'io.containerd.internal.v1.opt']
  path = %[5]q
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[6]q
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  restrict_oom_score_adj = true
  cdi_spec_dirs = [%[7]q]
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = [%[8]q]
  conf_dir = %[9]q
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = %[10]q
    Root = %[11]q
    SystemdCgroup = false
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
`, l.path("containerd", "root"), l.path("containerd", "state"), l.containerdSock(), l.path("containerd", "debug.sock"),
		l.path("containerd", "opt"), PauseImage, l.path("containerd", "cdi"), filepath.Join(bin, "cni"), l.path("cni"),
		runcPath, l.path("containerd", "runc"))
}

// PodPidsLimit is the node's per-pod process limit (the kubelet's podPidsLimit).
const PodPidsLimit = 128

// kubeletConfig is the kubelet's configuration, with the paths under the state directory. The host has cgroup
// v1 and no systemd (failCgroupV1, cgroupDriver). The kubelet does not manage iptables (kube-router does what
// NetworkPolicy needs) and does not garbage-collect images: the imported ones cannot be pulled again.
func kubeletConfig(l layout) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
tlsCertFile: %q
tlsPrivateKeyFile: %q
address: 0.0.0.0
port: %d
healthzPort: %d
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podPidsLimit: %d
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
protectKernelDefaults: false
makeIPTablesUtilChains: false
podLogsDir: %q
volumePluginDir: %q
`, l.containerdSock(), l.pki("ca.crt"), l.pki("kubelet-serving.crt"), l.pki("kubelet-serving.key"),
		kubeletPort, kubeletHealthzPort, PodPidsLimit, l.path("pod-logs"), l.path("kubelet-plugins"))
}

// component is one process of the cluster: its name (also of its log and pid files) and command line.
type component struct {
	name string
	args []string
}

// components returns the cluster's processes in start order.
func components(l layout, bin, nodeIP, nodeName string) []component {
	b := func(name string) string { return filepath.Join(bin, name) }
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	admin := l.adminKubeconfig()
	kubeconfigs := []string{"--kubeconfig=" + admin,
		"--authentication-kubeconfig=" + admin, "--authorization-kubeconfig=" + admin}
	return []component{
		{"etcd", []string{b("etcd"), "--name=kubetest", "--data-dir=" + l.path("etcd"),
			"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=kubetest=" + peerURL,
			// The data dies with the cluster: durability only costs time on a loaded machine.
			"--unsafe-no-fsync"}},
		{"kube-apiserver", []string{b("kube-apiserver"), "--etcd-servers=" + etcdURL,
			"--secure-port=" + strconv.Itoa(apiserverPort), "--bind-address=0.0.0.0", "--advertise-address=" + nodeIP,
			"--tls-cert-file=" + l.pki("apiserver.crt"), "--tls-private-key-file=" + l.pki("apiserver.key"),
			"--client-ca-file=" + l.pki("ca.crt"),
			"--service-account-key-file=" + l.pki("sa.pub"), "--service-account-signing-key-file=" + l.pki("sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-cluster-ip-range=" + serviceCIDR, "--authorization-mode=Node,RBAC",
			"--kubelet-client-certificate=" + l.pki("kubelet-client.crt"), "--kubelet-client-key=" + l.pki("kubelet-client.key"),
			"--kubelet-certificate-authority=" + l.pki("ca.crt"),
			// The node's Hostname address is its made-up name, which no resolver knows.
			"--kubelet-preferred-address-types=InternalIP",
			"--allow-privileged=true", "--profiling=false"}},
		{"kube-controller-manager", append([]string{b("kube-controller-manager"),
			"--service-account-private-key-file=" + l.pki("sa.key"), "--root-ca-file=" + l.pki("ca.crt"),
			"--cluster-signing-cert-file=" + l.pki("ca.crt"), "--cluster-signing-key-file=" + l.pki("ca.key"),
			"--use-service-account-credentials=true", "--allocate-node-cidrs=true", "--cluster-cidr=" + clusterCIDR,
			"--node-cidr-mask-size=24", "--service-cluster-ip-range=" + serviceCIDR,
			"--secure-port=" + strconv.Itoa(controllerManagerPort), "--bind-address=127.0.0.1", "--leader-elect=false",
			"--profiling=false"}, kubeconfigs...)},
		{"kube-scheduler", append([]string{b("kube-scheduler"),
			"--secure-port=" + strconv.Itoa(schedulerPort), "--bind-address=127.0.0.1", "--leader-elect=false",
			"--profiling=false"}, kubeconfigs...)},
		{"containerd", []string{b("containerd"), "--config=" + l.path("containerd.toml")}},
		{"kubelet", []string{b("kubelet"), "--config=" + l.path("kubelet.yaml"),
			"--kubeconfig=" + l.path("kubelet.kubeconfig"), "--root-dir=" + l.path("kubelet"),
			"--hostname-override=" + nodeName, "--node-ip=" + nodeIP, "--cert-dir=" + l.path("kubelet-pki")}},
		// kube-router only enforces NetworkPolicy: routes, the service proxy and the CNI configuration are not
		// its business here. Whatever the policies say, it lets pods reach the service range and the node's
		// addresses at the NodePort range (KUBE-ROUTER-INPUT's first rules), so both ranges are the API server's.
		{"kube-router", []string{b("kube-router"), "--kubeconfig=" + admin,
			"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
			"--service-cluster-ip-range=" + serviceCIDR, "--service-node-port-range=" + nodePortRange,
			"--hostname-override=" + nodeName, "--health-port=" + strconv.Itoa(kubeRouterHealthPort),
			"--metrics-port=0", "--v=1"}},
	}
}

// mentions reports whether a process's command line names the state directory, which is how the undo recognizes
// the processes of a cluster it did not start itself (a killed run's).
func mentions(cmdline, dir string) bool {
	return strings.Contains(cmdline, dir+"/") || strings.Contains(cmdline, dir+" ") || strings.HasSuffix(cmdline, dir)
}
