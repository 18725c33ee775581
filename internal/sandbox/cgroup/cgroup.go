// Package cgroup puts a sandbox's processes into per-sandbox cgroup v1 groups (memory, pids, cpu) with limits,
// reads back whether a limit was hit, and kills and removes the groups; SetShare weighs the group all sandboxes
// share against the server's own tasks. cgroup v1 is what this project's hosts
// have: the v2 hierarchy carries no controllers there.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Controllers the package manages, each mounted at <Root>/<controller>.
var controllers = []string{"memory", "pids", "cpu"}

// DefaultRoot is where the v1 hierarchies are mounted.
const DefaultRoot = "/sys/fs/cgroup"

// Limits are the bounds written into a sandbox's groups. Zero leaves a bound unset.
type Limits struct {
	MemoryBytes int64
	Pids        int
	CPUQuota    float64 // CPUs
}

// Group is one sandbox's set of cgroups. It is safe for concurrent use.
type Group struct {
	limits Limits

	mu   sync.Mutex
	dirs map[string]string // controller -> directory; emptied by Remove
}

// dir returns the group's directory of a controller, or "" once removed.
func (g *Group) dir(c string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dirs[c]
}

// Events counts how often the limits were hit since the group was created.
type Events struct {
	OOMKills int // processes the kernel killed for exceeding the memory limit
	PidsMax  int // forks refused for exceeding the pids limit
}

// Available reports whether the v1 controllers are mounted and writable under root.
func Available(root string) error {
	for _, c := range controllers {
		if err := syscall.Access(filepath.Join(root, c, "cgroup.procs"), 2 /* W_OK */); err != nil {
			return fmt.Errorf("cgroup v1 %s controller not usable under %s: %w", c, root, err)
		}
	}
	return nil
}

// New creates the groups <root>/<controller>/<own group>/corral/<name> and writes the limits.
func New(root, name string, l Limits) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	own, err := ownGroups()
	if err != nil {
		return nil, err
	}
	g := &Group{dirs: map[string]string{}}
	for _, c := range controllers {
		dir := filepath.Join(root, c, own[c], "corral", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			g.Remove()
			return nil, fmt.Errorf("cgroup: create %s group: %w", c, err)
		}
		g.dirs[c] = dir
	}
	if err := g.SetLimits(l); err != nil {
		g.Remove()
		return nil, err
	}
	return g, nil
}

// SetLimits writes l into the groups (New's limits; a zero bound is left as it is) and keeps it as the group's
// Limits. Processes already in the groups are held to it from then on.
func (g *Group) SetLimits(l Limits) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	write := func(c, file, v string) error {
		if err := os.WriteFile(filepath.Join(g.dirs[c], file), []byte(v), 0); err != nil {
			return fmt.Errorf("cgroup: set %s: %w", file, err)
		}
		return nil
	}
	var errs []error
	if l.MemoryBytes > 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		errs = append(errs, write("memory", "memory.limit_in_bytes", v))
		if _, err := os.Stat(filepath.Join(g.dirs["memory"], "memory.memsw.limit_in_bytes")); err == nil {
			errs = append(errs, write("memory", "memory.memsw.limit_in_bytes", v))
		}
	}
	if l.Pids > 0 {
		errs = append(errs, write("pids", "pids.max", strconv.Itoa(l.Pids)))
	}
	if l.CPUQuota > 0 {
		errs = append(errs, write("cpu", "cpu.cfs_period_us", "100000"),
			write("cpu", "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUQuota*100000), 10)))
	}
	g.limits = l
	return errors.Join(errs...)
}

// Rename gives the groups New made another name in the same parent (cgroup v1 allows it; the processes in them
// stay, with their limits): a group made before its sandbox was known takes the sandbox's name, under which
// Existing finds it.
func (g *Group) Rename(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	renamed := map[string]string{} // controllers mounted together share a directory: renamed once
	for _, c := range controllers {
		dir := g.dirs[c]
		if dir == "" {
			return errors.New("cgroup: rename of a removed group")
		}
		to, done := renamed[dir]
		if !done {
			to = filepath.Join(filepath.Dir(dir), name)
			if err := os.Rename(dir, to); err != nil {
				return fmt.Errorf("cgroup: rename %s group: %w", c, err)
			}
			renamed[dir] = to
		}
		g.dirs[c] = to
	}
	return nil
}

// checkName refuses a group name that is empty or would leave the parent.
func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/.") {
		return fmt.Errorf("cgroup: invalid name %q", name)
	}
	return nil
}

