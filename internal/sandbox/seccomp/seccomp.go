// Package seccomp owns the system-call policy of the isolating sandboxes: one deny list (Rules), rendered as
// an OCI runtime-spec profile for runc and runsc (OCIProfile) and compiled to a classic BPF program for
// bubblewrap's --seccomp (Program).
//
// Every system call is allowed except those that reach kernel attack surface a sandbox has no use for: new
// user namespaces (clone with CLONE_NEWUSER, unshare, clone3, which glibc then replaces with clone), joining
// namespaces, mounting, keyrings, BPF, perf, userfaultfd, io_uring, modules and kexec. Without it a sandboxed
// process can create a user namespace of its own and hold every capability in it.
package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"syscall"
)

// Rule refuses the system calls Names with Errno.
type Rule struct {
	Names []string
	Errno syscall.Errno
}

// CloneNewUser is clone's flag for a new user namespace; clone with it is refused with EPERM.
const CloneNewUser = 0x10000000

// Rules is the deny list; clone with CloneNewUser and clone3 are refused besides (clone3's flags sit in a
// struct seccomp cannot read, so it is refused whole with ENOSYS, which makes glibc fall back to clone, whose
// flags are checked).
var Rules = []Rule{{Errno: syscall.EPERM, Names: []string{
	"unshare", "setns", "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
	"fsmount", "fsconfig", "fspick", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
	"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog",
}}}

// ProcMountFlags are the flags of the one mount a shell launcher makes (OCIProfile's shellLauncher): a proc
// file system for its pid namespace, nosuid, nodev and noexec.
const ProcMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC

// OCIProfile is the deny list as an OCI runtime-spec linux.seccomp object. allowClone3 leaves clone3
// allowed (for runtimes that need it; see oci.Config.AllowClone3). shellLauncher allows what the agent's shell
// launcher needs under gVisor, whose namespaces are its own kernel's (oci.Config.ShellNamespace): clone with
// CloneNewUser, and mount with exactly ProcMountFlags. The launcher puts the whole deny list (Filter) back on
// the shell before it starts it.
func OCIProfile(allowClone3, shellLauncher bool) map[string]any {
	var syscalls []map[string]any
	for _, r := range Rules {
		names := r.Names
		if shellLauncher {
			names = nil
			for _, n := range r.Names {
				if n != "mount" {
					names = append(names, n)
				}
			}
			if len(names) < len(r.Names) {
				syscalls = append(syscalls, map[string]any{
					"names": []string{"mount"}, "action": "SCMP_ACT_ERRNO", "errnoRet": int(r.Errno),
					"args": []map[string]any{{"index": 3, "value": ProcMountFlags, "op": "SCMP_CMP_NE"}},
				})
			}
		}
		syscalls = append(syscalls, map[string]any{"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": int(r.Errno)})
	}
	if !shellLauncher {
		syscalls = append(syscalls, map[string]any{
			"names": []string{"clone"}, "action": "SCMP_ACT_ERRNO", "errnoRet": int(syscall.EPERM),
			"args": []map[string]any{{"index": 0, "value": CloneNewUser, "valueTwo": CloneNewUser, "op": "SCMP_CMP_MASKED_EQ"}},
		})
	}
	if !allowClone3 {
		syscalls = append(syscalls, map[string]any{"names": []string{"clone3"}, "action": "SCMP_ACT_ERRNO", "errnoRet": int(syscall.ENOSYS)})
	}
	return map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"architectures": []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64"},
		"syscalls":      syscalls,
	}
}

// The x86_64 system call numbers of the deny list (arch/x86/entry/syscalls/syscall_64.tbl).
var amd64 = map[string]uint32{
	"unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "move_mount": 429,
	"open_tree": 428, "fsopen": 430, "fsmount": 432, "fsconfig": 431, "fspick": 433, "keyctl": 250,
	"add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
	"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 246,
	"kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
	"open_by_handle_at": 304, "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163, "quotactl": 179,
	"syslog": 103, "clone": 56, "clone3": 435,
}

// Classic BPF as seccomp reads it (linux/filter.h, linux/seccomp.h, linux/audit.h).
const (
	ldAbsW  = 0x20 // BPF_LD | BPF_W | BPF_ABS
	jeqK    = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	jsetK   = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	retK    = 0x06 // BPF_RET | BPF_K
	offNR   = 0    // seccomp_data.nr
	offArch = 4    // seccomp_data.arch
	offArg0 = 16   // the low half of seccomp_data.args[0] (little-endian)

	// AuditArchX86_64 is seccomp_data.arch for x86_64 system calls.
	AuditArchX86_64 = 0xc000003e
	// X32Bit marks a system call of the x32 ABI in seccomp_data.nr.
	X32Bit = 0x40000000

	// RetKillProcess, RetErrno and RetAllow are seccomp filter return values (RetErrno | errno).
	RetKillProcess = 0x80000000
	RetErrno       = 0x00050000
	RetAllow       = 0x7fff0000
)

// Instruction is one classic BPF instruction (struct sock_filter).
type Instruction struct {
	Code   uint16
	JT, JF uint8
	K      uint32
}

// Filter compiles the deny list for x86_64: a system call of any other architecture kills the process, one
// of the x32 ABI fails with ENOSYS, the rules' calls fail with their errno, clone with CloneNewUser with
// EPERM and clone3 with ENOSYS; everything else is allowed.
func Filter() []Instruction {
	ret := func(k uint32) Instruction { return Instruction{Code: retK, K: k} }
	prog := []Instruction{
		{Code: ldAbsW, K: offArch},
		{Code: jeqK, JT: 1, K: AuditArchX86_64},
		ret(RetKillProcess),
		{Code: ldAbsW, K: offNR},
		{Code: jsetK, JF: 1, K: X32Bit},
		ret(RetErrno | uint32(syscall.ENOSYS)),
	}
	deny := func(name string, errno syscall.Errno) {
		nr, ok := amd64[name]
		if !ok {
			panic("seccomp: no x86_64 number for " + name)
		}
		// Each test skips its own return when the number differs: no jump is longer than one instruction.
		prog = append(prog, Instruction{Code: jeqK, JF: 1, K: nr}, ret(RetErrno|uint32(errno)))
	}
	for _, r := range Rules {
		for _, n := range r.Names {
			deny(n, r.Errno)
		}
	}
	deny("clone3", syscall.ENOSYS)
	// clone last: it replaces the number in the accumulator by the flags.
	return append(prog,
		Instruction{Code: jeqK, JF: 3, K: amd64["clone"]},
		Instruction{Code: ldAbsW, K: offArg0},
		Instruction{Code: jsetK, JF: 1, K: CloneNewUser},
		ret(RetErrno|uint32(syscall.EPERM)),
		ret(RetAllow),
	)
}

// Program is Filter encoded as the array of struct sock_filter that bubblewrap's --seccomp reads. It fails on
// hosts that are not x86_64, for which there is no filter: sandboxes there must not start without one.
func Program() ([]byte, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("seccomp: no filter for %s: %w", runtime.GOARCH, errors.ErrUnsupported)
	}
	return Encode(Filter()), nil
}

// Encode lays prog out as struct sock_filter in the host's (little-endian) byte order.
func Encode(prog []Instruction) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.LittleEndian.AppendUint16(b, in.Code)
		b = append(b, in.JT, in.JF)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}
