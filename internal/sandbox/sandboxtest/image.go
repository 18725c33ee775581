package sandboxtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// OnImage returns the providers of newProvider with every sandbox's HostDirs.RootFS set to rootfs, so that the
// other suites run on an image: sandboxtest.Run(t, sandboxtest.OnImage(newProvider, base.RootFS), opts).
func OnImage(newProvider func(testing.TB) sandbox.Provider, rootfs string) func(testing.TB) sandbox.Provider {
	return func(tb testing.TB) sandbox.Provider {
		return &imageProvider{Provider: newProvider(tb), rootfs: rootfs}
	}
}

// imageProvider is a Provider whose sandboxes all run on one image.
type imageProvider struct {
	sandbox.Provider
	rootfs string
}

func (p *imageProvider) Provision(ctx context.Context, r *sandbox.Recipe, dirs sandbox.HostDirs) (sandbox.Sandbox, error) {
	dirs.RootFS = p.rootfs
	return p.Provider.Provision(ctx, r, dirs)
}

// RootFS is the image the provider's sandboxes run on.
func (p *imageProvider) RootFS() string { return p.rootfs }

// HostPaths and Close are the wrapped provider's, for the suites that look for them.
func (p *imageProvider) HostPaths() []string {
	if hp, ok := p.Provider.(hostPaths); ok {
		return hp.HostPaths()
	}
	return nil
}

