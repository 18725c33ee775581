package kubetest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// baseline is what the machine looked like before a cluster started. The undo removes exactly the difference, so
// it leaves alone whatever else on the machine uses iptables, ipsets, links or cgroups. Start stores it in the
// state directory before it starts any process, so that the undo of a killed run (by the guard or the next Start)
// knows it too.
type baseline struct {
	Bin      string            `json:"bin"`      // the binaries' directory, to recognize the cluster's processes
	Sysctls  map[string]string `json:"sysctls"`  // by dotted name, those of the sysctls list that exist
	Kernel   map[string]string `json:"kernel"`   // kernelSettings, to report a change the sysctls list misses
	IPTables map[string]string `json:"iptables"` // iptables-save's and ip6tables-save's output, by command
	IPSets   []string          `json:"ipsets"`
	Links    []string          `json:"links"`
	Netns    []string          `json:"netns"`   // the entries of /run/netns
	Paths    map[string]bool   `json:"paths"`   // whether each of outsidePaths existed
	Cgroups  []string          `json:"cgroups"` // the directories named in cgroupNames under each hierarchy
}

// sysctls are the kernel settings the cluster changes: the kubelet's (setupKernelTunables in
// pkg/kubelet/cm/container_manager_linux.go), the bridge plugin's IP forwarding and what kube-proxy and
// kube-router may set. The first is restored first because writing it also resets the forwarding switches.
var sysctls = []string{
	"net.ipv4.ip_forward",
	"net.ipv4.conf.all.forwarding",
	"net.ipv4.conf.default.forwarding",
	"net.ipv6.conf.all.forwarding",
	"net.ipv6.conf.default.forwarding",
	"net.ipv4.conf.all.route_localnet",
	"net.bridge.bridge-nf-call-iptables",
	"net.bridge.bridge-nf-call-ip6tables",
	"kernel.panic",
	"kernel.panic_on_oops",
	"kernel.keys.root_maxkeys",
	"kernel.keys.root_maxbytes",
	"vm.overcommit_memory",
	"vm.panic_on_oom",
}

// outsidePaths are the paths outside the state directory that the components create whatever their
// configuration says: the shims' sockets (/run/containerd/s), libcni's result cache (/var/lib/cni), the kubelet's
// container log links (/var/log/containers), its device plugin socket (/var/lib/kubelet/device-plugins), the
// default FlexVolume directory (/usr/libexec/kubernetes, made although volumePluginDir moves the one in use), the
// pods' network namespaces (/run/netns). The rest are defaults the configuration moves, listed so that a setting
// lost in an upgrade shows in the undo's log, not as litter.
var outsidePaths = []string{
	"/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/log/pods", "/run/netns",
	"/var/lib/kubelet", "/var/lib/containerd", "/var/lib/kube-router", "/run/kubernetes", "/etc/kubernetes",
	"/opt/containerd", "/run/nri", "/etc/cdi", "/run/cdi", "/usr/libexec/kubernetes",
}

// cgroupNames are the cgroups the kubelet (cgroupfs driver) and containerd create under every hierarchy's root.
var cgroupNames = []string{"kubepods", "k8s.io"}

func takeBaseline(bin string) (*baseline, error) {
	b := &baseline{Bin: bin, Sysctls: map[string]string{}, IPTables: map[string]string{}, Paths: map[string]bool{}}
	for _, name := range sysctls {
		if v, err := readSysctl(name); err == nil {
			b.Sysctls[name] = v
		}
	}
	b.Kernel = kernelSettings()
	for _, cmd := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(cmd + "-save").Output()
		if err != nil {
			return nil, fmt.Errorf("%s-save: %w", cmd, err)
		}
		b.IPTables[cmd] = string(out)
	}
	var err error
	if b.IPSets, err = ipsets(); err != nil {
		return nil, err
	}
	b.Links = links()
	b.Netns = dirNames("/run/netns")
	for _, p := range outsidePaths {
		_, err := os.Lstat(p)
		b.Paths[p] = err == nil
	}
	b.Cgroups = podCgroups()
	return b, nil
}

