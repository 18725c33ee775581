package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestReproducible runs the whole tool twice (go build included: the second build comes from Go's cache) and once
// more with another source date.
func TestReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds corral statically (minutes on a cold cache)")
	}
	ctx := t.Context()
	dir := t.TempDir()
	first, err := buildCLI(ctx, "--out", filepath.Join(dir, "a"), "--tar", filepath.Join(dir, "a.tar"), "--source-date-epoch", "1700000000")
	if err != nil {
		t.Fatal(err)
	}
	second, err := buildCLI(ctx, "--out", filepath.Join(dir, "b"), "--source-date-epoch", "1700000000")
	if err != nil {
		t.Fatal(err)
	}
	if first != second || !strings.HasPrefix(first, "sha256:") {
		t.Fatalf("two builds of one tree: digests %q and %q, want the same", first, second)
	}
	other, err := buildCLI(ctx, "--out", filepath.Join(dir, "c"), "--source-date-epoch", "1700000001")
	if err != nil {
		t.Fatal(err)
	}
	if other == first {
		t.Fatalf("another source date gave the same digest %s: the timestamps are not the epoch's", first)
	}

	// --push writes the same index to a registry (go-containerregistry's own registry server, over HTTP on
	// 127.0.0.1), with no credentials configured.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/corral:test"
	pushed, err := buildCLI(ctx, "--push", ref, "--source-date-epoch", "1700000000")
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	remoteIdx, err := remote.Index(parsed)
	if err != nil {
		t.Fatalf("pull the pushed index: %v", err)
	}
	if d, _ := remoteIdx.Digest(); pushed != first || d.String() != first {
		t.Fatalf("pushed: the tool printed %s, the registry holds %s; the layout's is %s", pushed, d, first)
	}

	// The layout holds one image for this platform, whose config runs corral serve as 65532.
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d.String() != first {
		t.Fatalf("the layout's index is %s, the tool printed %s", d, first)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.OS != "linux" {
		t.Fatalf("index manifests %+v, want one linux image", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/corral" ||
		!cf.Created.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("config: user %q, entrypoint %q, created %s", cf.Config.User, cf.Config.Entrypoint, cf.Created)
	}
	checkDiffID(t, img, cf)
	files := layerFiles(t, img)
	for _, want := range []string{"usr/local/bin/corral", "usr/local/bin/corral-sandbox-agent", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "var/lib/corral/"} {
		h, ok := files[want]
		if !ok {
			t.Errorf("the layer has no %s", want)
			continue
		}
		if !h.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s: mtime %s, want the source date", want, h.ModTime)
		}
	}
	if h := files["var/lib/corral/"]; h != nil && (h.Uid != 65532 || h.Mode&0o777 != 0o700) {
		t.Errorf("var/lib/corral: uid %d mode %o, want 65532 and 0700", h.Uid, h.Mode)
	}

	t.Run("runs under runc", func(t *testing.T) { runImage(t, filepath.Join(dir, "a.tar")) })
}

