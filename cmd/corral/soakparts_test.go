package main

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The parts of TestChaosSoak: its PostgreSQL, its supervised processes, its ledger and its search for leftovers.

// soakPG is a PostgreSQL cluster of the soak's own, which it can crash and restart without disturbing the
// machine's.
type soakPG struct {
	bin, dir, sock string
	port           int
	cred           *syscall.Credential
	dsn            string
}

// startSoakPG creates a cluster under root with the machine's PostgreSQL binaries, as the postgres user, and
// starts it on a free port.
func startSoakPG(t *testing.T, root string) *soakPG {
	t.Helper()
	initdbs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(initdbs) == 0 {
		t.Fatal("the chaos soak runs a PostgreSQL of its own: no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)")
	}
	slices.SortFunc(initdbs, func(a, b string) int { return pgMajor(a) - pgMajor(b) })
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("the chaos soak runs PostgreSQL as the postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	p := &soakPG{bin: filepath.Dir(initdbs[len(initdbs)-1]), dir: filepath.Join(root, "pg"), sock: filepath.Join(root, "pgsock"),
		port: freePort(t), cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	for _, d := range []string{p.dir, p.sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := p.command("initdb", "-D", p.dir, "-U", "postgres", "-A", "trust", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.ctl("-m", "immediate", "-w", "stop") })
	p.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	return p
}

func pgMajor(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

func (p *soakPG) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	cmd.Dir = p.sock
	return cmd
}

// ctl runs pg_ctl on the cluster.
func (p *soakPG) ctl(args ...string) error {
	out, err := p.command("pg_ctl", append([]string{"-D", p.dir}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// start starts the cluster and waits until it accepts connections.
func (p *soakPG) start() error {
	return p.ctl("-l", filepath.Join(p.sock, "postgres.log"), "-w", "-t", "120", "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=400", p.port, p.sock), "start")
}

// soakProc is one corral process of the soak, restarted by its supervisor whenever it dies, its output
// appended to a log file.
type soakProc struct {
	name  string
	args  []string
	env   []string
	log   string
	ready string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
	done    chan struct{} // closed when the supervisor has returned

	starts atomic.Int64
	maxRSS atomic.Int64
}

// proc starts a supervised process, waits until its first start logs the ready line and adds it to the soak.
func (k *soak) proc(name string, env []string, ready string, args ...string) *soakProc {
	t := k.t
	p := &soakProc{name: name, args: args, env: env, log: filepath.Join(k.root, name+".log"), ready: ready, done: make(chan struct{})}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for !p.logged(ready) {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s did not start:\n%s", name, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	go p.supervise()
	k.procs = append(k.procs, p)
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			if len(b) > 64<<10 {
				b = b[len(b)-64<<10:]
			}
			t.Logf("%s's log (its end):\n%s", name, b)
		}
	})
	return p
}

// start starts the process; p.mu is held, or p is not shared yet.
func (p *soakProc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(binDir, "corral"), p.args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.env, f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	p.starts.Add(1)
	return nil
}

// supervise restarts the process whenever it dies, until stop.
func (p *soakProc) supervise() {
	defer close(p.done)
	for {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		<-exited
		time.Sleep(500 * time.Millisecond)
		// Checked and started under the lock: a stop in between would wait for a process nobody stops.
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		err := p.start()
		p.mu.Unlock()
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: restarting %s: %v\n", p.name, err)
			return
		}
	}
}

// signal sends sig to the running process; false if it is not running.
func (p *soakProc) signal(sig syscall.Signal) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return false
	default:
	}
	return !p.stopped && p.cmd.Process.Signal(sig) == nil
}

func (p *soakProc) kill() bool { return p.signal(syscall.SIGKILL) }

// stop ends the supervision and stops the process cleanly (SIGTERM; SIGKILL after 30 seconds, an error).
func (p *soakProc) stop(t *testing.T) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stalled one
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM", p.name)
		_ = cmd.Process.Kill()
		<-exited
	}
	<-p.done
}

// logged says whether the process's log holds a line that starts with prefix.
func (p *soakProc) logged(prefix string) bool {
	f, err := os.Open(p.log)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return true
		}
	}
	return false
}

// problemLine is an ERROR or WARN line of a corral process's log: its level, message and error.
var problemLine = regexp.MustCompile(`level=(ERROR|WARN) msg=("[^"]*"|\S+)(.*err="?([^"]{0,160}))?`)

// problems counts the process's ERROR and WARN log lines by their message.
func (p *soakProc) problems() map[string]int {
	out := map[string]int{}
	f, err := os.Open(p.log)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m := problemLine.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]+" "+m[2]+" "+m[4]]++
		}
	}
	return out
}

// sampleRSS records the running process's resident set if it is the largest seen.
func (p *soakProc) sampleRSS() {
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			for {
				cur := p.maxRSS.Load()
				if kb<<10 <= cur || p.maxRSS.CompareAndSwap(cur, kb<<10) {
					break
				}
			}
		}
	}
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ledger is the soak's record, outside Corral, of the sandboxes' tool calls: GET /hit?k=KEY counts KEY.
type ledger struct {
	url, host string
	mu        sync.Mutex
	hits      map[string]int
}

