package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a component process this Cluster started.
type proc struct {
	name string
	log  string // the path of its log file
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited; err is then set
	err  error
}

// startProc starts c with its output appended to its log file and records its pid in the state directory, so that
// the undo of a later run can find it if this process dies without stopping it.
func startProc(l layout, c component, env []string) (*proc, error) {
	log := l.path("logs", c.name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // The child has its own descriptor.
	cmd := exec.Command(c.args[0], c.args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	cmd.Dir = l.dir // Not the test's package directory: nothing a component writes belongs in the source tree.
	// A process group of its own keeps a Ctrl-C in the terminal from killing the component before Stop or the
	// guard can take the cluster down in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.name, err)
	}
	p := &proc{name: c.name, log: log, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := os.WriteFile(l.path("pids", c.name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return p, err
	}
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has already exited.
func (p *proc) signal(sig os.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig) // It may exit in between: then there is nothing to signal.
	}
}

// wait waits up to grace for the process to exit, then kills it and waits for that. It reports whether the
// process exited within grace.
func (p *proc) wait(grace time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return false
}

// logTail returns the last lines of a log file, for an error message that says why a component failed.
func logTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const maxBytes = 6 << 10
	if len(data) > maxBytes {
		data = data[len(data)-maxBytes:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "\t" + strings.Join(all, "\n\t")
}

// hostProc is a process of the machine as /proc shows it.
type hostProc struct {
	pid     int
	exe     string // the path of its executable
	cmdline string // arguments joined by spaces
	cgroups string // the content of /proc/PID/cgroup
}

func listProcs() []hostProc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var procs []hostProc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // It has exited.
		}
		cgroups, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		procs = append(procs, hostProc{
			pid:     pid,
			exe:     exe,
			cmdline: strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))),
			cgroups: string(cgroups),
		})
	}
	return procs
}

// inPodCgroup reports whether a process runs in a cgroup the kubelet or containerd made for the pods.
func inPodCgroup(cgroups string) bool {
	for line := range strings.Lines(cgroups) {
		// Each line is "hierarchy-ID:controllers:path".
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, name := range cgroupNames {
			if parts[2] == "/"+name || strings.HasPrefix(parts[2], "/"+name+"/") {
				return true
			}
		}
	}
	return false
}

// alive reports whether pid names a process that has not exited (a zombie has).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself contain spaces or parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// killAll kills the processes of a cluster in dir that are still running, whoever started them: the components
// and the containerd shims (binaries from bin whose command lines name dir) and, if pods is set, every process in
// the pods' cgroups. It waits until they are gone, because the cgroups and mounts cannot go before.
func killAll(dir, bin string, pods bool) error {
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		bin = real // /proc/PID/exe names the resolved path.
	}
	self, parent := os.Getpid(), os.Getppid()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []hostProc
		for _, p := range listProcs() {
			if p.pid == self || p.pid == parent || p.pid == 1 {
				continue
			}
			ours := bin != "" && strings.HasPrefix(p.exe, bin+"/") && mentions(p.cmdline, dir)
			if (ours || pods && inPodCgroup(p.cgroups)) && alive(p.pid) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var names []string
			for _, p := range left {
				names = append(names, fmt.Sprintf("%d (%s)", p.pid, p.cmdline))
			}
			return fmt.Errorf("processes survive SIGKILL: %s", strings.Join(names, ", "))
		}
		for _, p := range left {
			if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("kill %d: %w", p.pid, err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
