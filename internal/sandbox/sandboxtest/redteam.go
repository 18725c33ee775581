package sandboxtest

import (
	"context"
	"encoding/base64"
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
	RunRedTeamWith(t, newProvider, RedTeamOptions{})
}

// RedTeamOptions tune RunRedTeamWith to what a backend cannot hide.
type RedTeamOptions struct {
	// KernelCmdlineShown, if set, says why the host kernel's command line shows in the sandbox's
	// /proc/cmdline (a cluster's runc runtime masks no such path: only gVisor's kernel hides it); the probe is
	// then logged, not failed.
	KernelCmdlineShown string
}

// RunRedTeamWith is RunRedTeam with options.
func RunRedTeamWith(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts RedTeamOptions) {
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
		out := res.Text()
		t.Logf("probe %s: %s", pr.name, strings.ReplaceAll(out, "\n", " | "))
		if strings.Contains(out, canary) {
			t.Errorf("probe %s revealed the canary: %q", pr.name, out)
		}
		if strings.Contains(out, "ESCAPED") || strings.Contains(out, "UNSHARED") {
			t.Errorf("probe %s succeeded: %q", pr.name, out)
		}
		if pr.name == "kernel cmdline" && len(hostCmdline) > 20 && strings.Contains(out, strings.TrimSpace(string(hostCmdline))) {
			if opts.KernelCmdlineShown == "" {
				t.Errorf("the host's kernel command line is visible: %q", out)
			} else {
				t.Logf("the host's kernel command line is visible: %s", opts.KernelCmdlineShown)
			}
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
		if out := res.Text(); strings.Contains(out, canary) {
			t.Errorf("read %s revealed the canary: %q", path, out)
		}
	}
	res, err := p.Execute(context.Background(), call(attacker, "grep", map[string]any{"pattern": canary, "path": "/proc"}))
	if err == nil && strings.Contains(res.Text(), canary) {
		t.Errorf("grep /proc revealed the canary")
	}
	select {
	case addr := <-reached:
		t.Errorf("a sandbox connected to the host listener %s", addr)
	default:
	}
}

