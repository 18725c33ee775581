package seccomp

import (
	"encoding/binary"
	"slices"
	"syscall"
	"testing"
)

// run interprets prog, as the kernel does, for a system call nr of arch with first argument arg0.
func run(t *testing.T, prog []Instruction, arch, nr uint32, arg0 uint64) uint32 {
	t.Helper()
	data := make([]byte, 64) // struct seccomp_data
	binary.LittleEndian.PutUint32(data[0:], nr)
	binary.LittleEndian.PutUint32(data[4:], arch)
	binary.LittleEndian.PutUint64(data[16:], arg0)
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case ldAbsW:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case jeqK, jsetK:
			taken := acc == in.K
			if in.Code == jsetK {
				taken = acc&in.K != 0
			}
			if taken {
				pc += int(in.JT)
			} else {
				pc += int(in.JF)
			}
		case retK:
			return in.K
		default:
			t.Fatalf("instruction %d: unknown code %#x", pc, in.Code)
		}
	}
	t.Fatal("program ran off its end")
	return 0
}

func TestFilter(t *testing.T) {
	prog := Filter()
	if len(prog) > 4096 {
		t.Fatalf("%d instructions, more than BPF_MAXINSNS", len(prog))
	}
	const x86 = AuditArchX86_64
	errno := func(e syscall.Errno) uint32 { return RetErrno | uint32(e) }
	for _, r := range Rules {
		for _, n := range r.Names {
			if got := run(t, prog, x86, amd64[n], 0); got != errno(r.Errno) {
				t.Errorf("%s: %#x, want errno %d", n, got, r.Errno)
			}
		}
	}
	for _, c := range []struct {
		name     string
		arch, nr uint32
		arg0     uint64
		want     uint32
	}{
		{"read", x86, 0, 0, RetAllow},
		{"execve", x86, 59, 0, RetAllow},
		{"ptrace", x86, 101, 0, RetAllow},
		{"thread clone", x86, 56, 0x3d0f00, RetAllow},
		{"fork clone", x86, 56, 0x01200011, RetAllow},
		{"clone newuser", x86, 56, CloneNewUser | 17, errno(syscall.EPERM)},
		{"clone newuser, high bits set", x86, 56, 1<<40 | CloneNewUser, errno(syscall.EPERM)},
		{"clone3", x86, 435, 0, errno(syscall.ENOSYS)},
		{"x32 unshare", x86, X32Bit | 272, 0, errno(syscall.ENOSYS)},
		{"x32 read", x86, X32Bit, 0, errno(syscall.ENOSYS)},
		{"i386 unshare", 0x40000003, 310, 0, RetKillProcess},
		{"i386 read", 0x40000003, 3, 0, RetKillProcess},
		{"aarch64", 0xc00000b7, 97, 0, RetKillProcess},
		{"unlisted number", x86, 1000, 0, RetAllow},
	} {
		if got := run(t, prog, c.arch, c.nr, c.arg0); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
}

// TestEncode checks the struct sock_filter layout: code, jt, jf, k, little-endian.
func TestEncode(t *testing.T) {
	b := Encode([]Instruction{{Code: jeqK, JT: 1, JF: 2, K: 0xc000003e}, {Code: retK, K: RetAllow}})
	want := []byte{0x15, 0, 1, 2, 0x3e, 0, 0, 0xc0, 0x06, 0, 0, 0, 0, 0, 0xff, 0x7f}
	if string(b) != string(want) {
		t.Errorf("Encode = % x, want % x", b, want)
	}
}

// TestOCIProfile checks that the OCI profile carries every rule, and the clone check and clone3 unless allowed.
func TestOCIProfile(t *testing.T) {
	names := func(p map[string]any) map[string]int {
		m := map[string]int{}
		for _, s := range p["syscalls"].([]map[string]any) {
			for _, n := range s["names"].([]string) {
				m[n] = s["errnoRet"].(int)
			}
		}
		return m
	}
	got := names(OCIProfile(false, false))
	for _, r := range Rules {
		for _, n := range r.Names {
			if got[n] != int(r.Errno) {
				t.Errorf("%s: errno %d, want %d", n, got[n], r.Errno)
			}
		}
	}
	if got["clone"] != int(syscall.EPERM) || got["clone3"] != int(syscall.ENOSYS) {
		t.Errorf("clone %d, clone3 %d", got["clone"], got["clone3"])
	}
	if got := names(OCIProfile(true, false)); got["clone3"] != 0 || got["clone"] != int(syscall.EPERM) {
		t.Errorf("allowClone3: clone %d, clone3 %d, want clone3 allowed only", got["clone"], got["clone3"])
	}
	if got := names(OCIProfile(true, true)); got["clone3"] != 0 || got["clone"] != 0 || got["unshare"] != int(syscall.EPERM) {
		t.Errorf("shellLauncher: clone %d, clone3 %d, unshare %d, want only clone and clone3 allowed", got["clone"], got["clone3"], got["unshare"])
	}
	// Under shellLauncher mount is refused unless its flags are exactly ProcMountFlags.
	var mounts []map[string]any
	for _, sc := range OCIProfile(true, true)["syscalls"].([]map[string]any) {
		if slices.Contains(sc["names"].([]string), "mount") {
			mounts = append(mounts, sc)
		}
	}
	if len(mounts) != 1 {
		t.Fatalf("shellLauncher: %d rules name mount, want 1", len(mounts))
	}
	args, _ := mounts[0]["args"].([]map[string]any)
	if len(args) != 1 || args[0]["index"] != 3 || args[0]["value"] != ProcMountFlags || args[0]["op"] != "SCMP_CMP_NE" || mounts[0]["errnoRet"] != int(syscall.EPERM) {
		t.Errorf("shellLauncher: mount rule %v, want EPERM unless flags == ProcMountFlags", mounts[0])
	}
}
