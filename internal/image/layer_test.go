package image_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// agentBin is the statically built agent the builder bridges its proxy with.
func agentBin(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "corral-image-agent-")
		if err != nil {
			agentErr = err
			return
		}
		agentPath, agentErr = sandboxtest.BuildAgent(dir)
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentPath
}

// inImage runs a shell command in the root filesystem (a plain chroot-like bwrap, no network).
func inImage(t *testing.T, rootfs, command string) (string, error) {
	t.Helper()
	out, err := exec.Command("bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev",
		"--tmpfs", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
		"/bin/sh", "-c", command).CombinedOutput()
	return string(out), err
}

func layerConfig(t *testing.T) image.LayerConfig {
	return image.LayerConfig{Dir: imagetest.CacheDir(), Agent: agentBin(t), Timeout: 15 * time.Minute, AllowInternal: imagetest.RegistryGateways(),
		Log: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

// tWriter sends a build's log to the test's.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestLayerApt(t *testing.T) {
	base := imagetest.Base(t)
	l := image.Canonical(&apitype.Packages{Apt: []string{"jq=1.6-2.1+deb12u2"}})
	ctx := context.Background()
	start := time.Now()
	layer, err := image.EnsureLayer(ctx, layerConfig(t), base, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %s", layer.Key, time.Since(start))
	out, err := inImage(t, layer.RootFS, "echo '{\"a\": 41}' | jq .a; dpkg-query -W -f '${Version}' jq; ls -ln /usr/bin/jq")
	if err != nil || !strings.HasPrefix(out, "41\n1.6-2.1+deb12u2") {
		t.Fatalf("jq in the image: %v: %s", err, out)
	}
	t.Log(out)
	if _, err := os.Stat(filepath.Join(base.RootFS, "usr/bin/jq")); err == nil {
		t.Error("the build wrote into the base")
	}
}

const goHello = "golang.org/x/example/hello@v0.0.0-20250915201037-7f05d217867b"

// TestLayerNpmGo builds one layer with an npm package (Debian's nodejs and npm come with it) and a Go command
// (with the Go toolchain from the module proxy), and uses both in the image.
func TestLayerNpmGo(t *testing.T) {
	base := imagetest.Base(t)
	l := image.Canonical(&apitype.Packages{Npm: []string{"is-number@7.0.0"}, Go: []string{goHello}})
	start := time.Now()
	layer, err := image.EnsureLayer(context.Background(), layerConfig(t), base, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %s", layer.Key, time.Since(start))
	out, err := inImage(t, layer.RootFS, `cd /tmp && node -e 'const n = require("is-number"); console.log(n(5), n("x"), require("is-number/package.json").version)' && hello && go version && npm ls -g --depth 0`)
	if err != nil || !strings.Contains(out, "true false 7.0.0\n") || !strings.Contains(out, "Hello, world!") || !strings.Contains(out, "go version "+image.DefaultGoVersion) {
		t.Fatalf("npm and go in the image: %v: %s", err, out)
	}
}

// TestLayerBadInput: an unknown package, a version that does not exist, a registry that cannot be reached and a
// build past its time or disk limit each fail with an error naming the package and the reason, and leave
// nothing in the cache.
func TestLayerBadInput(t *testing.T) {
	base := imagetest.Base(t)
	var unreachable image.Registries
	if err := unreachable.SetMirror(image.Npm, "http://127.0.0.1:9/"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		pkgs    apitype.Packages
		cfg     func(*image.LayerConfig)
		manager string
		pkg     string
		why     string
	}{
		{"unknown apt package", apitype.Packages{Apt: []string{"corral-no-such-package"}}, nil, "apt", "corral-no-such-package", "unknown package"},
		{"missing apt version", apitype.Packages{Apt: []string{"jq=0.0-0"}}, nil, "apt", "jq=0.0-0", "no such version"},
		{"unknown npm package", apitype.Packages{Npm: []string{"corral-no-such-package-7f3a"}}, nil, "npm", "corral-no-such-package-7f3a", "unknown package"},
		{"missing npm version", apitype.Packages{Npm: []string{"is-number@99.0.0"}}, nil, "npm", "is-number@99.0.0", "no such version"},
		{"missing go version", apitype.Packages{Go: []string{"golang.org/x/example/hello@v9.9.9"}}, nil, "go", "golang.org/x/example/hello@v9.9.9", "no such version"},
		{"unreachable registry", apitype.Packages{Npm: []string{"is-number@7.0.0"}}, func(c *image.LayerConfig) {
			c.Registries = &unreachable
			c.AllowInternal = append(c.AllowInternal, "127.0.0.1:9")
		}, "npm", "", "installing its toolchain (npm 10.9.2): the registry could not be reached"},
		// A mirror behind an internal address the operator has not trusted: the message names the flag that does.
		{"untrusted internal mirror", apitype.Packages{Npm: []string{"is-number@7.0.0"}}, func(c *image.LayerConfig) {
			c.Registries = &unreachable
		}, "npm", "", "the builder's proxy refused 127.0.0.1:9: 127.0.0.1:9 resolves to an internal address (an operator who trusts it allows it with --egress-allow-internal 127.0.0.1:9)"},
		{"time limit", apitype.Packages{Npm: []string{"is-number@6.0.0"}}, func(c *image.LayerConfig) { c.Timeout = 3 * time.Second }, "apt", "", "time limit (3s)"},
		{"disk limit", apitype.Packages{Apt: []string{"gcc"}}, func(c *image.LayerConfig) { c.DiskBytes, c.Timeout = 48<<20, time.Minute }, "apt", "", "disk limit (48 MiB)"},
		{"bad spec", apitype.Packages{Pip: []string{"--index-url=http://evil"}}, nil, "pip", "--index-url=http://evil", "may not start with '-'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := layerConfig(t)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			l := image.Canonical(&tc.pkgs)
			_, err := image.EnsureLayer(context.Background(), cfg, base, l)
			var be *image.BuildError
			if !errors.As(err, &be) {
				t.Fatalf("err = %v, want a *BuildError", err)
			}
			if be.Manager != tc.manager || be.Package != tc.pkg || !strings.Contains(be.Message, tc.why) {
				t.Errorf("got %s / %s / %q; want %s / %s / %q", be.Manager, be.Package, be.Message, tc.manager, tc.pkg, tc.why)
			}
			if image.Built(cfg.Dir, image.LayerKey(cfg, base.ID, l)) {
				t.Error("a failed build is in the cache")
			}
		})
	}
}

// TestLayerCgroupLimits: with a cgroup root, a build runs in a group of its own: the same list builds under
// the default limits and fails under a pids limit its package manager cannot work in; the group goes with the
// build.
func TestLayerCgroupLimits(t *testing.T) {
	base := imagetest.Base(t)
	imagetest.Require(t, cgroup.Available(cgroup.DefaultRoot))
	l := image.Canonical(&apitype.Packages{Apt: []string{"tree"}})
	ctx := context.Background()

	tight := layerConfig(t)
	tight.Dir, tight.CgroupRoot, tight.Pids = t.TempDir(), cgroup.DefaultRoot, 3
	_, err := image.EnsureLayer(ctx, tight, base, l)
	var be *image.BuildError
	if !errors.As(err, &be) {
		t.Fatalf("a build limited to 3 processes: %v; want a build error", err)
	}
	t.Logf("under 3 pids: %v", err)

	ok := layerConfig(t)
	ok.Dir, ok.CgroupRoot = t.TempDir(), cgroup.DefaultRoot
	layer, err := image.EnsureLayer(ctx, ok, base, l)
	if err != nil {
		t.Fatalf("under the default limits: %v", err)
	}
	if out, err := inImage(t, layer.RootFS, "tree --version"); err != nil {
		t.Fatalf("tree in the image: %v: %s", err, out)
	}
	left, _ := filepath.Glob(filepath.Join(cgroup.DefaultRoot, "pids", "*", "corral", "build-*"))
	more, _ := filepath.Glob(filepath.Join(cgroup.DefaultRoot, "pids", "corral", "build-*"))
	if len(left)+len(more) != 0 {
		t.Errorf("the builds' cgroups are left: %v %v", left, more)
	}
}