// blindPattern is an extended regular expression that matches s, written so that it does not contain s: the
// command that searches for a secret must not itself put the secret in the sandbox (its /proc/*/cmdline).
func blindPattern(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case i == 1:
			fmt.Fprintf(&b, "[%c]", r)
		case strings.ContainsRune(`\.+*?()|[]{}^$`, r):
			b.WriteRune('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// RunRedTeamRepository checks that a session with a private repository holds its token nowhere the sandbox
// can reach: not in the environment or command line of any process it sees, not in any file it can read
// (the clone's .git/config included), not in the answers of its proxy and git endpoint; nor the vault's
// master key. Each search is proved to work by a control string planted where it looks. Run it for every
// isolating backend.
func RunRedTeamRepository(t *testing.T, newProvider func(testing.TB) sandbox.Provider, host RepoHost) {
	token := fmt.Sprintf("ghp_redTeamToken%d", time.Now().UnixNano())
	srv := NewGitServer(t, token)
	repoURL := srv.NewRepo(t, "o/proj")
	setup := host(t, srv)
	p := repoPool(t, newProvider, setup)
	session, res := setup.Session(t, repoURL, token)
	secrets := map[string]string{
		"token":                token,
		"authorization header": base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token)),
		"master key":           setup.MasterKey,
	}
	var patterns []string
	for _, s := range secrets {
		patterns = append(patterns, "-e '"+blindPattern(s)+"'")
	}
	secretGrep := "grep -E " + strings.Join(patterns, " ")
	control := fmt.Sprintf("corral-control-%d", time.Now().UnixNano())
	controlGrep := "grep -E -e '" + blindPattern(control) + "'"

	// The clone works, with its token, before anything is searched.
	out, failed := runRepo(t, p, repoCall(session, res, "git -C /workspace/proj log --format=%s -1", time.Minute))
	if failed || strings.TrimSpace(out) != "second" {
		t.Fatalf("clone: %q", out)
	}
	probes := []struct {
		name, cmd string
		// wantControl: the output must show the control string was found (the search works).
		wantControl string
	}{
		{"processes", fmt.Sprintf("export CORRAL_CONTROL=%s; sleep 60 & sleep 0.2; "+
			"for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/[0-9]*/comm; do cat $f 2>/dev/null; echo; done | tr '\\0' '\\n' > /tmp/.procdump; "+
			"echo secrets=$(%s -c /tmp/.procdump) control=$(%s -c /tmp/.procdump) processes=$(ls -d /proc/[0-9]* | wc -l); rm -f /tmp/.procdump; kill $!",
			control, secretGrep, controlGrep), "control="},
		// One pass over every file (the host's /usr too: 132,500 files, 2.2 GB on the CI machine), printing each
		// match with its file: a secret shows as itself, the control as /workspace/.control:<control>.
		{"files", fmt.Sprintf("printf %%s %s > /workspace/.control; "+
			"find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -type f -size -4M -printf '%%s\\n' 2>/dev/null | "+
			"awk '{n++; b+=$1} END {printf \"searched %%d files, %%d bytes\\n\", n, b}'; "+
			"find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -type f -size -4M -print0 2>/dev/null | "+
			"xargs -0 %s %s -a -o -H 2>/dev/null; rm -f /workspace/.control; echo done",
			control, secretGrep, strings.TrimPrefix(controlGrep, "grep -E ")), "/workspace/.control:" + control},
		{"env", "env; cat /proc/self/environ | tr '\\0' '\\n'", ""},
		{"git config", "cat /workspace/proj/.git/config; git -C /workspace/proj config --list --show-origin; " +
			"git -C /workspace/proj remote -v; ls -la /workspace/proj/.git; cat /workspace/proj/.git/FETCH_HEAD /workspace/proj/.git/packed-refs 2>/dev/null", ""},
		{"proxy answers", "curl -sS -i --max-time 20 --noproxy '' -x \"$http_proxy\" 'http://" + sandbox.LocalHost + "/git/" + res.ID + "/info/refs?service=git-upload-pack' | head -c 20000; " +
			"curl -sS -i --max-time 20 --noproxy '' -x \"$http_proxy\" 'http://" + sandbox.LocalHost + "/git/" + res.ID + "/info/refs?service=git-receive-pack' | head -c 20000; " +
			"curl -sS -i --max-time 20 --noproxy '' -x \"$http_proxy\" -X POST --data x 'http://" + sandbox.LocalHost + "/git/" + res.ID + "/git-upload-pack'; " +
			"curl -sS -i --max-time 20 --noproxy '' -x \"$http_proxy\" 'http://" + sandbox.LocalHost + "/git/" + res.ID + "/HEAD'; " +
			"curl -sS -i --max-time 20 --noproxy '' -x \"$http_proxy\" 'http://" + sandbox.LocalHost + "/'; " +
			"curl -sS -i --max-time 20 --noproxy '' -x \"$http_proxy\" '" + repoURL + "/info/refs?service=git-upload-pack'; " +
			"curl -sS -i -k --max-time 20 --noproxy '' -x \"$http_proxy\" '" + repoURL + "/info/refs?service=git-upload-pack'; " +
			"GIT_TRACE=1 GIT_CURL_VERBOSE=1 GIT_TRACE_CURL=1 git -C /workspace/proj fetch origin 2>&1 | head -c 60000", ""},
	}
	for _, pr := range probes {
		timeout := 3 * time.Minute
		if pr.name == "files" {
			timeout = 10 * time.Minute // a saturated machine (CI runs every package at once) reads slowly
		}
		out, _ := runRepo(t, p, repoCall(session, res, pr.cmd, timeout))
		t.Logf("probe %s: %.3000s", pr.name, strings.ReplaceAll(out, "\n", " | "))
		for what, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("probe %s shows the %s", pr.name, what)
			}
		}
		if strings.Contains(out, "secrets=") && !strings.Contains(out, "secrets=0 ") {
			t.Errorf("probe %s found a secret: %.2000s", pr.name, out)
		}
		if pr.name == "files" {
			for line := range strings.Lines(out) {
				if l := strings.TrimSpace(line); l != "" && l != "done" && l != pr.wantControl && !strings.HasPrefix(l, "searched ") {
					t.Errorf("probe files found a secret: %.300s", l)
				}
			}
		}
		if pr.wantControl != "" && (!strings.Contains(out, pr.wantControl) || strings.Contains(out, pr.wantControl+"0")) {
			t.Errorf("probe %s did not find its control string (the search does not work): %.2000s", pr.name, out)
		}
		if pr.name == "files" && !strings.HasSuffix(strings.TrimSpace(out), "done") {
			t.Errorf("the file search did not finish: %.2000s", out)
		}
		if pr.name == "git config" && !strings.Contains(out, "url = http://"+sandbox.LocalHost+"/git/"+res.ID) {
			t.Errorf("origin is not the git endpoint: %.2000s", out)
		}
		if pr.name == "proxy answers" && !strings.Contains(out, "git-upload-pack") {
			t.Errorf("the git endpoint did not answer: %.2000s", out)
		}
	}
}
