package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// RunRedTeam runs hostile probes from inside a sandbox, through the bash tool; every probe must fail and no
// output may reveal the canary secret the test plants in its own environment and in a file of a fake data
// directory. Run it for every isolating backend.
func RunRedTeam(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	canary := fmt.Sprintf("corral-canary-%d", time.Now().UnixNano())
	t.Setenv("CORRAL_TEST_SECRET_TOKEN", canary)
	dataDir := filepath.Join(WorkspaceRoot(t), "corral-data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dataDir, "vault.key")
	if err := os.WriteFile(secretFile, []byte(canary), 0o644); err != nil {
		t.Fatal(err)
	}

	// A TCP port and an abstract Unix socket of the host, which no sandbox may reach.
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tcp.Close() })
	abstract := fmt.Sprintf("corral-redteam-%d", time.Now().UnixNano())
	uln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uln.Close() })
	reached := make(chan string, 4)
	for _, ln := range []net.Listener{tcp, uln} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				reached <- ln.Addr().String()
				c.Close()
			}
		}()
	}

	p, root := newPoolRoot(t, newProvider, 0)
	const victim, attacker = "victim", "attacker"
	mustRun(t, p, call(victim, "write", map[string]any{"file_path": "secret.txt", "content": canary}))
	victimWS := filepath.Join(root, victim)

	probes := []struct{ name, cmd string }{
		{"env", "env"},
		{"proc environ", "cat /proc/1/environ; for f in /proc/[0-9]*/environ; do cat $f; done; tr '\\0' ' ' </proc/1/cmdline"},
		{"etc shadow", "cat /etc/shadow"},
		{"other workspace", fmt.Sprintf("ls %s; cat %s/secret.txt; cat /workspace/../%s/secret.txt", victimWS, victimWS, victim)},
		{"data dir", fmt.Sprintf("cat %s; ls %s", secretFile, dataDir)},
		{"host process", fmt.Sprintf("ls /proc/%d && cat /proc/%d/environ", os.Getpid(), os.Getpid())},
		{"mount", "mount -t tmpfs none /tmp && echo ESCAPED; mount --bind /workspace /tmp && echo ESCAPED; unshare -r true && echo UNSHARED"},
		{"raw socket", "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print(\"ESCAPED\")'"},
		{"cgroup write", "echo $$ > /sys/fs/cgroup/pids/cgroup.procs && echo ESCAPED; mkdir -p /tmp/cg && mount -t cgroup -o pids none /tmp/cg && echo ESCAPED"},
		{"host tcp", fmt.Sprintf("exec 3<>/dev/tcp/%s && echo ESCAPED", strings.Replace(tcp.Addr().String(), ":", "/", 1))},
		{"postgres", "exec 3<>/dev/tcp/127.0.0.1/5432 && echo ESCAPED"},
		{"abstract socket", fmt.Sprintf("python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"\\0%s\"); print(\"ESCAPED\")'", abstract)},
		{"root", "id -u; cat /proc/self/status | grep -E '^Cap(Eff|Bnd)'"},
		{"kernel cmdline", "cat /proc/cmdline"},
	}
	hostCmdline, _ := os.ReadFile("/proc/cmdline")
	for _, pr := range probes {
		res, err := p.Execute(context.Background(), bash(attacker, pr.cmd))
		if err != nil {
			t.Fatalf("probe %s: %v", pr.name, err)
		}
		out := text(res)
		t.Logf("probe %s: %s", pr.name, strings.ReplaceAll(out, "\n", " | "))
		if strings.Contains(out, canary) {
			t.Errorf("probe %s revealed the canary: %q", pr.name, out)
		}
		if strings.Contains(out, "ESCAPED") || strings.Contains(out, "UNSHARED") {
			t.Errorf("probe %s succeeded: %q", pr.name, out)
		}
		if pr.name == "kernel cmdline" && len(hostCmdline) > 20 && strings.Contains(out, strings.TrimSpace(string(hostCmdline))) {
			t.Errorf("the host's kernel command line is visible: %q", out)
		}
		if pr.name == "root" && (strings.HasPrefix(out, "0\n") || !strings.Contains(out, "CapEff:\t0000000000000000") || !strings.Contains(out, "CapBnd:\t0000000000000000")) {
			t.Errorf("sandbox runs privileged: %q", out)
		}
	}
	// The file tools too.
	for _, path := range []string{"/proc/1/environ", secretFile, victimWS + "/secret.txt", "/etc/shadow"} {
		res, err := p.Execute(context.Background(), call(attacker, "read", map[string]any{"file_path": path}))
		if err != nil {
			t.Fatal(err)
		}
		if out := text(res); strings.Contains(out, canary) {
			t.Errorf("read %s revealed the canary: %q", path, out)
		}
	}
	res, err := p.Execute(context.Background(), call(attacker, "grep", map[string]any{"pattern": canary, "path": "/proc"}))
	if err == nil && strings.Contains(text(res), canary) {
		t.Errorf("grep /proc revealed the canary")
	}
	select {
	case addr := <-reached:
		t.Errorf("a sandbox connected to the host listener %s", addr)
	default:
	}
}
