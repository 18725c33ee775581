package host

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
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
	im := NewImages(filepath.Join(t.TempDir(), "images"), false)
	root, err := im.Root(img)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(root.Dirs, []string{"usr", "var"}) || !slices.Equal(root.Links, []Link{{"bin", "usr/bin"}}) || root.Dir != img {
		t.Errorf("layout: %+v", root)
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
	root, err := NewImages(filepath.Join(t.TempDir(), "images"), false).Root(img)
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
			im := NewImages(filepath.Join(t.TempDir(), "images"), false)
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
