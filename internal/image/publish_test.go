package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestLayersRoundTrip pushes an image of two layers, a base and a tree made from it as a build's flatten makes
// one (the base's files hard-linked, some replaced, some removed, a directory become a file, new files with two
// names, directories become files or links, entries become pipes, set-id and sticky bits), to a registry
// (go-containerregistry's, over HTTP), pulls it back and checks that its filesystem, the layers applied with
// their whiteouts (by go-containerregistry's mutate.Extract, as a runtime unpacks them), is the tree: the same
// entries, kinds, modes, owners, targets and bytes, pipes left out.
func TestLayersRoundTrip(t *testing.T) {
	base, root := t.TempDir(), t.TempDir()
	write := func(dir, rel, data string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	mkdir := func(dir, rel string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(base, "usr/bin/kept", "kept", 0o755)
	write(base, "usr/bin/replaced", "old", 0o755)
	write(base, "usr/bin/removed", "gone", 0o644)
	write(base, "etc/removed-dir/a", "a", 0o644)
	write(base, "etc/removed-dir/sub/b", "b", 0o644)
	write(base, "var/became-file/c", "c", 0o644)
	write(base, "var/owned", "owned", 0o640)
	if err := os.Chown(filepath.Join(base, "var/owned"), 0, 8); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("kept", filepath.Join(base, "usr/bin/link")); err != nil {
		t.Fatal(err)
	}
	write(base, "usr/bin/suid", "s", 0o755)
	if err := os.Chmod(filepath.Join(base, "usr/bin/suid"), 0o4755); err != nil {
		t.Fatal(err)
	}
	mkdir(base, "tmp")
	if err := os.Chmod(filepath.Join(base, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	write(base, "srv/file-became-dir", "f", 0o644)
	write(base, "srv/dir-became-link/x", "x", 0o644)
	write(base, "srv/file-became-fifo", "f", 0o644)
	write(base, "srv/dir-became-fifo/y", "y", 0o644)
	if err := os.Link(filepath.Join(base, "usr/bin/kept"), filepath.Join(base, "usr/bin/kept-too")); err != nil {
		t.Fatal(err)
	}
	var baseBefore bytes.Buffer // the base's layer before the tree links its files (their link counts change)
	if err := WriteLayer(context.Background(), &baseBefore, base, ""); err != nil {
		t.Fatal(err)
	}
	// The tree: base's directories made anew, its files linked, then the build's changes.
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(root, rel), 0o755)
		}
		return os.Link(p, filepath.Join(root, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"usr/bin/replaced", "usr/bin/removed", "var/became-file"} {
		if err := os.RemoveAll(filepath.Join(root, rel)); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"etc/removed-dir", "srv/file-became-dir", "srv/dir-became-link", "srv/file-became-fifo", "srv/dir-became-fifo"} {
		if err := os.RemoveAll(filepath.Join(root, rel)); err != nil {
			t.Fatal(err)
		}
	}
	write(root, "srv/file-became-dir/inside", "in", 0o644)
	if err := os.Symlink("/usr", filepath.Join(root, "srv/dir-became-link")); err != nil {
		t.Fatal(err)
	}
	// A pipe is of no layer: what it replaced is gone from the image, and it is not there.
	for _, rel := range []string{"srv/file-became-fifo", "srv/dir-became-fifo"} {
		if err := syscall.Mkfifo(filepath.Join(root, rel), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(root, "usr/bin/replaced", "new", 0o755)
	write(root, "var/became-file", "now a file", 0o600)
	write(root, "usr/lib/new/lib.so", strings.Repeat("x", 100_000), 0o644)
	mkdir(root, "opt/empty")
	if err := os.Link(filepath.Join(root, "usr/lib/new/lib.so"), filepath.Join(root, "usr/lib/new/lib.so.1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "usr/lib/new/lib.so"), 1234, 5678); err != nil {
		t.Fatal(err)
	}

	// The same tree gives the same bytes, whatever links to its files.
	var baseAfter bytes.Buffer
	if err := WriteLayer(context.Background(), &baseAfter, base, ""); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(baseBefore.Bytes(), baseAfter.Bytes()) {
		t.Error("the base's layer changed when another tree linked its files")
	}
	var a, b bytes.Buffer
	if err := WriteLayer(context.Background(), &a, root, base); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayer(context.Background(), &b, root, base); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two layers of the same tree differ")
	}
	if names := tarNames(t, a.Bytes()); slices.Contains(names, "usr/bin/kept") || !slices.Contains(names, "usr/bin/.wh.removed") ||
		!slices.Contains(names, "etc/.wh.removed-dir") || slices.Contains(names, "etc/removed-dir/.wh.a") {
		t.Errorf("the changes' layer holds %q", names)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(registry.NewDiskBlobHandler(t.TempDir()))))
	defer srv.Close()
	repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "http://") + "/corral/env")
	if err != nil {
		t.Fatal(err)
	}
	baseLayer, err := treeLayer(base, "")
	if err != nil {
		t.Fatal(err)
	}
	diff, err := treeLayer(root, base)
	if err != nil {
		t.Fatal(err)
	}
	img, err := imageOf(baseLayer, diff)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(repo.Tag("t"), img); err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(repo.Digest(d.String()))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := pulled.ConfigFile()
	if err != nil || cf.OS != "linux" || len(cf.RootFS.DiffIDs) != 2 {
		t.Fatalf("pulled image's config: %v, %+v", err, cf)
	}
	got := extracted(t, mutate.Extract(pulled))
	want := treeEntries(t, root)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("%s: image has %q, tree has %q", k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: in the image (%q), not in the tree", k, got[k])
		}
	}
}

// tarNames are the entry names of a tar.
func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, strings.TrimSuffix(h.Name, "/"))
	}
}