// write stores the baseline atomically: a run killed while writing it must not leave one the undo cannot read.
func (b *baseline) write(path string) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// undo takes down what a cluster in dir left on the machine, whether Stop's own cluster or a killed run's: the
// processes, mounts, network namespaces, cgroups, iptables rules and chains, ipsets, links, sysctls and paths it
// added, then dir itself. It carries on past a failed step and keeps dir (with the baseline, for the next try)
// when any failed. A missing dir means there is nothing to undo.
func undo(dir string, logf func(string, ...any)) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var b *baseline
	if data, err := os.ReadFile(filepath.Join(dir, "baseline.json")); err == nil {
		b = new(baseline)
		if err := json.Unmarshal(data, b); err != nil {
			return fmt.Errorf("read the baseline in %s: %w", dir, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if b == nil {
		// Start writes the baseline before it starts anything: without one, only files were made.
		logf("no baseline in %s: removing it", dir)
		return removeStateDir(dir)
	}

	var errs []error
	last := time.Now()
	step := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		if d := time.Since(last); d > time.Second {
			logf("kubetest: undo: %s took %s", name, d.Round(100*time.Millisecond))
		}
		last = time.Now()
	}
	// Pod cgroups that were there before are another kubelet's (Start refuses to run then): its pods are not ours.
	step("kill processes", killAll(dir, b.Bin, len(b.Cgroups) == 0))
	step("unmount", unmountAll(dir, b))
	step("network namespaces", removeNetns(b))
	step("cgroups", removeCgroups(b))
	for _, cmd := range []string{"iptables", "ip6tables"} {
		step(cmd, undoIPTables(cmd, b.IPTables[cmd], logf))
	}
	step("ipsets", undoIPSets(b))
	step("links", undoLinks(b))
	step("sysctls", restoreSysctls(b, logf))
	step("paths", removePaths(b, logf))
	if len(errs) > 0 {
		return fmt.Errorf("undo the cluster in %s (kept for the next try): %w", dir, errors.Join(errs...))
	}
	return removeStateDir(dir)
}

// removeStateDir removes dir after checking that nothing is mounted under it any more: a recursive removal
// through a bind mount would delete what the mount shows, such as a host path a pod mounted.
func removeStateDir(dir string) error {
	if m := mountsUnder(func(p string) bool { return within(p, dir) }); len(m) > 0 {
		return fmt.Errorf("not removing %s: still mounted under it: %s", dir, strings.Join(m, ", "))
	}
	return os.RemoveAll(dir)
}

func within(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

func readSysctl(name string) (string, error) {
	data, err := os.ReadFile(sysctlPath(name))
	return strings.TrimSpace(string(data)), err
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func restoreSysctls(b *baseline, logf func(string, ...any)) error {
	var errs []error
	for _, name := range sysctls {
		want, ok := b.Sysctls[name]
		if !ok {
			continue
		}
		got, err := readSysctl(name)
		if err != nil || got == want {
			continue
		}
		if err := os.WriteFile(sysctlPath(name), []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("%s=%s: %w", name, want, err))
			continue
		}
		logf("kubetest: restored %s=%s (was %s)", name, want, got)
	}
	// Anything else that changed is reported, not restored: it may be another program's doing.
	now := kernelSettings()
	for name, was := range b.Kernel {
		if v, ok := now[name]; ok && v != was && !slices.Contains(sysctls, name) {
			logf("kubetest: sysctl %s is %s, %s before the cluster: left alone", name, v, was)
		}
	}
	return errors.Join(errs...)
}

// kernelRoots are the parts of /proc/sys that kernelSettings reads.
var kernelRoots = []string{"kernel", "vm", "net/core", "net/ipv4", "net/ipv6/conf/all", "net/ipv6/conf/default",
	"net/bridge", "net/netfilter"}

// kernelSettings returns the writable kernel settings under kernelRoots by dotted name, leaving out the
// per-interface ones (they come and go with the interfaces) and those that change by themselves.
func kernelSettings() map[string]string {
	settings := map[string]string{}
	for _, root := range kernelRoots {
		_ = filepath.WalkDir(filepath.Join("/proc/sys", root), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // A missing root (no IPv6, no br_netfilter) or an unreadable entry.
			}
			rel := strings.TrimPrefix(p, "/proc/sys/")
			if d.IsDir() {
				perInterface := strings.HasPrefix(rel, "net/ipv4/conf/") && !strings.HasSuffix(rel, "/all") &&
					!strings.HasSuffix(rel, "/default") || strings.HasPrefix(rel, "net/ipv4/neigh/")
				if perInterface || rel == "kernel/random" {
					return fs.SkipDir
				}
				return nil
			}
			if rel == "kernel/ns_last_pid" || strings.HasSuffix(rel, "_count") {
				return nil
			}
			if info, err := d.Info(); err != nil || info.Mode().Perm()&0o200 == 0 {
				return nil
			}
			if data, err := os.ReadFile(p); err == nil {
				settings[strings.ReplaceAll(rel, "/", ".")] = strings.TrimSpace(string(data))
			}
			return nil
		})
	}
	return settings
}

