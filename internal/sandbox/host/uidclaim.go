package host

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// UIDClaimDir holds the host-wide claims of sandbox uids: a file per uid, flocked by the process whose sandbox
// runs under it. Every Corral process on the host (serve, harness, worker, whatever their --sandbox-uids)
// claims a uid there before using it and skips one another holds, so two processes never give two sandboxes
// one uid. A claim is released with FreeUID, and by the kernel when its process dies: a crash leaves a file and
// no lock, and the next claim of that uid takes it. A variable for tests only.
var UIDClaimDir = "/run/corral-uids"

// uidClaims are the claim files this process holds, by uid (under uids' lock).
var uidClaims = map[int]*os.File{}

// claimUID takes the host-wide claim of uid; false if another process holds it. Where the claims cannot be
// kept (no /run, not root), it claims nothing and says yes: the process then has its range to itself only by
// configuration, as before.
func claimUID(uid int) bool {
	if err := os.MkdirAll(UIDClaimDir, 0o700); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(UIDClaimDir, strconv.Itoa(uid)), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return true
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return !errors.Is(err, unix.EWOULDBLOCK)
	}
	uidClaims[uid] = f
	return true
}

// releaseUID drops this process's claim of uid. The file stays: removing it could let two processes lock two
// different files of one name.
func releaseUID(uid int) {
	if f := uidClaims[uid]; f != nil {
		f.Close()
		delete(uidClaims, uid)
	}
}