// Open returns the existing groups at <root>/<controller>/<path> (made by someone else, such as an OCI runtime)
// for reading events and killing; Remove removes them.
func Open(root, path string, l Limits) *Group {
	g := &Group{limits: l, dirs: map[string]string{}}
	for _, c := range controllers {
		g.dirs[c] = filepath.Join(root, c, path)
	}
	return g
}

// Existing returns the groups New(root, name, ...) made, whether or not they still exist, for killing and
// removing those of a server that is gone.
func Existing(root, name string) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	own, err := ownGroups()
	if err != nil {
		return nil, err
	}
	g := &Group{dirs: map[string]string{}}
	for _, c := range controllers {
		g.dirs[c] = filepath.Join(root, c, own[c], "corral", name)
	}
	return g, nil
}

// Parent is the group New's groups are made in, "<own group>/corral", for the cpu controller: the one whose
// share SetShare sets.
func Parent() (string, error) {
	own, err := ownGroups()
	if err != nil {
		return "", err
	}
	return filepath.Join(own["cpu"], "corral"), nil
}

// DefaultShare is the cpu.shares of the group all sandboxes share, against the 1024 of every task of the
// server's own group: all sandboxes together weigh a quarter of one busy server thread.
const DefaultShare = 256

// Share maps a configured share to cpu.shares: 0 is DefaultShare, a negative value the kernel's default 1024.
func Share(configured int) int {
	switch {
	case configured == 0:
		return DefaultShare
	case configured < 0:
		return 1024
	}
	return configured
}