// TestFlags: bad flags are refused, before anything is built, with an error that names what is wrong.
func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "nothing to do"},
		{[]string{"--out", "x", "--platforms", "windows/amd64"}, "want linux/<arch>"},
		{[]string{"--tar", "x", "--platforms", "linux/amd64,linux/arm64"}, "--tar takes one platform"},
		{[]string{"--out", "x", "--source-date-epoch", "yesterday"}, "want Unix seconds"},
		{[]string{"--out", "x", "surplus"}, "unexpected argument"},
		{[]string{"--tar", "x", "--tag", "Not A Tag!"}, "--tag"},
		{[]string{"--push", "Not A Reference!"}, "--push"},
		{[]string{"--out", "x", "--ca-bundle", "/nonexistent/ca.pem"}, "--ca-bundle"},
	} {
		err := run(t.Context(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run %q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestOutRefusesOtherDirectories: --out replaces an earlier image layout, and never deletes anything else.
func TestOutRefusesOtherDirectories(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(t.Context(), []string{"--out", dir, "--bin-dir", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not an OCI image layout") {
		t.Fatalf("--out on a directory of files: %v, want a refusal", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Fatalf("the directory's file after the refusal: %q, %v", b, err)
	}

	layoutDir := filepath.Join(t.TempDir(), "layout")
	if err := os.MkdirAll(layoutDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"oci-layout", "index.json"} {
		if err := os.WriteFile(filepath.Join(layoutDir, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := clearLayout(layoutDir, true); err != nil {
		t.Fatalf("an earlier layout: %v", err)
	}
	if _, err := os.Stat(layoutDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the earlier layout is still there: %v", err)
	}
	if err := clearLayout(filepath.Join(t.TempDir(), "new"), true); err != nil {
		t.Fatalf("a new directory: %v", err)
	}
}

// buildCLI runs the tool and returns the digest it printed.
func buildCLI(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		return "", fmt.Errorf("corral-image %q: %v\n%s", args, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// checkDiffID checks what a runtime checks when it unpacks the layer (containerd: "wrong diff id calculated on
// extraction"): the blob is gzip, its digest is the manifest's, and the digest of the tar inside it is the
// config's diff_id.
func checkDiffID(t *testing.T, img v1.Image, cf *v1.ConfigFile) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil || len(m.Layers) != 1 || len(cf.RootFS.DiffIDs) != 1 {
		t.Fatalf("manifest %+v (%v), diff_ids %v; want one layer", m, err, cf.RootFS.DiffIDs)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	blob, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		t.Fatalf("the layer blob is not gzip: %v", err)
	}
	tarBytes, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("sha256:%x", sha256.Sum256(blob)); got != m.Layers[0].Digest.String() {
		t.Errorf("the blob's digest is %s, the manifest says %s", got, m.Layers[0].Digest)
	}
	if got := fmt.Sprintf("sha256:%x", sha256.Sum256(tarBytes)); got != cf.RootFS.DiffIDs[0].String() {
		t.Errorf("the layer's tar has digest %s, the config's diff_id is %s: runtimes refuse to unpack it", got, cf.RootFS.DiffIDs[0])
	}
}

// layerFiles reads the image's one layer: each entry's header by name.
func layerFiles(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

// runImage unpacks the tarball's image into a runc bundle and runs its entrypoint and command as a restricted
// pod would: its own user, a read-only root, no capabilities, no new privileges, the data directory a volume of
// its own, the environment the chart gives it. corral serve must answer its health check and an authenticated API
// call, run as 65532, keep its database in the volume, and exit 0 on SIGTERM.
func runImage(t *testing.T, tarPath string) {
	sandboxtest.Require(t, "oci", oci.Available("runc"))
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	if err := unpack(img, rootfs); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(bundle, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	// The environment the chart gives the API (deploy/helm/corral): the keys from Secrets, JSON logs.
	const key = "sk-corral-image-test-0123456789abcdef"
	vaultKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	env := append(withoutListen(cf.Config.Env), "CORRAL_LISTEN="+addr, "CORRAL_API_KEY="+key,
		"CORRAL_VAULT_KEY="+vaultKey, "CORRAL_LOG_FORMAT=json")
	args := append(append([]string{}, cf.Config.Entrypoint...), append(cf.Config.Cmd, "--brains", "0")...)
	spec := runtimeSpec(args, env, cf.Config.WorkingDir, data)
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("corral-image-test-%d", os.Getpid())
	var out bytes.Buffer
	cmd := exec.Command("runc", "run", "--bundle", bundle, id)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = exec.Command("runc", "delete", "--force", id).Run()
	})

	base := "http://" + addr
	if err := waitHealthy(base, done); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	req, _ := http.NewRequest("GET", base+"/v1/agents", nil)
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/agents with the key: %s", resp.Status)
	}

	state, err := exec.Command("runc", "state", id).Output()
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Pid int }
	if err := json.Unmarshal(state, &st); err != nil || st.Pid == 0 {
		t.Fatalf("runc state: %s (%v)", state, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "\nUid:\t65532\t65532\t65532\t65532\n") {
		t.Errorf("the process does not run as 65532:\n%s", status)
	}
	if _, err := os.Stat(filepath.Join(data, "corral.db")); err != nil {
		t.Errorf("the data volume has no database: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "vault.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a vault key file was written beside CORRAL_VAULT_KEY: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("corral serve after SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("corral serve still runs 30 s after SIGTERM\n%s", out.String())
	}
	if !strings.Contains(out.String(), `"msg":"corral shutting down"`) {
		t.Errorf("no shutdown logged:\n%s", out.String())
	}
}

// runtimeSpec is the OCI runtime configuration of a restricted container in the host's network namespace (so
// that the test reaches it on 127.0.0.1).
func runtimeSpec(args, env []string, cwd, data string) map[string]any {
	return map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"user":            map[string]any{"uid": 65532, "gid": 65532},
			"args":            args,
			"env":             env,
			"cwd":             cwd,
			"noNewPrivileges": true,
			"capabilities":    map[string]any{"bounding": []string{}, "effective": []string{}, "permitted": []string{}},
			"rlimits":         []map[string]any{{"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096}},
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "corral",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777", "size=65536k"}},
			{"destination": "/var/lib/corral", "type": "bind", "source": data, "options": []string{"rbind", "rw", "nosuid", "nodev"}},
		},
		"linux": map[string]any{
			"namespaces":  []map[string]any{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}},
			"maskedPaths": []string{"/proc/kcore", "/proc/keys", "/proc/timer_list"},
		},
	}
}

// unpack writes the image's filesystem into dir (regular files and directories: all this image holds).
func unpack(img v1.Image, dir string) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return err
			}
			p := filepath.Join(dir, filepath.FromSlash(h.Name))
			if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
				rc.Close()
				return fmt.Errorf("layer entry %q leaves the root", h.Name)
			}
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, 0o755)
			case tar.TypeReg:
				var f *os.File
				if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil {
					_, err = io.Copy(f, tr)
					err = errors.Join(err, f.Close())
				}
			default:
				err = fmt.Errorf("layer entry %q: type %c", h.Name, h.Typeflag)
			}
			if err == nil {
				err = os.Lchown(p, h.Uid, h.Gid)
			}
			if err == nil {
				err = os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode))
			}
			if err != nil {
				rc.Close()
				return err
			}
		}
		rc.Close()
	}
	if err := os.MkdirAll(filepath.Join(dir, "proc"), 0o755); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(dir, "dev"), 0o755)
}

func modeBits(m int64) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

func withoutListen(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CORRAL_LISTEN=") {
			out = append(out, kv)
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitHealthy polls /healthz until it answers 200, the container exits, or a minute passes.
func waitHealthy(base string, exited <-chan error) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("the container exited before it was healthy: %v", err)
		default:
		}
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("no healthy answer from /healthz within a minute")
}
