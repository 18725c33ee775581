// Package cgroup puts a sandbox's processes into per-sandbox cgroup v1 groups (memory, pids, cpu) with limits,
// reads back whether a limit was hit, and kills and removes the groups. cgroup v1 is what this project's hosts
// have: the v2 hierarchy carries no controllers there.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	if name == "" || strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("cgroup: invalid name %q", name)
	}
	own, err := ownGroups()
	if err != nil {
		return nil, err
	}
	g := &Group{limits: l, dirs: map[string]string{}}
	for _, c := range controllers {
		dir := filepath.Join(root, c, own[c], "corral", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			g.Remove()
			return nil, fmt.Errorf("cgroup: create %s group: %w", c, err)
		}
		g.dirs[c] = dir
	}
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
	if err := errors.Join(errs...); err != nil {
		g.Remove()
		return nil, err
	}
	return g, nil
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

// Sweep removes the groups named prefix* under <own group>/corral that are empty and older than age: those
// left by a server that crashed. A group in use is never removed (the kernel refuses to remove a populated
// group), and age spares one that another server has just made and not yet filled.
func Sweep(root, prefix string, age time.Duration) {
	own, err := ownGroups()
	if err != nil {
		return
	}
	for _, c := range controllers {
		parent := filepath.Join(root, c, own[c], "corral")
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

// Add moves a process into every group. Its later children are born there.
func (g *Group) Add(pid int) error {
	for _, c := range controllers {
		if err := os.WriteFile(filepath.Join(g.dir(c), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroup: add %d to %s: %w", pid, c, err)
		}
	}
	return nil
}

// Limits returns the limits the group was created with.
func (g *Group) Limits() Limits { return g.limits }

// Events reads how often the limits were hit.
func (g *Group) Events() Events {
	var ev Events
	mem, pids := g.dir("memory"), g.dir("pids")
	if mem == "" || pids == "" {
		return ev
	}
	if data, err := os.ReadFile(filepath.Join(mem, "memory.oom_control")); err == nil {
		ev.OOMKills = field(data, "oom_kill")
	}
	if data, err := os.ReadFile(filepath.Join(pids, "pids.events")); err == nil {
		ev.PidsMax = field(data, "max")
	}
	return ev
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
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// Kill sends SIGKILL to every process in the group until it is empty or a second has passed. A fork bomb
// cannot outrun it: the pids limit caps the group and killed processes do not come back.
func (g *Group) Kill() {
	deadline := time.Now().Add(time.Second)
	for {
		pids := g.Procs()
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Remove kills what is left in the groups and removes them. Idempotent.
func (g *Group) Remove() error {
	g.Kill()
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for c, dir := range g.dirs {
		var err error
		// A group stays busy for a moment after its last process was reaped.
		for range 100 {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup: remove %s group: %w", c, err))
			continue
		}
		delete(g.dirs, c)
	}
	return errors.Join(errs...)
}