func (p *imageProvider) Close() error {
	if c, ok := p.Provider.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// rootFSOf is the image a provider's sandboxes run on ("" for the host's /usr).
func rootFSOf(p sandbox.Provider) string {
	if ip, ok := p.(interface{ RootFS() string }); ok {
		return ip.RootFS()
	}
	return ""
}

// RunImage checks that sandboxes on the image at rootfs (sandbox.HostDirs.RootFS, a base image or an
// environment's) run the image's programs and nothing of the host's: the package versions dpkg reports and
// `python3 --version` are the image's (so every backend that passes shows the same), `ls /usr/bin` is the
// image's, host-only files are absent; /, /usr, /etc and /var are read-only and a sandbox's writes go to its
// workspace and /tmp, never into the image directory; the CA bundle of a sandbox with an egress CA is the
// image's bundle followed by the CA, at the image's bundle path; and a RootFS that is not a root filesystem
// is refused.
func RunImage(t *testing.T, newProvider func(testing.TB) sandbox.Provider, rootfs string) {
	pkgs, err := dpkgStatus(filepath.Join(rootfs, "var/lib/dpkg/status"))
	if err != nil {
		t.Fatalf("the image's dpkg status: %v", err)
	}
	pyVersion, ok := pkgs["python3"]
	if !ok {
		t.Fatalf("the image %s has no python3 package", rootfs)
	}
	p, root := newPoolRoot(t, OnImage(newProvider, rootfs), 0)
	const s = "image"

	t.Run("Packages", func(t *testing.T) {
		got := mustRun(t, p, bash(s, `dpkg-query -W -f '${db:Status-Status} ${Package} ${Version}\n' | sed -n 's/^installed //p' | sort`))
		var want []string
		for name, v := range pkgs {
			want = append(want, name+" "+v)
		}
		slices.Sort(want)
		if got != strings.Join(want, "\n") {
			t.Errorf("dpkg-query in the sandbox:\n%s\nwant the image's %d packages:\n%s", got, len(want), strings.Join(want, "\n"))
		}
		upstream, _, _ := strings.Cut(pyVersion, "-")
		if got := mustRun(t, p, bash(s, "python3 --version")); got != "Python "+upstream {
			t.Errorf("python3 --version = %q, want Python %s (the image's python3 %s)", got, upstream, pyVersion)
		}
		if got := mustRun(t, p, bash(s, "git --version && curl --version | head -1 && bash -c 'echo $BASH_VERSION' && python3 -c 'import ssl, json; print(ssl.OPENSSL_VERSION)'")); !strings.Contains(got, "git version") || !strings.Contains(got, "OpenSSL") {
			t.Errorf("the image's tools: %q", got)
		}
	})

	t.Run("NoHostFiles", func(t *testing.T) {
		ents, err := os.ReadDir(filepath.Join(rootfs, "usr/bin"))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range ents {
			want = append(want, e.Name())
		}
		slices.Sort(want)
		if got := mustRun(t, p, bash(s, "LC_ALL=C ls -A /usr/bin")); got != strings.Join(want, "\n") {
			t.Errorf("ls /usr/bin in the sandbox is not the image's (%d entries): %q", len(want), got)
		}
		// Files of this host that the image lacks: none may be visible. The host runs the backend's tools, so at
		// least one of them is there.
		var hostOnly []string
		for _, f := range []string{"/usr/bin/bwrap", "/usr/bin/runc", "/usr/sbin/runc", "/usr/local/go", "/usr/bin/psql", "/usr/bin/chromium",
			"/usr/bin/debootstrap", "/usr/bin/go", "/usr/local/bin", "/etc/apt/sources.list.d", "/usr/lib/postgresql"} {
			if _, err := os.Lstat(f); err != nil {
				continue
			}
			if _, err := os.Lstat(filepath.Join(rootfs, f)); err == nil {
				continue
			}
			hostOnly = append(hostOnly, f)
		}
		if len(hostOnly) == 0 {
			t.Fatal("no file of this host is missing from the image: nothing to check")
		}
		got := mustRun(t, p, bash(s, "for f in "+strings.Join(hostOnly, " ")+"; do test -e $f && echo VISIBLE $f; done; echo checked"))
		if got != "checked" {
			t.Errorf("host files visible in the sandbox: %q", got)
		}
		// The top level is the image's, with the sandbox's own mount points.
		top, err := os.ReadDir("/")
		if err != nil {
			t.Fatal(err)
		}
		got = mustRun(t, p, bash(s, "ls -A /"))
		for _, e := range top {
			if _, err := os.Lstat(filepath.Join(rootfs, e.Name())); err == nil || slices.Contains([]string{"workspace", "mnt", "tmp", "proc", "dev", "sys"}, e.Name()) {
				continue
			}
			if slices.Contains(strings.Fields(got), e.Name()) {
				t.Errorf("the host's /%s is in the sandbox's root: %q", e.Name(), got)
			}
		}
		osRelease, err := os.ReadFile(filepath.Join(rootfs, "usr/lib/os-release"))
		if err != nil {
			t.Fatal(err)
		}
		if got := mustRun(t, p, bash(s, "cat /etc/os-release")); got != strings.TrimSuffix(string(osRelease), "\n") {
			t.Errorf("/etc/os-release is not the image's: %q", got)
		}
	})

	t.Run("ReadOnly", func(t *testing.T) {
		const probe = "corral-image-probe"
		for _, dir := range []string{"/", "/usr", "/usr/bin", "/etc", "/var/lib/dpkg", "/var/tmp"} {
			path := filepath.Join(dir, probe)
			if _, err := os.Lstat(filepath.Join(rootfs, dir)); err != nil {
				continue
			}
			if got := mustFail(t, p, bash(s, "touch "+path+" && echo WROTE")); strings.Contains(got, "WROTE") {
				t.Errorf("%s writable: %q", dir, got)
			}
			if res, err := p.Execute(context.Background(), call(s, "write", map[string]any{"file_path": path, "content": "x"})); err != nil || !res.IsError {
				t.Errorf("write %s: %v %q", path, err, res.Text())
			}
			if _, err := os.Lstat(filepath.Join(rootfs, path)); err == nil {
				t.Errorf("the sandbox's write reached the image: %s", filepath.Join(rootfs, path))
			}
		}
		if got := mustFail(t, p, bash(s, "rm -f /usr/bin/python3 && echo REMOVED; echo x >> /etc/passwd && echo APPENDED")); strings.Contains(got, "REMOVED") || strings.Contains(got, "APPENDED") {
			t.Errorf("the image changed: %q", got)
		}
	})

	// The image's files are the base's inodes (a layer hard-links them): a sandbox changing one's metadata would
	// change it for every image and sandbox. And the base's setuid programs must be inert: /usr is nosuid.
	t.Run("SharedInodes", func(t *testing.T) {
		const file = "/usr/bin/passwd" // Debian's, setuid root
		before, err := os.Stat(filepath.Join(rootfs, file))
		if err != nil {
			t.Skip("the image has no " + file)
		}
		got := mustFail(t, p, bash(s, "chmod 0777 "+file+" && echo CHMOD; chown 1000 "+file+" && echo CHOWN; touch -d 2001-01-01 "+file+" && echo TOUCH; exit 1"))
		for _, w := range []string{"CHMOD", "CHOWN", "TOUCH"} {
			if strings.Contains(got, w) {
				t.Errorf("%s on the image's %s succeeded: %q", strings.ToLower(w), file, got)
			}
		}
		after, err := os.Stat(filepath.Join(rootfs, file))
		if err != nil {
			t.Fatal(err)
		}
		if after.Mode() != before.Mode() || !after.ModTime().Equal(before.ModTime()) {
			t.Errorf("the image's %s changed: %v %v, was %v %v", file, after.Mode(), after.ModTime(), before.Mode(), before.ModTime())
		}
		opts := mustRun(t, p, bash(s, `awk '$5=="/usr"{print $6}' /proc/self/mountinfo`))
		if !slices.Contains(strings.Split(opts, ","), "nosuid") {
			t.Errorf("/usr is mounted %q in the sandbox, want nosuid (the image's setuid programs inert)", opts)
		}
	})

	t.Run("Writes", func(t *testing.T) {
		got := mustRun(t, p, bash(s, "echo ws > /workspace/img-w && echo tmp > /tmp/img-t && mkdir -p /tmp/d/e && cat /workspace/img-w /tmp/img-t"))
		if got != "ws\ntmp" {
			t.Errorf("writes to /workspace and /tmp: %q", got)
		}
		if b, err := os.ReadFile(filepath.Join(root, s, "img-w")); err != nil || string(b) != "ws\n" {
			t.Errorf("the workspace file on the host: %q %v", b, err)
		}
		for _, f := range []string{"workspace/img-w", "tmp/img-t", "tmp/d", "img-w"} {
			if _, err := os.Lstat(filepath.Join(rootfs, f)); err == nil {
				t.Errorf("the sandbox's write reached the image: %s", f)
			}
		}
	})

	t.Run("CABundle", func(t *testing.T) {
		ca := testCACert(t)
		sys, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
		if err != nil {
			t.Skipf("the image has no CA bundle: %v", err)
		}
		// The bundles are larger than a tool's output: their start and end are compared by hash.
		cmd := fmt.Sprintf("for f in /etc/ssl/certs/ca-certificates.crt $SSL_CERT_FILE; do head -c %d $f | sha256sum; tail -c %d $f | sha256sum; done",
			len(sys), len(ca))
		c := bash("image-ca", cmd)
		c.Recipe.Egress = &sandbox.Egress{CACertPEM: ca}
		got := mustRun(t, p, c)
		sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) + "  -" }
		want := strings.Repeat(sum(sys)+"\n"+sum(ca)+"\n", 2)
		if got+"\n" != want {
			t.Errorf("/etc/ssl/certs/ca-certificates.crt and $SSL_CERT_FILE are not the image's bundle followed by the egress CA:\n%s\nwant\n%s", got, want)
		}
		after, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
		if err != nil || !bytes.Equal(after, sys) {
			t.Errorf("the image's bundle changed: %v", err)
		}
	})

	t.Run("NotAnImage", func(t *testing.T) {
		prov := newProvider(t)
		for name, dir := range map[string]string{"empty": t.TempDir(), "missing": filepath.Join(t.TempDir(), "none"), "relative": "rootfs"} {
			r := sandbox.Recipe{SessionID: "notimage"}
			dirs := sandbox.HostDirs{Workspace: filepath.Join(WorkspaceRoot(t), "ws"), RootFS: dir}
			if err := os.MkdirAll(dirs.Workspace, 0o700); err != nil {
				t.Fatal(err)
			}
			sb, err := prov.Provision(context.Background(), &r, dirs)
			if err == nil {
				sb.Close()
				t.Errorf("%s: a RootFS of %q was accepted", name, dir)
				continue
			}
			t.Logf("%s: %v", name, err)
		}
	})
}

// dpkgStatus reads the installed packages of a dpkg status file: name (with :arch for foreign ones, as
// dpkg-query's ${Package} does not add it) to version.
func dpkgStatus(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	var name, version, status string
	flush := func() {
		if name != "" && strings.HasSuffix(status, " installed") {
			out[name] = version
		}
		name, version, status = "", "", ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "Package: "):
			name = strings.TrimPrefix(line, "Package: ")
		case strings.HasPrefix(line, "Version: "):
			version = strings.TrimPrefix(line, "Version: ")
		case strings.HasPrefix(line, "Status: "):
			status = strings.TrimPrefix(line, "Status: ")
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no installed package")
	}
	return out, nil
}

// testCACert is a self-signed CA certificate (PEM) for the CA bundle checks.
func testCACert(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corral test egress CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
