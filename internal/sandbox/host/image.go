package host

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/corralhq/corral/internal/sandbox/agent"
)

// ImageRoot is an environment image (sandbox.HostDirs.RootFS) as the isolating backends mount it. A sandbox's
// root stays a read-only directory of mount points of the backend's own (bwrap's, or the OCI bundle's rootfs);
// each top-level directory of the image is bound on it read-only and each top-level link of the image is made
// again there, so the sandbox sees the image at / and nothing of the host's /usr, libraries or /etc, and
// nothing it writes reaches the image. /etc is a copy of the image's, taken once per image (CopyEtc: what any
// user may read), with the sandbox's own hosts, hostname and resolv.conf. /proc, /dev, /tmp, /workspace, /mnt
// (the session's files) and /.corral (the agent, the proxy socket, the CA bundle) are the sandbox's own, as
// without an image, and the CA bundle is laid over the image's system bundle.
type ImageRoot struct {
	// Dir is the image's root directory as the backend binds it: a read-only overlay of the image under the
	// provider's state directory (Images).
	Dir string
	// Dirs are the top-level directories bound read-only at /<name>: those of the image that are not empty,
	// that every uid may search and that the sandbox does not provide itself (ownDirs), /etc excepted.
	Dirs []string
	// Etc is the staged copy of the image's /etc, bound read-only at /etc.
	Etc string
	// Links are the image's top-level symbolic links (bin -> usr/bin on a merged-/usr Debian), made again in
	// the sandbox's root; they resolve in the sandbox.
	Links []Link
	// SystemCA is the image's CA bundle (SystemCABundle read inside the image), the start of the sandbox's CA
	// bundle when its egress terminates TLS; nil if the image has none. CAOverlay says it is a regular file
	// the CA bundle can be bound over.
	SystemCA  []byte
	CAOverlay bool
}

// Link is a symbolic link at /Name pointing to Target.
type Link struct{ Name, Target string }

// ownDirs are the top-level names a sandbox provides itself (or leaves out) whatever the image has there.
var ownDirs = map[string]bool{"etc": true, "dev": true, "proc": true, "sys": true, "tmp": true, "run": true, "mnt": true,
	filepath.Base(agent.Workspace): true, filepath.Base(filepath.Dir(agent.BinPath)): true, "lost+found": true}

// maxCABundle bounds the image's CA bundle read into memory (Debian's is about 200 KiB).
const maxCABundle = 8 << 20

// ErrNotImage is returned (wrapped) for a RootFS that is not a root filesystem.
var ErrNotImage = errors.New("not a root filesystem")

// readLayout reads the layout of the image at dir (sandbox.HostDirs.RootFS). Nothing of the image is followed
// out of it: links are read as links.
func readLayout(dir string) (*ImageRoot, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("image %q: %w: the path must be absolute", dir, ErrNotImage)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	root := &ImageRoot{Dir: dir}
	for _, e := range ents {
		name := e.Name()
		if ownDirs[name] {
			continue
		}
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("image: %w", err)
			}
			root.Links = append(root.Links, Link{Name: name, Target: target})
		case e.IsDir():
			fi, err := e.Info()
			if err != nil {
				return nil, fmt.Errorf("image: %w", err)
			}
			if fi.Mode().Perm()&0o005 != 0o005 { // e.g. /root: the sandbox could not list it either
				continue
			}
			if sub, err := os.ReadDir(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("image: %w", err)
			} else if len(sub) == 0 {
				continue
			}
			root.Dirs = append(root.Dirs, name)
		}
	}
	if !slices.Contains(root.Dirs, "usr") {
		return nil, fmt.Errorf("image %s: %w: no /usr", dir, ErrNotImage)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "etc")); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("image %s: %w: no /etc", dir, ErrNotImage)
	}
	return root, nil
}

