package host

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeImage writes a small root filesystem: a merged /usr, an /etc with a secret only root may read, a link
// out of the image, and the directories an image has but a sandbox leaves out.
func fakeImage(t *testing.T, ca func(etc string)) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "var/lib/dpkg", "etc/ssl/certs", "home", "proc", "tmp", "workspace"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for path, mode := range map[string]os.FileMode{"usr/bin/tool": 0o755, "var/lib/dpkg/status": 0o644, "etc/passwd": 0o644, "etc/shadow": 0o640, "etc/hosts": 0o644} {
		if err := os.WriteFile(filepath.Join(root, path), []byte(path), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "root"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "root", "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"bin": "usr/bin", "etc/escape": "/etc/passwd"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	ca(filepath.Join(root, "etc"))
	return root
}

func TestImages(t *testing.T) {
	img := fakeImage(t, func(etc string) {
		if err := os.WriteFile(filepath.Join(etc, "ssl/certs/ca-certificates.crt"), []byte("image roots\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	stage := filepath.Join(t.TempDir(), "images")
	im := NewImages(stage)
	t.Cleanup(func() { _ = im.Close() })
	root, err := im.Root(img)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(root.Dirs, []string{"usr", "var"}) || !slices.Equal(root.Links, []Link{{"bin", "usr/bin"}}) || root.Dir != filepath.Join(stage, "1", "root") {
		t.Errorf("layout: %+v", root)
	}
	// The image is staged as a read-only overlay of its own: its mount names neither the image's path nor the
	// staging directory, in its root or its options.
	if b, err := os.ReadFile(filepath.Join(root.Dir, "etc", "passwd")); err != nil || string(b) != "etc/passwd" {
		t.Errorf("the image through its overlay: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(root.Dir, "usr", "new"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write to the staged image: %v, want EROFS", err)
	}
	line := mountLine(t, root.Dir)
	_, super, _ := strings.Cut(line, " - ")
	if f := strings.Fields(line); f[3] != "/" || !strings.HasPrefix(super, "overlay overlay ro,") || strings.Contains(super, img) || strings.Contains(super, stage) {
		t.Errorf("the staged image's mount: %s", line)
	}
	if string(root.SystemCA) != "image roots\n" || !root.CAOverlay {
		t.Errorf("CA bundle: %q %v", root.SystemCA, root.CAOverlay)
	}
	if b, err := os.ReadFile(filepath.Join(root.Etc, "passwd")); err != nil || string(b) != "etc/passwd" {
		t.Errorf("passwd: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(root.Etc, "shadow")); err == nil {
		t.Error("the image's shadow file was copied")
	}
	if b, _ := os.ReadFile(filepath.Join(root.Etc, "hosts")); !slices.Contains([]string{"127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"}, string(b)) {
		t.Errorf("hosts is not the sandbox's: %q", b)
	}
	if target, err := os.Readlink(filepath.Join(root.Etc, "escape")); err != nil || target != "/etc/passwd" {
		t.Errorf("a link was not kept as a link: %q %v", target, err)
	}
	// Cached, until the image is replaced at its path.
	if again, err := im.Root(img); err != nil || again != root {
		t.Errorf("not cached: %v", err)
	}
	if err := os.Rename(img, img+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(img, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := im.Root(img); !errors.Is(err, ErrNotImage) {
		t.Errorf("an empty directory replacing the image: %v", err)
	}
	if err := im.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(root.Etc))); err == nil {
		t.Error("Close left the staged /etc")
	}
	if m := MountsUnder(stage); len(m) > 0 {
		t.Errorf("Close left mounts: %v", m)
	}
	if _, err := im.Root("relative/rootfs"); !errors.Is(err, ErrNotImage) {
		t.Errorf("a relative path: %v", err)
	}
}

// TestImagesCALink: a CA bundle that is a link out of the image is never read from the host.
func TestImagesCALink(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := fakeImage(t, func(etc string) {
		if err := os.Symlink(secret, filepath.Join(etc, "ssl/certs/ca-certificates.crt")); err != nil {
			t.Fatal(err)
		}
	})
	im := NewImages(filepath.Join(t.TempDir(), "images"))
	t.Cleanup(func() { _ = im.Close() })
	root, err := im.Root(img)
	if err != nil {
		t.Fatal(err)
	}
	if root.SystemCA != nil || root.CAOverlay {
		t.Errorf("the host's file was read: %q %v", root.SystemCA, root.CAOverlay)
	}
	if b, err := CABundle(root, nil); err != nil || b != nil {
		t.Errorf("CABundle without a CA: %q %v", b, err)
	}
}

// TestImagesHostileCALink: a package script controls the image, and so where its CA bundle's link points. A
// link to a FIFO must not hang the staging (which holds the provider's image lock: every sandbox would wait),
// nor one to a huge file be read into the server's memory; the image is staged without a system CA.
func TestImagesHostileCALink(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, usr string) string{
		"fifo": func(t *testing.T, usr string) string {
			p := filepath.Join(usr, "fifo")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return "../../../usr/fifo"
		},
		"huge": func(t *testing.T, usr string) string {
			f, err := os.Create(filepath.Join(usr, "huge"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(maxCABundle + 1); err != nil {
				t.Fatal(err)
			}
			return "../../../usr/huge"
		},
	} {
		t.Run(name, func(t *testing.T) {
			img := fakeImage(t, func(etc string) {
				target := plant(t, filepath.Join(filepath.Dir(etc), "usr"))
				if err := os.Symlink(target, filepath.Join(etc, "ssl/certs/ca-certificates.crt")); err != nil {
					t.Fatal(err)
				}
			})
			im := NewImages(filepath.Join(t.TempDir(), "images"))
			t.Cleanup(func() { _ = im.Close() })
			done := make(chan error, 1)
			var root *ImageRoot
			go func() {
				var err error
				root, err = im.Root(img)
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				// Unblock the staging's open of the FIFO so that the test ends.
				if f, err := os.OpenFile(filepath.Join(img, "usr", "fifo"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				t.Fatal("staging an image whose CA bundle links to a FIFO hangs")
			}
			if root.SystemCA != nil || root.CAOverlay {
				t.Errorf("CA bundle of a link to a %s: %d bytes, overlay %v; want none", name, len(root.SystemCA), root.CAOverlay)
			}
		})
	}
}

// mountLine is the line of /proc/self/mountinfo of the topmost mount at dir.
func mountLine(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for l := range strings.Lines(string(data)) {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatalf("nothing mounted at %s", dir)
	}
	return line
}

// TestMountState: a state directory is a tmpfs of its own, so that what is staged in it shows in a bind's
// mountinfo root as its path in the tmpfs; mounting it again replaces the one a crashed server left rather
// than stacking another, and a tmpfs an operator mounted there is never detached.
func TestMountState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = UnmountState(dir) })
	for range 2 {
		if err := MountState(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "staged"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(mountinfo(t), " "+dir+" "); n != 1 {
		t.Errorf("%d mounts at the state directory, want 1", n)
	}
	if f := strings.Fields(mountLine(t, dir)); f[3] != "/" {
		t.Errorf("state mount: %v", f)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("state dir mode: %v %v", fi.Mode(), err)
	}
	// A bind of a staged file shows its path in the tmpfs, not the state directory's.
	dst := filepath.Join(t.TempDir(), "bound")
	if err := os.WriteFile(dst, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := BindMount(filepath.Join(dir, "staged"), dst, true); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(mountLine(t, dst)); f[3] != "/staged" {
		t.Errorf("bind of a staged file: root %q, want /staged", f[3])
	}
	if err := Unmount(dst); err != nil {
		t.Fatal(err)
	}
	if err := UnmountState(dir); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(mountinfo(t), " "+dir+" ") {
		t.Error("UnmountState left the tmpfs")
	}
	// An operator's own tmpfs is not a state tmpfs.
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unmount(dir) })
	if err := UnmountState(dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mountinfo(t), " "+dir+" ") {
		t.Error("UnmountState detached a tmpfs it did not mount")
	}
}

func mountinfo(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
