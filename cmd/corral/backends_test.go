package main

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestLookupBackend(t *testing.T) {
	for name, want := range map[string]string{"bwrap": "bwrap", "oci": "oci", "runc": "oci", "gvisor": "gvisor", "runsc": "gvisor", "kubernetes": "kubernetes", "k8s": "kubernetes", "process": "process"} {
		b, err := lookupBackend(name)
		if err != nil || b.name != want {
			t.Errorf("lookupBackend(%q) = %v, %v; want %s", name, b, err, want)
		}
	}
	if _, err := lookupBackend("docker"); err == nil || !strings.Contains(err.Error(), "bwrap, oci, gvisor, kubernetes, process") {
		t.Errorf("lookupBackend(docker) = %v, want an error naming the backends", err)
	}
}

// TestBackendReasons: a backend that cannot run says why, with the fix, in the words the tool result carries.
func TestBackendReasons(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // nothing installed
	for name, want := range map[string]string{
		"bwrap":  "bubblewrap is not installed: apt-get install bubblewrap",
		"oci":    "runc is not installed: apt-get install runc",
		"gvisor": "runsc (gVisor) is not installed: /nowhere/runsc not found",
	} {
		b, _ := lookupBackend(name)
		_, err := b.provider(backendOptions{agentPath: "/nonexistent/agent", runsc: "/nowhere/runsc"}, "")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", name, err, want)
		}
	}
	got := benchBackends([]string{"runc", "docker", "process"}, backendOptions{agentPath: "/nonexistent/agent"}, 3)
	if len(got) != 3 || got[0].Name != "oci" || !strings.Contains(got[0].Unavailable, "runc is not installed") ||
		got[1].Unavailable == "" || got[2].Name != "process" || got[2].Unavailable != "" || got[2].New == nil || got[2].MaxStarting != 3 {
		t.Errorf("benchBackends = %+v", got)
	}
}

// TestMaxStarting: --sandbox-starts bounds the starts of a backend whose sandboxes run on this host, and not a
// kubernetes cluster's pods; its default is half the CPUs, at least one.
func TestMaxStarting(t *testing.T) {
	for kind, want := range map[string]int{"bwrap": 5, "oci": 5, "process": 5, "kubernetes": 0, "k8s": 0} {
		f := handsFlags{kind: kind, starts: 5}
		if got := f.maxStarting(); got != want {
			t.Errorf("%s: maxStarting = %d, want %d", kind, got, want)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f handsFlags
	f.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := max(1, runtime.GOMAXPROCS(0)/2); f.starts != want {
		t.Errorf("--sandbox-starts defaults to %d, want %d", f.starts, want)
	}
}

// TestGvisorNeedsStaticAgent: the test binary is linked as the tests were built; gVisor refuses a dynamic agent.
func TestGvisorNeedsStaticAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the root check comes before the agent check")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !dynamic(exe) {
		t.Skip("this test binary is statically linked (CGO_ENABLED=0)")
	}
	b, _ := lookupBackend("gvisor")
	opts := backendOptions{agentPath: exe, runsc: "/bin/true"} // a runsc that exists
	if err := b.check(&opts); err == nil || !strings.Contains(err.Error(), "statically linked agent") {
		t.Errorf("check = %v, want the static agent reason", err)
	}
}

func TestFindRunsc(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if got := findRunsc("/custom/runsc"); got != "/custom/runsc" {
		t.Errorf("findRunsc(/custom/runsc) = %q", got)
	}
	want := "runsc"
	if fileExists(runscFallback) {
		want = runscFallback
	}
	if got := findRunsc(""); got != want {
		t.Errorf("findRunsc(\"\") = %q, want %q", got, want)
	}
}

// TestKubeFlags: the kubernetes backend's settings are checked before anything reaches a cluster, and each
// refusal names what to fix.
func TestKubeFlags(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("POD_IP", "")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	good := kubeFlags{kubeconfig: kubeconfig, namespace: "ns", image: "img", agentImage: "corral", pullPolicy: "Never",
		egressIP: "10.0.0.7", owner: "me", workspaceMB: 100, cpuRequest: 10, workspaceClass: "fast", podPidsLimit: 256}
	cfg, err := good.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.EgressIP.String() != "10.0.0.7" || cfg.Owner != "me" || cfg.WorkspaceBytes != 100<<20 || cfg.CPURequestMilli != 10 || cfg.REST.Host != "https://127.0.0.1:1" ||
		cfg.WorkspaceClass != "fast" || cfg.PodPidsLimit != 256 {
		t.Errorf("config %+v", cfg)
	}
	for want, f := range map[string]func(*kubeFlags){
		"no cluster: pass --k8s-kubeconfig": func(f *kubeFlags) { f.kubeconfig = "" },
		"nonexistent":                       func(f *kubeFlags) { f.kubeconfig = "/nonexistent/kubeconfig" },
		"--k8s-pull-policy":                 func(f *kubeFlags) { f.pullPolicy = "Sometimes" },
		"--k8s-image and --k8s-agent-image": func(f *kubeFlags) { f.image = "" },
		"--k8s-egress-ip":                   func(f *kubeFlags) { f.egressIP = "not-an-ip" },
	} {
		bad := good
		f(&bad)
		if _, err := bad.config(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error naming %q, got %v", want, err)
		}
	}
}

// TestAgentPath: --sandbox-agent is taken as given; else corral-sandbox-agent on PATH (or beside the binary); else
// a copy of this binary in the data directory, reported as such (serve then logs selfAgentNote).
func TestAgentPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", t.TempDir()) // no agent on PATH
	p, self, err := (&handsFlags{}).agentPath(dir)
	if err != nil || !self || p != filepath.Join(dir, "bin", agentName) || !fileExists(p) {
		t.Fatalf("without an installed agent: %q self %v, %v; want a copy at %s", p, self, err, filepath.Join(dir, "bin", agentName))
	}
	given := filepath.Join(dir, "my-agent")
	if p, self, err := (&handsFlags{agent: given}).agentPath(dir); err != nil || self || p != given {
		t.Errorf("--sandbox-agent %s: %q self %v, %v", given, p, self, err)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, agentName), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	if p, self, err := (&handsFlags{}).agentPath(dir); err != nil || self || p != filepath.Join(bin, agentName) {
		t.Errorf("with %s on PATH: %q self %v, %v", agentName, p, self, err)
	}
}

// TestWarmConfig: --sandbox-warm 0 keeps no start ready (bwrap.Config.Warm < 0, as its zero means the default).
func TestWarmConfig(t *testing.T) {
	for flag, want := range map[int]int{0: -1, -3: -1, 1: 1, 4: 4} {
		if got := warmConfig(flag); got != want {
			t.Errorf("warmConfig(%d) = %d, want %d", flag, got, want)
		}
	}
}
