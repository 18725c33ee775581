package agent

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// EtcFiles are the host /etc entries bound read-only into a sandbox: enough for the dynamic loader, user and
// host lookups, TLS roots and time zones. Nothing else of /etc is visible.
var EtcFiles = []string{"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group",
	"nsswitch.conf", "hosts", "ssl", "ca-certificates", "localtime", "mime.types"}

// SandboxEnv is the whole environment a sandbox starts with: nothing of the server's.
func SandboxEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + Workspace,
		"USER=user",
		"LANG=C.UTF-8",
		"TERM=dumb",
		"TMPDIR=/tmp",
	}
}

// PrepareWorkspace makes dir (created 0700 if missing) belong to uid:uid, every entry beneath it too, so that
// a sandbox under a new uid can use the workspace a previous one left. With searchable set, every ancestor
// of dir must be searchable by others (a launcher running as the sandbox uid, like bwrap, resolves the path).
func PrepareWorkspace(dir string, uid int, searchable bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	for d := filepath.Dir(dir); searchable; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("workspace: %s is not searchable by the sandbox uid (mode %v); make it 0711 or wider", d, fi.Mode().Perm())
		}
		if d == "/" {
			break
		}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("workspace: %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == uid {
		return nil
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, uid)
	})
	if err != nil {
		return fmt.Errorf("workspace: chown: %w", err)
	}
	return os.Chmod(dir, 0o700)
}