// stageEtc copies the image's /etc into dst (CopyEtc) with the sandbox's own hosts, hostname and an empty
// resolv.conf (a sandbox resolves nothing: its proxy does), and reads the image's CA bundle.
func stageEtc(root *ImageRoot, rootfs, dst string) error {
	src, err := os.OpenRoot(filepath.Join(rootfs, "etc"))
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer src.Close()
	if err := CopyEtc(dst, src, nil); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	for name, content := range map[string]string{
		"hosts":       "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"hostname":    "sandbox\n",
		"resolv.conf": "",
	} {
		path := filepath.Join(dst, name)
		if err := os.RemoveAll(path); err != nil { // a plain copy: never a mount
			return fmt.Errorf("image: %w", err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	}
	root.Etc = dst
	ca := filepath.Join(dst, SystemCABundle[len("/etc/"):])
	if fi, err := os.Lstat(ca); err == nil && fi.Mode().IsRegular() && fi.Size() <= maxCABundle {
		if root.SystemCA, err = os.ReadFile(ca); err != nil {
			return fmt.Errorf("image: CA bundle: %w", err)
		}
		root.CAOverlay = true
	} else if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// A link to another file of the image: read inside the image (os.Root refuses an absolute link), not
		// bound over.
		if b, err := readImageFile(rootfs, SystemCABundle[1:], maxCABundle); err == nil {
			root.SystemCA = b
		}
	}
	return nil
}

// readImageFile reads the regular file name of the image at rootfs, links followed inside the image only, if
// it holds at most limit bytes. The image is a package script's work: the name may lead to a FIFO (an open that
// would block) or to a file of any size, neither read.
func readImageFile(rootfs, name string, limit int64) ([]byte, error) {
	r, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > limit {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", name, limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", name, limit)
	}
	return b, nil
}

// Images keeps the layouts of the images one provider's sandboxes run on, each read and staged once under a
// directory of the provider's: its /etc copied, and its root mounted as a read-only overlay (mountImage) at
// <dir>/<n>/root, which the backend binds from. An image is a content-addressed, read-only directory; one
// replaced at the same path (a new inode) is staged again. What was staged stays until Close (sandboxes hold
// mounts of their own): a few MiB per image used.
//
// The overlay is a filesystem of its own: a sandbox's mount table shows its directories' roots as /usr, /bin...
// rather than their paths on the host (a bind's root is its path from the root of its filesystem, which for an
// image is the data directory's). The image's own ancestors may be private to root too: bwrap resolves its
// bind sources as the sandbox uid.
type Images struct {
	dir   string // where images are staged
	mu    sync.Mutex
	n     int
	roots map[string]*imageEntry
}

type imageEntry struct {
	root     *ImageRoot
	dev, ino uint64
}

// NewImages returns the image cache of a provider, staging under stageDir (a directory of the provider's own).
func NewImages(stageDir string) *Images {
	return &Images{dir: stageDir, roots: map[string]*imageEntry{}}
}

// Root returns the layout of the image at rootfs ("" gives nil: no image).
func (im *Images) Root(rootfs string) (*ImageRoot, error) {
	if rootfs == "" {
		return nil, nil
	}
	if !filepath.IsAbs(rootfs) {
		return nil, fmt.Errorf("image %q: %w: the path must be absolute", rootfs, ErrNotImage)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(rootfs, &st); err != nil {
		return nil, fmt.Errorf("image %s: %w", rootfs, err)
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	if e := im.roots[rootfs]; e != nil && e.dev == uint64(st.Dev) && e.ino == st.Ino {
		return e.root, nil
	}
	root, err := readLayout(rootfs)
	if err != nil {
		return nil, err
	}
	im.n++
	dir := filepath.Join(im.dir, strconv.Itoa(im.n))
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := os.Chmod(im.dir, 0o711); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := stageEtc(root, rootfs, filepath.Join(dir, "etc")); err != nil {
		_ = os.RemoveAll(filepath.Join(dir, "etc"))
		return nil, err
	}
	staged, empty := filepath.Join(dir, "root"), filepath.Join(dir, "empty")
	for _, d := range []string{staged, empty} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	if err := mountImage(rootfs, empty, staged); err != nil {
		return nil, err
	}
	root.Dir = staged
	im.roots[rootfs] = &imageEntry{root: root, dev: uint64(st.Dev), ino: st.Ino}
	return root, nil
}

// Close detaches and removes what was staged. Idempotent.
func (im *Images) Close() error {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.roots = map[string]*imageEntry{}
	return RemoveStagedImages(im.dir)
}

// RemoveStagedImages detaches the image overlays a provider staged under dir (NewImages) and removes them and
// the copies of /etc; a provider's sweep calls it for a server that is gone. It never recurses into a bind it
// could not detach.
func RemoveStagedImages(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	var errs []error
	for _, e := range ents {
		root := filepath.Join(dir, e.Name(), "root")
		if err := syscall.Unmount(root, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("image: unmount %s: %w", root, err))
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name(), "etc")); err != nil { // a plain copy: never a mount
			errs = append(errs, fmt.Errorf("image: %w", err))
		}
		errs = append(errs, RemovePaths(root, filepath.Join(dir, e.Name(), "empty"), filepath.Join(dir, e.Name())))
	}
	errs = append(errs, RemovePaths(dir))
	return errors.Join(errs...)
}
