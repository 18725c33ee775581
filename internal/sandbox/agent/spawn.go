package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// SpawnArg, as the agent's first argument followed by a descriptor's number, makes it a start kept ready on the
// host (internal/sandbox/bwrap): started as root before any sandbox needs it and moved into a sandbox's cgroups
// while nothing waits for it, it reads a SpawnRequest from the descriptor, drops to the request's uid and
// becomes the request's program (bubblewrap), whose processes are then born in those groups: the sandbox's start
// need not move them there, which waits out an RCU grace period in the kernel. The descriptor is closed first;
// the process's other descriptors pass to the program. At end of input with no request (the server is gone, or
// dropped the start) it exits.
//
// With SpawnLoopback after the descriptor, it first brings up the loopback interface of its network namespace:
// the server starts it in a new one, made while nothing waits, and bwrap then keeps it (--share-net) instead of
// making one in the sandbox's start (0.5 to 3 ms of it by the VM, docs/benchmarks.md, stops 57 and 58).
const SpawnArg = "spawn"

// SpawnLoopback is the spawn mode's option to bring up the loopback interface before waiting.
const SpawnLoopback = "loopback"

// SpawnRequest is what a start kept ready becomes.
type SpawnRequest struct {
	Path string   `json:"path"` // the program, absolute
	Args []string `json:"args"` // its argv, from argv[0]
	Env  []string `json:"env"`  // its whole environment
	UID  int      `json:"uid"`  // the uid and gid it runs as, with no supplementary groups
	GID  int      `json:"gid"`
}

// spawnMax bounds a request: it carries only the sandbox's environment and a short argv.
const spawnMax = 1 << 20

func spawn(args []string) int {
	if err := runSpawn(args); err != nil {
		fmt.Fprintln(os.Stderr, "corral-sandbox-agent: spawn:", err)
		return 1
	}
	return 0
}

func runSpawn(args []string) error {
	if len(args) < 1 || len(args) > 2 || len(args) == 2 && args[1] != SpawnLoopback {
		return errors.New("usage: spawn FD [" + SpawnLoopback + "]")
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 3 {
		return fmt.Errorf("bad descriptor %q", args[0])
	}
	if len(args) == 2 {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("loopback: %w", err)
		}
	}
	// The parent-death signal the server set is cleared when the uid changes: it is set again on this thread,
	// the one that execs, so that bwrap dies with the server until its own --die-with-parent.
	runtime.LockOSThread()
	ppid := os.Getppid()
	f := os.NewFile(uintptr(fd), "spawn")
	data, err := io.ReadAll(io.LimitReader(f, spawnMax))
	f.Close()
	if err != nil {
		return err
	}
	req, err := parseSpawn(data)
	if err != nil {
		return err
	}
	// The groups first: once the uid is dropped they cannot be set.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(req.GID); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(req.UID); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); errno != 0 {
		return fmt.Errorf("prctl: %w", errno)
	}
	if os.Getppid() != ppid {
		return errors.New("the server is gone")
	}
	return syscall.Exec(req.Path, req.Args, req.Env)
}

// loopbackUp brings up the interface lo; the kernel gives it 127.0.0.1/8 and ::1 as it comes up.
func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}

// parseSpawn reads a request, refusing one that is empty, names no program or asks for root.
func parseSpawn(data []byte) (SpawnRequest, error) {
	var req SpawnRequest
	if len(data) == 0 {
		return req, errors.New("no request")
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return req, err
	}
	if req.Path == "" || len(req.Args) == 0 || req.UID <= 0 || req.GID <= 0 {
		return req, errors.New("incomplete request")
	}
	return req, nil
}
