package host

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/egress"
)

// Kit is one provider's host kit: the uids its sandboxes run as, the directory it stages them in, and the
// images they run on. A backend fills it in New and calls Stage in each Provision.
type Kit struct {
	// UIDBase and UIDCount are the host uids (and gids) the sandboxes run as, one per live sandbox.
	UIDBase, UIDCount int
	// StateDir is the provider's directory: each sandbox gets StateDir/<Prefix><random>.
	StateDir string
	// Prefix starts a sandbox's name ("bwrap-", "corral-"): its directory, and the backend's cgroup or
	// container, are named for it.
	Prefix string
	// Images stages the images sandboxes run on (sandbox.HostDirs.RootFS).
	Images *Images
	// Logger is given to each sandbox's egress proxy; default discards.
	Logger *slog.Logger
}

// Staged is what Stage prepared on the host for one sandbox: what a backend needs to start it.
type Staged struct {
	// Name is the sandbox's name: Kit.Prefix and a random suffix.
	Name string
	// Dir is the sandbox's directory under Kit.StateDir (root's, mode 0711): the backend stages its own files
	// and mount points here.
	Dir string
	// UID is the sandbox's host uid (and gid); the workspace and the session's outputs belong to it.
	UID int
	// Workspace is the host directory bound at agent.Workspace (sandbox.HostDirs.Workspace).
	Workspace string
	// Image is the image the sandbox runs on; nil: the host's /usr and a minimal /etc.
	Image *ImageRoot
	// CorralDir is Dir/corral, the sandbox uid's (0700): the egress proxy's socket and the CA bundle are in it,
	// and a backend may bind it at /.corral whole (bwrap) or its files one by one (oci).
	CorralDir string
	// Socket is the egress proxy's Unix socket (CorralDir/proxy.sock), bound at agent.ProxySocketPath; only
	// the sandbox uid can connect to it.
	Socket string
	// CAFile is the sandbox's CA bundle (CorralDir/ca.pem, root's, 0444), bound at CABundlePath and at each of
	// CAOverlays; "" when the sandbox's egress terminates no TLS.
	CAFile     string
	CAOverlays []string
	// Mounts are the binds of the session's files (SessionMounts).
	Mounts []Mount
	// Env is the whole environment the sandbox starts with (EnvFor).
	Env []string
	// Limits are the recipe's limits with the defaults filled in (WithDefaults).
	Limits sandbox.Limits

	undo Undo
}

// Stage claims and stages everything a sandbox for r needs on the host, with its files in dirs, in this
// order: a uid of its own (the workspace and the session directory given to it: Claim), the image root, the
// sandbox's directory, the CA bundle, the session mounts and the egress listener (a Unix socket: the kit
// serves only backends with sandbox.EgressUnixSocket). On an error, what was done is undone. The caller calls
// Release if it fails to start the sandbox, and gives Teardown to the sandbox's Close otherwise.
func (k *Kit) Stage(r *sandbox.Recipe, dirs sandbox.HostDirs) (_ *Staged, err error) {
	uid, undo, err := Claim(r, dirs, k.UIDBase, k.UIDCount)
	if err != nil {
		return nil, err
	}
	st := &Staged{UID: uid, Workspace: dirs.Workspace, Mounts: SessionMounts(r, dirs), Env: EnvFor(r.Egress),
		Limits: WithDefaults(r.Limits), undo: undo}
	defer func() {
		if err != nil {
			st.Release()
		}
	}()
	if st.Image, err = k.Images.Root(dirs.RootFS); err != nil {
		return nil, err
	}
	if err := st.makeDirs(k.StateDir, k.Prefix); err != nil {
		return nil, err
	}
	if err := st.writeCABundle(r.Egress); err != nil {
		return nil, err
	}
	logger := cmpLogger(k.Logger).With("sandbox", st.Name, "session", r.SessionID)
	proxy, err := egress.Listen(egress.Config{Path: st.Socket, UID: uid, GID: uid,
		Policy: egress.PolicyFor(r.Environment.Networking), Egress: r.Egress, Logger: logger})
	if err != nil {
		return nil, err
	}
	st.Add(proxy.Close)
	return st, nil
}

// makeDirs makes the sandbox's directory (root's, 0711) and its corral directory (the uid's, 0700).
func (st *Staged) makeDirs(stateDir, prefix string) error {
	st.Name = prefix + randomID()
	st.Dir = filepath.Join(stateDir, st.Name)
	if err := os.Mkdir(st.Dir, 0o711); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	st.Add(func() error { return removeBox(st.Dir) })
	st.CorralDir = filepath.Join(st.Dir, "corral")
	if err := os.Mkdir(st.CorralDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chown(st.CorralDir, st.UID, st.UID); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	st.Socket = filepath.Join(st.CorralDir, filepath.Base(agent.ProxySocketPath))
	return nil
}

// writeCABundle writes the sandbox's CA bundle (CABundle), if its egress has a CA: root's file in the sandbox
// uid's directory, readable, not writable.
func (st *Staged) writeCABundle(eg *sandbox.Egress) error {
	bundle, err := CABundle(st.Image, eg)
	if err != nil || bundle == nil {
		return err
	}
	st.CAFile = filepath.Join(st.CorralDir, filepath.Base(CABundlePath))
	if err := os.WriteFile(st.CAFile, bundle, 0o444); err != nil {
		return fmt.Errorf("ca bundle: %w", err)
	}
	st.CAOverlays = CABundleOverlays(st.Image)
	return nil
}

// Add records a teardown step of the backend's (a mount, a cgroup, the started process): Release and
// Teardown run it before the steps recorded earlier.
func (st *Staged) Add(f func() error) { st.undo.Add(f) }

// Release undoes everything, newest first, after the backend failed to start the sandbox.
func (st *Staged) Release() { st.undo.Run() }

// Teardown are the steps for the started sandbox's Close, newest first (NewSandbox's teardown).
func (st *Staged) Teardown() []func() error { return st.undo.Reversed() }

// removeBox removes a sandbox's directory, unless something is still mounted beneath it: a workspace still
// bound there must make it fail rather than lose the workspace's files.
func removeBox(dir string) error {
	if m := MountsUnder(dir); len(m) > 0 {
		return fmt.Errorf("remove %s: %s is still mounted", dir, m[0])
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove state: %w", err)
	}
	return nil
}

func cmpLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// randomID is 16 hex digits from crypto/rand.
func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Claim starts what every isolating backend's Provision does first: it checks the workspace path, takes a uid
// of the sandbox's own (for r's session) from [base, base+count) and gives dirs' workspace, outputs and
// read_write memory stores to it. The returned Undo frees the uid.
func Claim(r *sandbox.Recipe, dirs sandbox.HostDirs, base, count int) (int, Undo, error) {
	if !filepath.IsAbs(dirs.Workspace) {
		return 0, nil, fmt.Errorf("workspace %q must be an absolute path", dirs.Workspace)
	}
	uid, err := AllocUID(base, count, r.SessionID)
	if err != nil {
		return 0, nil, err
	}
	undo := Undo{func() error { FreeUID(uid); return nil }}
	if err := PrepareWorkspace(dirs.Workspace, uid); err != nil {
		undo.Run()
		return 0, nil, err
	}
	if err := PrepareSessionDir(r, dirs, uid); err != nil {
		undo.Run()
		return 0, nil, err
	}
	return uid, undo, nil
}
