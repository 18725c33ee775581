package image_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// privateCache is an image cache of the test's own holding the machine's base (hard links: no copy), so that
// its garbage collection sees only the test's layers.
func privateCache(t *testing.T) string {
	t.Helper()
	b := imagetest.Base(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "base"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-al", filepath.Dir(b.RootFS), filepath.Join(dir, "base", b.ID)).CombinedOutput(); err != nil {
		t.Fatalf("link the base: %v: %s", err, out)
	}
	return dir
}

// buildCounter counts the builds a service starts (its "building an image" log lines), by key.
type buildCounter struct {
	slog.Handler
	mu     *sync.Mutex
	builds map[string]int
}

func (h buildCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "building an image" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "key" {
				h.mu.Lock()
				h.builds[a.Value.String()]++
				h.mu.Unlock()
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h buildCounter) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.builds[key]
}

// TestService: environments created with a package list get their image built in the background, their status
// stored (building, then ready or failed naming the package); identical lists share one build and one layer,
// however many environments and sandboxes ask at once; a sandbox waits for a build and holds its layer against
// garbage collection; a layer no environment lists and no sandbox holds is removed.
func TestService(t *testing.T) {
	dir := privateCache(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	counter := buildCounter{Handler: slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}), mu: &sync.Mutex{}, builds: map[string]int{}}
	lc := layerConfig(t)
	lc.Log = nil
	svc, err := image.New(image.Config{Base: image.BaseConfig{Dir: dir}, Layer: lc, Store: st, Log: slog.New(counter),
		GCInterval: -1, GCGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()

	create := func(name string, pk *apitype.Packages) *apitype.Environment {
		t.Helper()
		e := &apitype.Environment{Type: apitype.ObjectEnvironment, ID: apitype.NewID(apitype.PrefixEnvironment), Name: name,
			Config: apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: pk}, Metadata: map[string]string{},
			CreatedAt: apitype.Now(), UpdatedAt: apitype.Now()}
		e.Image = svc.Image(&e.Config) // as the API does
		if err := st.EnvironmentCreate(ctx, e); err != nil {
			t.Fatal(err)
		}
		svc.Build(e)
		return e
	}
	wait := func(e *apitype.Environment) *apitype.EnvironmentImage {
		t.Helper()
		for {
			got, err := st.EnvironmentGet(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Image != nil && got.Image.Status != apitype.ImageBuilding {
				return got.Image
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: still %+v", e.Name, got.Image)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}

	// Without packages: the base, ready once the service found it.
	plain := create("plain", nil)
	if img := wait(plain); img.Status != apitype.ImageReady || !strings.HasPrefix(img.ID, "base-") {
		t.Errorf("no packages: image %+v", img)
	}
	root, release, err := svc.Acquire(ctx, &plain.Config)
	if err != nil || !strings.HasSuffix(root, "/rootfs") || !strings.Contains(root, "/base/") {
		t.Fatalf("Acquire without packages = %q, %v", root, err)
	}
	release()

	// Two environments, the same list in two spellings, and three sandboxes asking at once: one build.
	pk := &apitype.Packages{Apt: []string{"bc"}}
	a := create("a", pk)
	b := create("b", &apitype.Packages{Apt: []string{" bc", "bc"}})
	if a.Image.ID != b.Image.ID || a.Image.Status != apitype.ImageBuilding {
		t.Fatalf("images of one list: %+v and %+v", a.Image, b.Image)
	}
	var wg sync.WaitGroup
	roots := make([]string, 3)
	releases := make([]func(), 3)
	var acquireErrs atomic.Int32
	for i := range roots {
		wg.Go(func() {
			var err error
			roots[i], releases[i], err = svc.Acquire(ctx, &a.Config)
			if err != nil {
				t.Error(err)
				acquireErrs.Add(1)
			}
		})
	}
	wg.Wait()
	if acquireErrs.Load() > 0 {
		t.FailNow()
	}
	for _, e := range []*apitype.Environment{a, b} {
		if img := wait(e); img.Status != apitype.ImageReady || img.ID != a.Image.ID {
			t.Errorf("%s: image %+v", e.Name, img)
		}
	}
	if n := counter.count(a.Image.ID); n != 1 {
		t.Errorf("%d builds of one list asked for by two environments and three sandboxes, want 1", n)
	}
	if out, err := inImage(t, roots[0], "echo 6*7 | bc"); err != nil || strings.TrimSpace(out) != "42" || roots[1] != roots[0] || roots[2] != roots[0] {
		t.Errorf("bc in %q (%q, %q): %v %q", roots[0], roots[1], roots[2], err, out)
	}
	// A third environment with the list later: ready at once, nothing built.
	c := create("c", pk)
	if c.Image.Status != apitype.ImageReady || wait(c).Status != apitype.ImageReady || counter.count(a.Image.ID) != 1 {
		t.Errorf("a cached list: %+v, %d builds", c.Image, counter.count(a.Image.ID))
	}

	// A failed build names the package; a sandbox of it gets an *ImageError.
	bad := create("bad", &apitype.Packages{Apt: []string{"corral-no-such-package"}})
	img := wait(bad)
	if img.Status != apitype.ImageFailed || img.Error == nil || img.Error.Package != "corral-no-such-package" || !strings.Contains(img.Error.Message, "unknown package") {
		t.Errorf("failed image: %+v %+v", img, img.Error)
	}
	_, _, err = svc.Acquire(ctx, &bad.Config)
	var ie *sandbox.ImageError
	if !errors.As(err, &ie) || ie.Package != "corral-no-such-package" || ie.Manager != "apt" {
		t.Errorf("Acquire of a failed image: %v", err)
	}
	if n := counter.count(img.ID); n != 1 {
		t.Errorf("the failed list was built %d times, want 1 (the failure is kept for provisioning)", n)
	}

	// GC: the layer stays while an environment lists it or a sandbox holds it.
	if n, err := svc.GC(ctx); err != nil || n != 0 {
		t.Errorf("GC with every layer listed: removed %d, %v", n, err)
	}
	for _, e := range []*apitype.Environment{a, b, c} {
		if err := st.EnvironmentDelete(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := svc.GC(ctx); err != nil || n != 0 || !image.Built(dir, a.Image.ID) {
		t.Errorf("GC while sandboxes hold the layer: removed %d, %v", n, err)
	}
	for _, r := range releases {
		r()
	}
	if n, err := svc.GC(ctx); err != nil || n != 1 || image.Built(dir, a.Image.ID) {
		t.Errorf("GC of an unused layer: removed %d, %v; still built: %v", n, err, image.Built(dir, a.Image.ID))
	}
	// Asked for again, it is built again.
	root, release, err = svc.Acquire(ctx, &apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: pk})
	if err != nil || counter.count(a.Image.ID) != 2 {
		t.Errorf("Acquire after GC: %q %v, %d builds", root, err, counter.count(a.Image.ID))
	}
	release()

	// A server stopped mid-build leaves the status building; the next one builds it at start.
	restart := create("restart", &apitype.Packages{Apt: []string{"units"}})
	svc.Stop()
	if got, _ := st.EnvironmentGet(ctx, restart.ID); got.Image == nil || got.Image.Status != apitype.ImageBuilding {
		t.Fatalf("after a stop mid-build: %+v", got.Image)
	}
	svc2, err := image.New(image.Config{Base: image.BaseConfig{Dir: dir}, Layer: lc, Store: st, Log: slog.New(counter), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc2.Stop()
	if img := wait(restart); img.Status != apitype.ImageReady {
		t.Errorf("after a restart: %+v %+v", img, img.Error)
	}
}

// TestServiceWithoutStore: a service without a store (corral worker's) builds its Keep lists at Start, once the
// base is there, and keeps their layers through GC; other lists are built when a sandbox asks (Acquire) and
// collected once unused; a Build of an environment records no status anywhere, and nothing needs a store.
func TestServiceWithoutStore(t *testing.T) {
	dir := privateCache(t)
	counter := buildCounter{Handler: slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}), mu: &sync.Mutex{}, builds: map[string]int{}}
	lc := layerConfig(t)
	lc.Log = nil
	kept := &apitype.Packages{Apt: []string{"bc"}}
	svc, err := image.New(image.Config{Base: image.BaseConfig{Dir: dir}, Layer: lc, Keep: []*apitype.Packages{kept}, Log: slog.New(counter),
		GCInterval: -1, GCGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()

	keptConfig := &apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: kept}
	key := svc.Key(keptConfig)
	for !image.Built(dir, key) { // nobody asked for it: Start builds it
		select {
		case <-ctx.Done():
			t.Fatalf("the kept list was not built at Start: %+v", svc.Image(keptConfig))
		case <-time.After(200 * time.Millisecond):
		}
	}
	if img := svc.Image(keptConfig); img.Status != apitype.ImageReady || img.ID != key || counter.count(key) != 1 {
		t.Errorf("the kept list's image %+v, %d builds", img, counter.count(key))
	}
	root, release, err := svc.Acquire(ctx, keptConfig)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := inImage(t, root, "echo 6*7 | bc"); err != nil || strings.TrimSpace(out) != "42" {
		t.Errorf("bc in the kept layer %q: %v %q", root, err, out)
	}
	release()
	// An environment's Build without a store: nothing to record, nothing fails.
	svc.Build(&apitype.Environment{ID: apitype.NewID(apitype.PrefixEnvironment), Config: *keptConfig})
	svc.Build(&apitype.Environment{ID: apitype.NewID(apitype.PrefixEnvironment), Config: apitype.EnvConfig{Type: apitype.EnvironmentCloud}})

	// A list nobody keeps: built for the sandbox that asks, collected once it is released; the kept one stays.
	other := &apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: &apitype.Packages{Apt: []string{"units"}}}
	root, release, err = svc.Acquire(ctx, other)
	if err != nil || !image.Built(dir, svc.Key(other)) {
		t.Fatalf("Acquire of another list = %q, %v", root, err)
	}
	if n, err := svc.GC(ctx); err != nil || n != 0 {
		t.Errorf("GC while a sandbox holds a layer: removed %d, %v", n, err)
	}
	release()
	if n, err := svc.GC(ctx); err != nil || n != 1 || image.Built(dir, svc.Key(other)) || !image.Built(dir, key) {
		t.Errorf("GC: removed %d, %v; the unkept layer built: %v, the kept one: %v", n, err, image.Built(dir, svc.Key(other)), image.Built(dir, key))
	}
	if counter.count(key) != 1 {
		t.Errorf("the kept list was built %d times, want 1", counter.count(key))
	}
	testPublisher(ctx, t, svc, keptConfig)
}

// testPublisher pushes the image of env, built by svc, to registries: one that is down fails the push with an
// *sandbox.ImageError naming it; a live one gets the image once (a second Ref reads the record, and works with
// the registry down), whose flattened filesystem holds the package's files and the base's.
func testPublisher(ctx context.Context, t *testing.T, svc *image.Service, env *apitype.EnvConfig) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	pub, err := image.NewPublisher(svc, strings.TrimPrefix(down.URL, "http://")+"/corral/env")
	if err != nil {
		t.Fatal(err)
	}
	var ie *sandbox.ImageError
	if ref, err := pub.Ref(ctx, env); !errors.As(err, &ie) || !strings.Contains(err.Error(), "pushing the image to "+strings.TrimPrefix(down.URL, "http://")) {
		t.Errorf("Ref with the registry down = %q, %v; want an image error naming the push", ref, err)
	}
	if ref, err := pub.Ref(ctx, &apitype.EnvConfig{Type: apitype.EnvironmentCloud}); ref != "" || err != nil {
		t.Errorf("Ref without packages = %q, %v; want none", ref, err)
	}

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(registry.NewDiskBlobHandler(t.TempDir()))))
	pushedTo := strings.TrimPrefix(reg.URL, "http://")
	repo := pushedTo + "/corral/env"
	if pub, err = image.NewPublisher(svc, repo); err != nil {
		t.Fatal(err)
	}
	ref, err := pub.Ref(ctx, env)
	if err != nil || !strings.HasPrefix(ref, repo+"@sha256:") {
		t.Fatalf("Ref = %q, %v; want %s by digest", ref, err, repo)
	}
	reg.Close()
	if again, err := pub.Ref(ctx, env); again != ref || err != nil {
		t.Errorf("a second Ref = %q, %v; want %q from the record", again, err, ref)
	}
	reg = httptest.NewServer(reg.Config.Handler)
	defer reg.Close()
	repo = strings.TrimPrefix(reg.URL, "http://") + "/corral/env"
	pulled, err := remote.Image(mustParseRef(t, strings.Replace(ref, strings.Split(ref, "@")[0], repo, 1)))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := pulled.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("the image's layers: %d, %v; want the base's and the packages'", len(layers), err)
	}
	rc := mutate.Extract(pulled)
	defer rc.Close()
	seen := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = true
	}
	for _, want := range []string{"usr/bin/bc", "usr/bin/bash", "etc/os-release"} {
		if !seen[want] {
			t.Errorf("%s is not in the pushed image (%d entries)", want, len(seen))
		}
	}

	// The registry loses its images (wiped at the same address): a new server's Publisher finds the record
	// stale and pushes again.
	ln, err := net.Listen("tcp", pushedTo)
	if err != nil {
		t.Fatal(err)
	}
	wiped := &httptest.Server{Listener: ln, Config: &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}}
	wiped.Start()
	defer wiped.Close()
	if pub, err = image.NewPublisher(svc, pushedTo+"/corral/env"); err != nil {
		t.Fatal(err)
	}
	again, err := pub.Ref(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(mustParseRef(t, again)); err != nil {
		t.Errorf("the image was not pushed again to the wiped registry: %v", err)
	}
}

func mustParseRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLayerOneBuild: callers that race for a layer without a Service between them (as processes sharing a
// cache do) build it once: the key's lock file serialises them and the later ones find it built.
func TestLayerOneBuild(t *testing.T) {
	base := imagetest.Base(t)
	dir := privateCache(t)
	counter := buildCounter{Handler: slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}), mu: &sync.Mutex{}, builds: map[string]int{}}
	cfg := layerConfig(t)
	cfg.Dir, cfg.Log = dir, slog.New(counter)
	l := image.Canonical(&apitype.Packages{Apt: []string{"tree"}})
	var wg sync.WaitGroup
	layers := make([]image.Layer, 3)
	errs := make([]error, 3)
	for i := range layers {
		wg.Go(func() { layers[i], errs[i] = image.EnsureLayer(context.Background(), cfg, base, l) })
	}
	wg.Wait()
	for i := range layers {
		if errs[i] != nil || layers[i] != layers[0] {
			t.Fatalf("caller %d: %+v, %v (caller 0: %+v)", i, layers[i], errs[i], layers[0])
		}
	}
	if n := counter.count(layers[0].Key); n != 1 {
		t.Errorf("%d builds for 3 racing callers, want 1", n)
	}
	if out, err := inImage(t, layers[0].RootFS, "tree -L 1 /usr | head -3"); err != nil || !strings.Contains(out, "bin") {
		t.Errorf("tree in the image: %v %s", err, out)
	}
}