// SetShare gives the cpu group <root>/cpu/<path> (created if missing), the parent of every sandbox's group, the
// weight shares against its siblings, and marks it idle (cpu.idle, Linux 5.15+, where the file exists) when idle
// is set: its tasks then run only when no task of the server's group wants the CPU. Below it each sandbox's group
// has the default weight, so sandboxes share what they get fairly. shares 1024 and idle false are the kernel's
// defaults: the sandboxes compete with the server as equals. The setting is the host's: the last server to start
// wins.
func SetShare(root, path string, shares int, idle bool) error {
	dir := filepath.Join(root, "cpu", path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cgroup: create cpu group: %w", err)
	}
	idleFile := filepath.Join(dir, "cpu.idle")
	_, statErr := os.Stat(idleFile)
	hasIdle := statErr == nil
	// The kernel refuses a new weight for an idle group: leave idle first.
	if hasIdle {
		if err := os.WriteFile(idleFile, []byte("0"), 0); err != nil {
			return fmt.Errorf("cgroup: set cpu.idle: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.Itoa(shares)), 0); err != nil {
		return fmt.Errorf("cgroup: set cpu.shares: %w", err)
	}
	if idle && hasIdle {
		if err := os.WriteFile(idleFile, []byte("1"), 0); err != nil {
			return fmt.Errorf("cgroup: set cpu.idle: %w", err)
		}
	}
	return nil
}

// Sweep removes the groups named prefix* under <own group>/corral that are empty and older than age: those
// left by a server that crashed. A group in use is never removed (the kernel refuses to remove a populated
// group), and age spares one that another server has just made and not yet filled.
func Sweep(root, prefix string, age time.Duration) {
	own, err := ownGroups()
	if err != nil {
		return
	}
	sweep(root, func(c string) string { return filepath.Join(own[c], "corral") }, prefix, age)
}

// SweepAt is Sweep for groups under <root>/<controller>/<parent>, as the OCI runtimes make them.
func SweepAt(root, parent, prefix string, age time.Duration) {
	sweep(root, func(string) string { return parent }, prefix, age)
}

func sweep(root string, parentOf func(controller string) string, prefix string, age time.Duration) {
	for _, c := range controllers {
		parent := filepath.Join(root, c, parentOf(c))
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > age {
				_ = os.Remove(filepath.Join(parent, e.Name()))
			}
		}
	}
}

// ownGroups maps each controller to this process's group path, from /proc/self/cgroup.
func ownGroups() (map[string]string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	own := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	for _, c := range controllers {
		if _, ok := own[c]; !ok {
			return nil, fmt.Errorf("cgroup: no v1 %s controller in /proc/self/cgroup", c)
		}
	}
	return own, nil
}

// Add moves a process into every group. Its later children are born there. It refuses pid 0 (which the kernel
// reads as the writer itself), init and this process: the server must never join a sandbox's group, whose Kill
// would then kill the server.
func (g *Group) Add(pid int) error {
	if pid <= 1 || pid == os.Getpid() {
		return fmt.Errorf("cgroup: refusing to add pid %d to a sandbox's group", pid)
	}
	for _, c := range controllers {
		if err := os.WriteFile(filepath.Join(g.dir(c), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroup: add %d to %s: %w", pid, c, err)
		}
	}
	return nil
}

// Dirs lists the group's directories, one per controller (none once removed).
func (g *Group) Dirs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var dirs []string
	for _, c := range controllers {
		if d := g.dirs[c]; d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// Limits returns the limits the group was created with, or last given (SetLimits).
func (g *Group) Limits() Limits {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limits
}

// Events reads how often the limits were hit.
func (g *Group) Events() Events {
	mem, pids := g.dir("memory"), g.dir("pids")
	if mem == "" || pids == "" {
		return Events{}
	}
	memData, _ := os.ReadFile(filepath.Join(mem, "memory.oom_control"))
	pidsData, _ := os.ReadFile(filepath.Join(pids, "pids.events"))
	return ParseEvents(memData, pidsData)
}

// ParseEvents reads Events from a memory cgroup's oom_control (v1) or memory.events (v2) file and a pids.events
// file (both versions): their oom_kill and max counters. Missing counters are zero.
func ParseEvents(memory, pids []byte) Events {
	return Events{OOMKills: field(memory, "oom_kill"), PidsMax: field(pids, "max")}
}

func field(data []byte, key string) int {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// Procs lists the processes in the group.
func (g *Group) Procs() []int {
	dir := g.dir("pids")
	if dir == "" {
		return nil
	}
	return ProcsIn(dir)
}

// ProcsIn lists the processes in the group at dir, a controller's directory of it (none if it cannot be read).
func ProcsIn(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// Kill sends SIGKILL to every process in the group until it is empty or ten seconds have passed. A fork bomb
// cannot outrun it: the pids limit caps the group and killed processes do not come back.
func (g *Group) Kill() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := slices.DeleteFunc(g.Procs(), func(p int) bool { return !killable(p) })
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killable reports whether Kill may signal pid: never a process group (pid <= 0), init, this process or its
// parent, whatever a group's cgroup.procs says.
func killable(pid int) bool {
	return pid > 1 && pid != os.Getpid() && pid != os.Getppid()
}

// Remove kills what is left in the groups and removes them. Idempotent.
func (g *Group) Remove() error {
	g.Kill()
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for c, dir := range g.dirs {
		var err error
		// A group stays busy for a moment after its last process was reaped, and a killed process must still be
		// scheduled to exit: in a sandbox's idle cpu group (SetShare) on a saturated machine that takes seconds.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			if time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup: remove %s group: %w", c, err))
			continue
		}
		delete(g.dirs, c)
	}
	return errors.Join(errs...)
}
