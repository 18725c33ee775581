package image_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/image/imagetest"
)

func TestBaseID(t *testing.T) {
	a, err := image.BaseID(image.BaseConfig{Dir: "x", Include: []string{"git", "bash", "git"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := image.BaseID(image.BaseConfig{Dir: "y", Include: []string{"bash", "git"}})
	if a != b {
		t.Errorf("the same packages in another order (or another cache dir) gave %s and %s", a, b)
	}
	c, _ := image.BaseID(image.BaseConfig{Dir: "x", Include: []string{"bash", "git", "curl"}})
	d, _ := image.BaseID(image.BaseConfig{Dir: "x", Include: []string{"bash", "git"}, Suite: "trixie"})
	if c == a || d == a || c == d {
		t.Errorf("different bases share an id: %s %s %s", a, c, d)
	}
	if _, err := image.BaseID(image.BaseConfig{}); err == nil {
		t.Error("no Dir: no error")
	}
}

// TestEnsureBase builds (or finds) the default base and checks it holds what an agent expects and none of the
// build's leftovers; asking again builds nothing.
func TestEnsureBase(t *testing.T) {
	b := imagetest.Base(t)
	for _, f := range []string{"usr/bin/bash", "usr/bin/python3", "usr/bin/git", "usr/bin/curl", "usr/bin/ls", "etc/ssl/certs/ca-certificates.crt", "usr/bin/apt-get"} {
		if _, err := os.Stat(filepath.Join(b.RootFS, f)); err != nil {
			t.Errorf("the base lacks %s: %v", f, err)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(b.RootFS, "var/cache/apt/archives/*.deb"))
	if len(debs) != 0 {
		t.Errorf("the base keeps %d downloaded archives", len(debs))
	}
	if resolv, err := os.ReadFile(filepath.Join(b.RootFS, "etc/resolv.conf")); err != nil || len(resolv) != 0 {
		t.Errorf("the base's resolv.conf holds %q (%v): the build host's settings", resolv, err)
	}
	// Found in the cache: debootstrap is not run again (a missing one would fail the call).
	again, err := image.EnsureBase(context.Background(), image.BaseConfig{Dir: imagetest.CacheDir(), Debootstrap: "/nonexistent/debootstrap"})
	if err != nil || again != b {
		t.Fatalf("EnsureBase again = %+v, %v; want %+v", again, err, b)
	}
}

func TestEnsureBaseFailures(t *testing.T) {
	dir := t.TempDir()
	_, err := image.EnsureBase(context.Background(), image.BaseConfig{Dir: dir, Debootstrap: "/nonexistent/debootstrap"})
	if err == nil || !strings.Contains(err.Error(), "apt-get install debootstrap") {
		t.Errorf("no debootstrap: %v", err)
	}
	if _, err := os.Stat("/usr/sbin/debootstrap"); err != nil {
		t.Skip("debootstrap is not installed: the mirror case needs it")
	}
	// A mirror that does not answer: a clear error naming it, and nothing left in the cache.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = image.EnsureBase(ctx, image.BaseConfig{Dir: dir, Mirror: "http://127.0.0.1:9/debian"})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:9") {
		t.Errorf("unreachable mirror: %v", err)
	}
	left, _ := os.ReadDir(filepath.Join(dir, "base"))
	for _, e := range left {
		if !strings.HasSuffix(e.Name(), ".lock") {
			t.Errorf("a failed build left %s", e.Name())
		}
	}
}

// TestEnsureBaseOneBuild: callers racing for a base that is being built wait for the one build (the lock)
// and get the same result. The build here is a stand-in debootstrap script, so the test runs in a moment.
func TestEnsureBaseOneBuild(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	fake := filepath.Join(dir, "debootstrap")
	script := "#!/bin/sh\necho run >> " + count + "\nsleep 1\nfor a; do root=$prev; prev=$a; done\nmkdir -p \"$root/etc\" \"$root/usr/bin\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]image.Base, 4)
	errs := make([]error, 4)
	for i := range got {
		wg.Go(func() {
			got[i], errs[i] = image.EnsureBase(context.Background(), image.BaseConfig{Dir: filepath.Join(dir, "cache"), Debootstrap: fake})
		})
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != got[0] {
			t.Fatalf("caller %d: %+v, %v (caller 0: %+v)", i, got[i], errs[i], got[0])
		}
	}
	runs, _ := os.ReadFile(count)
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Errorf("debootstrap ran %d times for 4 racing callers", n)
	}
	if _, err := os.Stat(filepath.Join(got[0].RootFS, "usr/bin")); err != nil {
		t.Errorf("the built root: %v", err)
	}
}

// records keeps the messages and attributes a logger receives at info and above.
type records struct {
	mu   sync.Mutex
	msgs []map[string]string // "msg" and the attributes
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level < slog.LevelInfo {
		return nil
	}
	m := map[string]string{"msg": rec.Message}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	return nil
}

func (r *records) find(msg string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, m := range r.msgs {
		if strings.HasPrefix(m["msg"], msg) {
			out = append(out, m)
		}
	}
	return out
}

// TestEnsureBaseProgress: a base build says in the log when it starts, every Progress how long it has taken
// and at which of debootstrap's steps it is, and when it ends, with its duration (a first start builds it for
// minutes, and sandboxes wait meanwhile); a failed build says at which step it failed (the script fails in a cache named
// broken). The build is a
// stand-in debootstrap script.
func TestEnsureBaseProgress(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "debootstrap")
	script := "#!/bin/sh\necho 'I: Retrieving Packages'\nsleep 0.6\nprintf 'I: Extracting ba'\nsleep 0.1\necho 'sh...'\n" +
		"echo 'dpkg: some noise'\nsleep 0.6\nfor a; do root=$prev; prev=$a; done\n" +
		"case $root in *broken*) echo 'I: Configuring tar...'; echo 'E: it broke'; exit 1;; esac\nmkdir -p \"$root/etc\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rec := &records{}
	_, err := image.EnsureBase(context.Background(), image.BaseConfig{Dir: filepath.Join(dir, "cache"), Debootstrap: fake,
		Log: slog.New(rec), Progress: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.find("building the base image"); len(got) != 1 || got[0]["dir"] != filepath.Join(dir, "cache") {
		t.Errorf("the start: %v", got)
	}
	steps := map[string]bool{}
	for _, m := range rec.find("still building the base image") {
		if _, err := time.ParseDuration(m["elapsed"]); err != nil {
			t.Errorf("a progress line's elapsed %q: %v", m["elapsed"], err)
		}
		steps[m["step"]] = true
	}
	delete(steps, "") // a tick before the script's first line, on a loaded machine
	if !steps["Retrieving Packages"] || !steps["Extracting bash..."] || len(steps) != 2 {
		t.Errorf("the progress lines' steps: %v; want Retrieving Packages, then Extracting bash...", steps)
	}
	end := rec.find("built the base image")
	if len(end) != 1 {
		t.Fatalf("the end: %v", end)
	}
	if took, err := time.ParseDuration(end[0]["took"]); err != nil || took < time.Second {
		t.Errorf("the end's duration %q (%v): the build took over a second", end[0]["took"], err)
	}
	// No progress line after the end.
	n := len(rec.find("still building"))
	time.Sleep(400 * time.Millisecond)
	if m := len(rec.find("still building")); m != n {
		t.Errorf("%d progress lines after the build ended", m-n)
	}

	rec = &records{}
	_, err = image.EnsureBase(context.Background(), image.BaseConfig{Dir: filepath.Join(dir, "broken"), Debootstrap: fake,
		Log: slog.New(rec), Progress: -1})
	if err == nil || !strings.Contains(err.Error(), "it broke") {
		t.Errorf("a failed build: %v", err)
	}
	if got := rec.find("still building"); len(got) != 0 {
		t.Errorf("Progress -1 logged progress: %v", got)
	}
	if got := rec.find("the base image build failed"); len(got) != 1 || got[0]["step"] != "Configuring tar..." {
		t.Errorf("the failure: %v", got)
	}
}
