package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/sandbox/seccomp"
)

// launcherArg, as the agent's first argument, makes it the shell launcher (runLauncher) instead of the agent.
const launcherArg = "__corral_shell_launcher"

// shellCommand is the command that starts bash: bash itself, or, with Config.ShellNamespace, the agent binary
// as the shell launcher (runLauncher), which starts bash in new user and pid namespaces.
func shellCommand(cfg Config) (*exec.Cmd, error) {
	bashArgs := []string{"/bin/bash", "--noprofile", "--norc"}
	if !cfg.ShellNamespace {
		cmd := exec.Command(bashArgs[0], bashArgs[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("shell launcher: %w", err)
	}
	cmd := exec.Command(self)
	// argv[0] stays the agent's, by which the corral binary knows to run as the agent.
	cmd.Args = append([]string{os.Args[0], launcherArg, "outer"}, bashArgs...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// runLauncher is the shell launcher (Config.ShellNamespace), in two stages; env is the shell's environment.
//
// The outer stage runs in the agent's namespaces as the agent's child. It starts the inner stage in new user,
// pid and mount namespaces, and writes their uid and gid maps: one line each, its own uid and gid, which their
// owner may write once setgroups is denied (the agent could not: an undumpable process's child's maps are
// root's until it execs). It hands the inner stage CAP_SETPCAP and CAP_SYS_ADMIN as ambient capabilities, the
// only ones that survive its exec. It then makes itself undumpable, lets the inner stage go on, and waits for
// it, ending as it ended: the agent sees it as the shell. The inner stage stays in the outer's process group
// and dies with it (PR_SET_PDEATHSIG), so the agent's kill of the group kills the shell; as its pid
// namespace's init, its death kills every process of the namespace.
//
// The inner stage mounts a proc of its pid namespace on /proc, drops every capability, the bounding set and
// the ambient set, sets no_new_privs, puts the seccomp deny list on itself (the sandbox's profile lets the
// launcher do what the shell may not), and executes bash, which becomes the namespace's init with the
// sandbox's uid and gid and no capabilities. The agent is outside that namespace: nothing the shell runs can
// name it, to signal or trace it.
func runLauncher(args, env []string) error {
	if len(args) < 2 {
		return errors.New("shell launcher: want a stage and a command")
	}
	// Capabilities and the parent-death signal are per thread.
	runtime.LockOSThread()
	switch args[0] {
	case "outer":
		return launchOuter(args[1:], env)
	case "inner":
		// The inner stage dies with the outer (syscall.SysProcAttr.Pdeathsig cannot serve: its check that the
		// parent is still there compares pids across the namespaces). Set before the wait, so that an outer
		// stage that dies before it closes the pipe.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			return fmt.Errorf("shell launcher: prctl(PR_SET_PDEATHSIG): %w", err)
		}
		// The outer stage writes a byte on descriptor 3 once it is undumpable.
		sync := os.NewFile(3, "launcher sync")
		var b [1]byte
		if n, err := sync.Read(b[:]); n != 1 {
			return fmt.Errorf("shell launcher: wait for the outer stage: %v", err)
		}
		sync.Close()
		// A proc of the shell's own pid namespace: there pids mean what the shell's processes take them to
		// (ps looks itself up by getpid), and the agent's entries are absent.
		if err := syscall.Mount("proc", "/proc", "proc", seccomp.ProcMountFlags, ""); err != nil {
			return fmt.Errorf("shell launcher: mount /proc: %w", err)
		}
		if err := dropPrivileges(); err != nil {
			return fmt.Errorf("shell launcher: %w", err)
		}
		// The sandbox's profile lets the launcher make namespaces and mount proc; the shell gets the whole deny
		// list back.
		if err := installFilter(); err != nil {
			return fmt.Errorf("shell launcher: %w", err)
		}
		return syscall.Exec(args[1], args[1:], env)
	}
	return fmt.Errorf("shell launcher: unknown stage %q", args[0])
}

func launchOuter(command, env []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("shell launcher: %w", err)
	}
	// As the agent makes the shell (startShell), before the shell inherits it.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("shell launcher: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Args = append([]string{os.Args[0], launcherArg, "inner"}, command...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{syncR}
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		AmbientCaps: []uintptr{unix.CAP_SETPCAP, unix.CAP_SYS_ADMIN},
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("shell launcher: start the inner stage: %w", err)
	}
	syncR.Close()
	if err := setDumpable(false); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("shell launcher: %w", err)
	}
	if _, err := syncW.Write([]byte{1}); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("shell launcher: %w", err)
	}
	syncW.Close()
	_ = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		// Killed too, so that the agent reports the shell killed (not by which signal: the Go runtime would
		// turn a raised SIGSEGV into a crash report on the shell's output).
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	os.Exit(ws.ExitStatus())
	return nil
}

// installFilter adds seccomp's deny list (seccomp.Filter) to the calling thread's filters; no_new_privs must
// be set.
func installFilter() error {
	prog, err := seccomp.Program()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_SECCOMP): %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}

// dropPrivileges empties the calling thread's bounding, ambient, effective, permitted and inheritable
// capability sets and sets no_new_privs.
func dropPrivileges() error {
	for c := uintptr(0); c < 64; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); errors.Is(err, unix.EINVAL) {
			break // past the last capability
		} else if err != nil {
			return fmt.Errorf("prctl(PR_CAPBSET_DROP, %d): %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_CAP_AMBIENT_CLEAR_ALL): %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	// Version 3 takes two data structs (capabilities 0-31 and 32-63), all zero: every set emptied.
	var data [2]unix.CapUserData
	if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