// extracted describes each entry of a flattened image's tar, as treeEntries does a tree's.
func extracted(t *testing.T, rc io.ReadCloser) map[string]string {
	t.Helper()
	defer rc.Close()
	out := map[string]string{}
	bodies := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		n := strings.TrimSuffix(h.Name, "/")
		switch h.Typeflag {
		case tar.TypeDir:
			out[n] = fmt.Sprintf("dir %o %d:%d", h.Mode&0o7777, h.Uid, h.Gid)
		case tar.TypeSymlink:
			out[n] = "link " + h.Linkname
		case tar.TypeLink:
			out[n] = bodies[h.Linkname]
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			bodies[n] = fmt.Sprintf("file %o %d:%d %x", h.Mode&0o7777, h.Uid, h.Gid, sha256.Sum256(data))
			out[n] = bodies[n]
		default:
			t.Errorf("%s: entry of type %c", n, h.Typeflag)
		}
	}
}

// treeEntries describes each entry under root: its kind, mode, owner and content's digest or target.
func treeEntries(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.Mode()&fs.ModeNamedPipe != 0:
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %o %d:%d", st.Mode&0o7777, st.Uid, st.Gid)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + target
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("file %o %d:%d %x", st.Mode&0o7777, st.Uid, st.Gid, sha256.Sum256(data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPlainHTTPOnlyToThisHost: the registry's client sends nothing over plain HTTP but to this host.
func TestPlainHTTPOnlyToThisHost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer srv.Close()
	rt := tlsUnlessLocal{http.DefaultTransport}
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{srv.URL + "/v2/", true},
		{strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/v2/", true},
		{"http://10.1.2.3:5000/v2/", false},
		{"http://registry.example.com/v2/", false},
		{"http://[::ffff:10.1.2.3]:5000/v2/", false},
	} {
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if (err == nil) != tc.ok || (!tc.ok && !strings.Contains(err.Error(), "plain HTTP to")) {
			t.Errorf("%s: %v; want allowed %v", tc.url, err, tc.ok)
		}
	}
}