// mountsUnder returns the mount points that match, deepest first, each as many times as it is mounted.
func mountsUnder(match func(string) bool) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if p := unescapeMountPath(fields[4]); match(p) {
			points = append(points, p)
		}
	}
	// Deeper paths first; for one path, the last mounted (on top) first.
	slices.Reverse(points)
	slices.SortStableFunc(points, func(a, b string) int { return cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/")) })
	return points
}

// unescapeMountPath undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + c - '0'
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts everything under dir (the kubelet's bind mount of its root, pod volumes, containerd's
// rootfs overlays and shm), the pods' network namespaces and anything under the outsidePaths that are new,
// deepest first, lazily when a mount is busy.
func unmountAll(dir string, b *baseline) error {
	match := func(p string) bool {
		if within(p, dir) {
			return true
		}
		if p == "/run/netns" || filepath.Dir(p) == "/run/netns" {
			return podNetns(b, filepath.Base(p)) // ip netns's own bind mount of the directory is not the cluster's
		}
		for _, q := range outsidePaths {
			if existed, known := b.Paths[q]; known && !existed && within(p, q) {
				return true
			}
		}
		return false
	}
	for range 10 {
		points := mountsUnder(match)
		if len(points) == 0 {
			return nil
		}
		for _, p := range points {
			if err := unix.Unmount(p, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
					return fmt.Errorf("unmount %s: %w", p, err)
				}
			}
		}
	}
	if points := mountsUnder(match); len(points) > 0 {
		return fmt.Errorf("still mounted: %s", strings.Join(points, ", "))
	}
	return nil
}

// podNetns reports whether /run/netns/name is a pod's network namespace the cluster made: containerd names them
// cni-<uuid>. Another process's namespaces (ip netns add, a test's of its own) are left alone, even when they are
// newer than the baseline.
func podNetns(b *baseline, name string) bool {
	return strings.HasPrefix(name, "cni-") && !slices.Contains(b.Netns, name)
}

// removeNetns removes the network namespace files the CNI made for the pods; the namespaces (and the host ends of
// their veth pairs) go with the last reference.
func removeNetns(b *baseline) error {
	var errs []error
	for _, n := range dirNames("/run/netns") {
		if podNetns(b, n) {
			if err := os.Remove(filepath.Join("/run/netns", n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// cgroupRoots returns the mount points of the cgroup hierarchies, v1 and v2.
func cgroupRoots() []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var roots []string
	for line := range strings.Lines(string(data)) {
		pre, post, ok := strings.Cut(line, " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if ok && len(fields) >= 5 && len(postFields) > 0 && (postFields[0] == "cgroup" || postFields[0] == "cgroup2") {
			roots = append(roots, unescapeMountPath(fields[4]))
		}
	}
	return roots
}

func podCgroups() []string {
	var found []string
	for _, root := range cgroupRoots() {
		for _, name := range cgroupNames {
			if p := filepath.Join(root, name); isDir(p) {
				found = append(found, p)
			}
		}
	}
	return found
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// removeCgroups removes the pods' cgroup trees, children first. A cgroup can only go once its processes have
// exited, and the kernel may take a moment after the kill, so a busy one is retried.
func removeCgroups(b *baseline) error {
	var errs []error
	for _, top := range podCgroups() {
		if slices.Contains(b.Cgroups, top) {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil // A cgroup that vanished while walking is fine.
		})
		slices.Reverse(dirs) // WalkDir lists a directory before its children.
		for _, d := range dirs {
			var err error
			for range 50 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// saveTable is one table of iptables-save's output.
type saveTable struct {
	chains []string // declared chains, builtin and user-defined
	policy map[string]string
	rules  []string // "-A CHAIN ..." lines, in order
}

func parseSave(out string) map[string]*saveTable {
	tables := map[string]*saveTable{}
	var t *saveTable
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "*"):
			t = &saveTable{policy: map[string]string{}}
			tables[line[1:]] = t
		case t == nil:
		case strings.HasPrefix(line, ":"):
			fields := strings.Fields(line[1:])
			if len(fields) >= 2 {
				t.chains = append(t.chains, fields[0])
				t.policy[fields[0]] = fields[1]
			}
		case strings.HasPrefix(line, "-A "):
			t.rules = append(t.rules, line)
		}
	}
	return tables
}

// ruleChain returns the chain of a "-A CHAIN ..." line.
func ruleChain(rule string) string {
	fields := strings.Fields(rule)
	if len(fields) < 2 {
		return ""
	}
	return fields[1]
}

// kubeRule reports whether a rule is the cluster's: it jumps to one of the KUBE-* chains or names Kubernetes or
// kube-router in its comment, in any case (kube-router's ACCEPT rules for marked packets say "KUBE-ROUTER").
func kubeRule(rule string) bool {
	lower := strings.ToLower(rule)
	return strings.Contains(rule, "-j KUBE-") || strings.Contains(rule, "-g KUBE-") ||
		strings.Contains(lower, "kube-router") || strings.Contains(lower, "kubernetes")
}

// undoIPTables removes, in each table, the KUBE-* chains that were not there before, and the rules added since to
// the remaining chains that are the cluster's (kubeRule). It compares iptables-save's output, so it takes out the
// kubelet's, kube-proxy's and kube-router's additions alike, and nothing anyone else made. With the nf_tables
// variant of iptables, a table that the cluster alone brought into being and that is now empty is deleted too, so
// that iptables-save prints what it printed before.
func undoIPTables(cmd, before string, logf func(string, ...any)) error {
	out, err := exec.Command(cmd + "-save").Output()
	if err != nil {
		return fmt.Errorf("%s-save: %w", cmd, err)
	}
	old := parseSave(before)
	var errs []error
	for name, t := range parseSave(string(out)) {
		o := old[name]
		if o == nil {
			o = &saveTable{policy: map[string]string{}}
		}
		newChains := map[string]bool{}
		for _, c := range t.chains {
			if strings.HasPrefix(c, "KUBE-") && !slices.Contains(o.chains, c) {
				newChains[c] = true
			}
		}
		had := map[string]int{}
		for _, r := range o.rules {
			had[r]++
		}
		var script strings.Builder
		deleted := 0
		for _, r := range t.rules {
			if newChains[ruleChain(r)] {
				continue // Flushed with its chain.
			}
			if had[r] > 0 {
				had[r]--
				continue
			}
			if kubeRule(r) {
				script.WriteString("-D" + strings.TrimPrefix(r, "-A") + "\n")
				deleted++
			}
		}
		var chains []string
		for c := range newChains {
			chains = append(chains, c)
		}
		slices.Sort(chains)
		for _, c := range chains {
			script.WriteString("-F " + c + "\n")
		}
		for _, c := range chains {
			script.WriteString("-X " + c + "\n")
		}
		if script.Len() == 0 {
			continue
		}
		restore := exec.Command(cmd+"-restore", "--noflush")
		restore.Stdin = strings.NewReader("*" + name + "\n" + script.String() + "COMMIT\n")
		if out, err := restore.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s-restore of table %s: %w: %s\ninput:\n%s", cmd, name, err, out, script.String()))
			continue
		}
		logf("kubetest: %s: removed %d chains and %d rules from table %s", cmd, len(chains), deleted, name)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return deleteEmptyNFTables(cmd, old)
}

// deleteEmptyNFTables deletes the tables that iptables-nft created for the cluster (none existed before) once
// they hold nothing but empty builtin chains with policy ACCEPT. The legacy variant's tables always exist.
func deleteEmptyNFTables(cmd string, old map[string]*saveTable) error {
	version, err := exec.Command(cmd, "--version").Output()
	if err != nil || !bytes.Contains(version, []byte("nf_tables")) {
		return nil
	}
	family := map[string]string{"iptables": "ip", "ip6tables": "ip6"}[cmd]
	out, err := exec.Command(cmd + "-save").Output()
	if err != nil {
		return fmt.Errorf("%s-save: %w", cmd, err)
	}
	var errs []error
	for name, t := range parseSave(string(out)) {
		if old[name] != nil || len(t.rules) > 0 {
			continue
		}
		empty := true
		for _, c := range t.chains {
			if t.policy[c] != "ACCEPT" { // User-defined chains show "-".
				empty = false
			}
		}
		if !empty {
			continue
		}
		if out, err := exec.Command("nft", "delete", "table", family, name).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft delete table %s %s: %w: %s", family, name, err, out))
		}
	}
	return errors.Join(errs...)
}

func ipsets() ([]string, error) {
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		return nil, fmt.Errorf("ipset list: %w", err)
	}
	return strings.Fields(string(out)), nil
}

// undoIPSets destroys kube-router's new sets (KUBE-*, and inet6:KUBE-* for IPv6). A list set must go before the
// sets it lists, so a failing destroy is retried after the others.
func undoIPSets(b *baseline) error {
	var err error
	for range 3 {
		var names []string
		if names, err = ipsets(); err != nil {
			return err
		}
		var errs []error
		for _, n := range names {
			if slices.Contains(b.IPSets, n) || !(strings.HasPrefix(n, "KUBE-") || strings.HasPrefix(n, "inet6:KUBE-")) {
				continue
			}
			if out, err := exec.Command("ipset", "destroy", n).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ipset destroy %s: %w: %s", n, err, bytes.TrimSpace(out)))
			}
		}
		if err = errors.Join(errs...); err == nil {
			return nil
		}
	}
	return err
}

func links() []string { return dirNames("/sys/class/net") }

// undoLinks deletes the pods' bridge and what is still attached to it; the host ends of the pods' veth pairs
// normally went with their network namespaces.
func undoLinks(b *baseline) error {
	var errs []error
	bridge := false
	for _, l := range links() {
		if slices.Contains(b.Links, l) {
			continue
		}
		master, _ := os.Readlink(filepath.Join("/sys/class/net", l, "master"))
		switch {
		case l == bridgeName:
			bridge = true // Deleted after its ports.
		case filepath.Base(master) == bridgeName:
			errs = append(errs, deleteLink(l))
		}
	}
	if bridge {
		errs = append(errs, deleteLink(bridgeName))
	}
	return errors.Join(errs...)
}

func deleteLink(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "link", "delete", name).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("Cannot find device")) {
		return fmt.Errorf("ip link delete %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// removePaths removes what the components created outside the state directory, once nothing is mounted there.
func removePaths(b *baseline, logf func(string, ...any)) error {
	var errs []error
	for _, p := range outsidePaths {
		if existed, known := b.Paths[p]; !known || existed {
			continue
		}
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if p == "/run/netns" {
			// Shared with every user of ip netns: removed only when nothing else has a namespace there.
			if err := os.Remove(p); err == nil {
				logf("kubetest: removed %s", p)
			} else if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EBUSY) {
				errs = append(errs, err)
			}
			continue
		}
		if m := mountsUnder(func(q string) bool { return within(q, p) }); len(m) > 0 {
			errs = append(errs, fmt.Errorf("not removing %s: still mounted under it: %s", p, strings.Join(m, ", ")))
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		logf("kubetest: removed %s", p)
	}
	return errors.Join(errs...)
}