func startLedger(t *testing.T) *ledger {
	l := &ledger{hits: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("k")
		l.mu.Lock()
		l.hits[key]++
		l.mu.Unlock()
		fmt.Fprintf(w, "noted %s\n", key)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	l.host = ln.Addr().String()
	l.url = "http://" + l.host
	return l
}

func (l *ledger) counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.hits)
}

// leftovers is what sandboxes can leave on the machine: processes, mounts, loop devices, cgroups.
type leftovers map[string][]string

// scanLeftovers lists the sandbox processes (bwrap and the in-sandbox agent) and the bwrap cgroups on the
// machine and, when root (the soak's data disk) is set, the processes that name it and the mounts and loop
// devices under it.
func scanLeftovers(root string) leftovers {
	l := leftovers{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		// A sandbox's own processes (its agent is /.corral/agent there) are in its cgroup.
		cg, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		if base := filepath.Base(args[0]); base == "bwrap" || base == "corral-sandbox-agent" ||
			bytes.Contains(cg, []byte("/corral/bwrap-")) || (root != "" && bytes.Contains(b, []byte(root))) {
			l["process"] = append(l["process"], filepath.Base(filepath.Dir(p))+" "+strings.Join(args, " "))
		}
	}
	for _, pattern := range []string{"/sys/fs/cgroup/*/corral/bwrap-*", "/sys/fs/cgroup/*/*/corral/bwrap-*", "/sys/fs/cgroup/*/*/*/corral/bwrap-*"} {
		dirs, _ := filepath.Glob(pattern)
		l["cgroup"] = append(l["cgroup"], dirs...)
	}
	if root != "" {
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		for line := range strings.SplitSeq(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
				l["mount"] = append(l["mount"], f[4])
			}
		}
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, p := range loops {
			if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), root+"/") {
				l["loop device"] = append(l["loop device"], strings.Split(p, "/")[3]+" "+strings.TrimSpace(string(b)))
			}
		}
	}
	return l
}

// minus is what l holds that before did not.
func (l leftovers) minus(before leftovers) leftovers {
	out := leftovers{}
	for kind, items := range l {
		for _, it := range items {
			if !slices.Contains(before[kind], it) {
				out[kind] = append(out[kind], it)
			}
		}
	}
	return out
}

func (l leftovers) empty() bool { return len(l) == 0 }

// counts says how many of each kind l holds.
func (l leftovers) counts() string {
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, fmt.Sprintf("%d %s(s)", len(l[kind]), kind))
	}
	return strings.Join(parts, ", ")
}

// details is a line for each of the first few items of each kind, a loop device's with the processes whose
// mount namespaces still mount it: what holds it is what a reader needs to find the leak.
func (l leftovers) details() []string {
	var lines []string
	for _, kind := range slices.Sorted(maps.Keys(l)) {
		for i, it := range l[kind] {
			if i == 5 {
				lines = append(lines, fmt.Sprintf("%s: %d more", kind, len(l[kind])-i))
				break
			}
			line := kind + " " + it
			if kind == "loop device" {
				line += "; " + loopHolders(strings.Fields(it)[0])
			}
			lines = append(lines, line)
		}
	}
	return lines
}

// loopHolders says which processes mount loop device name (loopN) in their mount namespaces, and the device's
// autoclear flag.
func loopHolders(name string) string {
	dev, err := os.ReadFile("/sys/block/" + name + "/dev")
	if err != nil {
		return "gone: " + err.Error()
	}
	autoclear, _ := os.ReadFile("/sys/block/" + name + "/loop/autoclear")
	majmin := strings.TrimSpace(string(dev))
	var holders []string
	seen := map[string]bool{} // a namespace's mounts once, whichever of its processes shows them
	infos, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	for _, p := range infos {
		pid := filepath.Base(filepath.Dir(p))
		ns, _ := os.Readlink("/proc/" + pid + "/ns/mnt")
		b, err := os.ReadFile(p)
		if err != nil || seen[ns] {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[2] == majmin {
				seen[ns] = true
				comm, _ := os.ReadFile("/proc/" + pid + "/comm")
				holders = append(holders, fmt.Sprintf("pid %s (%s, %s) at %s", pid, strings.TrimSpace(string(comm)), ns, f[4]))
				break
			}
		}
	}
	if len(holders) == 0 {
		holders = []string{"no process mounts it"}
	}
	return fmt.Sprintf("%s autoclear=%s: %s", majmin, strings.TrimSpace(string(autoclear)), strings.Join(holders, "; "))
}

// statusCounts counts HTTP statuses; safe for concurrent use.
type statusCounts struct {
	mu sync.Mutex
	n  map[int]int64
}

func (c *statusCounts) add(status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int]int64{}
	}
	c.n[status]++
}

func (c *statusCounts) snapshot() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}
