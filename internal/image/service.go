package image

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
)

// Defaults of Config.
const (
	// DefaultGCInterval is how often unused layers are collected (and the first time at Start, once the stored
	// environments' builds have started).
	DefaultGCInterval = time.Hour
	// DefaultRetryFailed is how long a failed build's error is given to sandboxes before a provisioning tries
	// the build again (a registry that was down may be back).
	DefaultRetryFailed = 10 * time.Minute
	// DefaultKeepFor is how long a layer another service of the machine's cache marked is kept (Config.KeepFor).
	DefaultKeepFor = 24 * time.Hour
)

// Config configures a Service.
type Config struct {
	// Base is the base every image starts from; Base.Dir is the image cache. Required.
	Base BaseConfig
	// Layer says how package layers are built; its Dir is Base.Dir, its Log the service's.
	Layer LayerConfig
	// Store keeps the environments' image statuses (EnvironmentImageSet) and lists the environments whose
	// layers Start builds and GC keeps. Nil for a process without one (corral worker, which reaches the server
	// only through its API): no status is kept, and only the Keep lists are built at Start and kept by GC.
	Store store.Store
	// Keep are package lists whose layers Start builds (after the base) and GC keeps, besides the stored
	// environments' (corral worker's --package).
	Keep []*apitype.Packages
	// GCInterval is how often unused layers are removed (default DefaultGCInterval; negative: never, but GC
	// may still be called).
	GCInterval time.Duration
	// GCGrace is how long a layer no environment lists survives after it was built or its last sandbox
	// released it (default DefaultGCInterval; negative: none), so that a list an environment drops and takes
	// back soon after is not built again.
	GCGrace time.Duration
	// RetryFailed is how long a failed build stays failed for provisioning (default DefaultRetryFailed); a
	// change of the environment's packages builds at once.
	RetryFailed time.Duration
	// KeepFor is how long a layer stays after the last GC pass of any service sharing the cache whose store
	// lists it (default DefaultKeepFor, and at least three GC intervals). One cache serves every server of a
	// machine, each with a store of its own: a GC pass marks the layers its store lists
	// (images/<key>.keep.<service>), and a layer another service marked less than KeepFor ago is not removed,
	// so that no server's GC removes what another server's environments need.
	KeepFor time.Duration
	Log     *slog.Logger
}

// Service builds the environments' images: the base at Start, in the background; an environment's layer when
// it is created or its packages change (Build, from the API); and whatever a sandbox needs and is not built
// yet (Acquire, from the Pool), each list once however many ask (in process: one build per key; across
// processes: the build's lock file). Statuses go to the store, if any, so the API shows them. Unused layers are
// collected (GC).
type Service struct {
	cfg    Config
	baseID string
	// id names this service's marks on the layers its store lists (GC), random per process.
	id string

	baseDone chan struct{}
	base     Base
	baseErr  error

	mu     sync.Mutex
	builds map[string]*flight // by layer key: running, or finished with an error
	ctx    context.Context    // the service's life: builds run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	state  int // 0 new, 1 started, 2 stopped
}

// flight is one build of a layer key; done closes when it ends.
type flight struct {
	done  chan struct{}
	err   *BuildError
	ended time.Time
	envs  map[string]bool // the environments whose status follows this build
}

var (
	_ sandbox.Images      = (*Service)(nil)
	_ sandbox.ImageStatus = (*Service)(nil) // a provisioning says it waits for a build
)

// New returns a Service; Start builds the base.
func New(cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Base.Log = cmp.Or(cfg.Base.Log, cfg.Log)
	id, err := BaseID(cfg.Base)
	if err != nil {
		return nil, err
	}
	cfg.Layer.Dir = cfg.Base.Dir
	cfg.Layer.Suite = cmp.Or(cfg.Layer.Suite, cfg.Base.Suite)
	cfg.Layer.Log = cmp.Or(cfg.Layer.Log, cfg.Log)
	if err := cfg.Layer.defaults(); err != nil {
		return nil, err
	}
	cfg.GCInterval = cmp.Or(cfg.GCInterval, DefaultGCInterval)
	cfg.GCGrace = cmp.Or(cfg.GCGrace, DefaultGCInterval)
	cfg.RetryFailed = cmp.Or(cfg.RetryFailed, DefaultRetryFailed)
	cfg.KeepFor = max(cmp.Or(cfg.KeepFor, DefaultKeepFor), 3*cfg.GCInterval)
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{cfg: cfg, baseID: id, id: rand.Text()[:16], baseDone: make(chan struct{}), builds: map[string]*flight{}, ctx: ctx, cancel: cancel}, nil
}

// Start builds the base in the background, then the layers of the stored environments and of Keep that are not
// built (after a restart, or on a new cache), then collects unused layers every GCInterval. It returns at once.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != 0 {
		return errors.New("image: service already started or stopped")
	}
	s.state = 1
	s.wg.Go(func() {
		base, err := EnsureBase(s.ctx, s.cfg.Base)
		s.base, s.baseErr = base, err
		close(s.baseDone)
		if err != nil {
			s.cfg.Log.Error("the base image could not be built: sandboxes cannot start until it is", "err", err)
			return
		}
		if err := s.buildStored(s.ctx); err != nil && s.ctx.Err() == nil {
			s.cfg.Log.Warn("the stored environments' images", "err", err)
		}
		if s.cfg.GCInterval < 0 {
			return
		}
		t := time.NewTicker(s.cfg.GCInterval)
		defer t.Stop()
		for {
			if n, err := s.GC(s.ctx); err != nil && s.ctx.Err() == nil {
				s.cfg.Log.Warn("image garbage collection", "err", err)
			} else if n > 0 {
				s.cfg.Log.Info("unused images removed", "count", n)
			}
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return nil
}

// Stop cancels the builds in progress (nothing half-built is kept) and waits for them. Idempotent.
func (s *Service) Stop() {
	s.mu.Lock()
	s.state = 2
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// buildStored starts the build of every Keep list's layer that is not in the cache, and of every stored cloud
// environment's image whose status is not ready, or whose layer is not in the cache.
func (s *Service) buildStored(ctx context.Context) error {
	for _, p := range s.cfg.Keep {
		if l := Canonical(p); !l.Empty() {
			if key := LayerKey(s.cfg.Layer, s.baseID, l); !Built(s.cfg.Base.Dir, key) {
				s.flight(key, l, "", true)
			}
		}
	}
	return s.eachEnvironment(ctx, func(e *apitype.Environment) {
		if e.Config.Type == apitype.EnvironmentSelfHosted {
			return
		}
		img := s.Image(&e.Config)
		if img.Status != apitype.ImageReady || e.Image == nil || e.Image.ID != img.ID || e.Image.Status != img.Status {
			s.Build(e) // a build a stopped server left "building" is built again
		}
	})
}

// eachEnvironment calls fn for every stored environment, archived ones included (none without a Store).
func (s *Service) eachEnvironment(ctx context.Context, fn func(*apitype.Environment)) error {
	if s.cfg.Store == nil {
		return nil
	}
	p := &store.ListParams{Limit: 500, IncludeArchived: true}
	for {
		page, err := s.cfg.Store.EnvironmentList(ctx, p)
		if err != nil {
			return err
		}
		for i := range page {
			fn(&page[i])
		}
		if len(page) < p.Limit {
			return nil
		}
		last := page[len(page)-1]
		p.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// baseReady returns the base, waiting for its build.
func (s *Service) baseReady(ctx context.Context) (Base, error) {
	select {
	case <-s.baseDone:
		return s.base, s.baseErr
	case <-ctx.Done():
		return Base{}, ctx.Err()
	}
}

// Key is the image id of an environment config: the base's id without packages, else its layer's key.
func (s *Service) Key(c *apitype.EnvConfig) string {
	l := Canonical(c.Packages)
	if l.Empty() {
		return s.baseID
	}
	return LayerKey(s.cfg.Layer, s.baseID, l)
}

// Check reports a package spec the builds would refuse (api.Images, CheckPackages): the API answers it with a
// 400.
func (s *Service) Check(c *apitype.EnvConfig) error { return CheckPackages(c.Packages) }

// Image is the status of the image of config c as of now: ready if built, failed if its last build here
// failed, else building (api.Images). It looks, and starts nothing.
func (s *Service) Image(c *apitype.EnvConfig) *apitype.EnvironmentImage {
	if c.Type == apitype.EnvironmentSelfHosted {
		return nil
	}
	key := s.Key(c)
	img := &apitype.EnvironmentImage{Status: apitype.ImageBuilding, ID: key, UpdatedAt: apitype.Now()}
	if key == s.baseID {
		select {
		case <-s.baseDone:
			if s.baseErr != nil {
				img.Status, img.Error = apitype.ImageFailed, &apitype.ImageBuildError{Message: "the base image: " + s.baseErr.Error()}
			} else {
				img.Status = apitype.ImageReady
			}
		default:
			if done(filepath.Join(s.cfg.Base.Dir, "base", key)) {
				img.Status = apitype.ImageReady
			}
		}
		return img
	}
	if Built(s.cfg.Base.Dir, key) {
		img.Status = apitype.ImageReady
		return img
	}
	s.mu.Lock()
	f := s.builds[key]
	s.mu.Unlock()
	if f != nil {
		select {
		case <-f.done:
			if f.err != nil {
				img.Status, img.Error = apitype.ImageFailed, wireError(f.err)
			}
		default:
		}
	}
	return img
}

// Build starts building the image of environment e in the background if it is not built, and records the
// result as e's status (api.Images: the API calls it when an environment is created or its packages change).
// A list that failed before is built again.
func (s *Service) Build(e *apitype.Environment) {
	if e.Config.Type == apitype.EnvironmentSelfHosted {
		return
	}
	img := s.Image(&e.Config)
	if img.Status == apitype.ImageReady || img.ID == s.baseID {
		if e.Image == nil || e.Image.Status != img.Status || e.Image.ID != img.ID {
			s.spawn(func() {
				if img.Status != apitype.ImageReady {
					_, _ = s.baseReady(s.ctx)
					img = s.Image(&e.Config)
				}
				s.setStatus(e.ID, img)
			})
		}
		return
	}
	s.flight(img.ID, Canonical(e.Config.Packages), e.ID, true)
}

// spawn runs fn in a goroutine of the service's, unless it is stopping.
func (s *Service) spawn(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != 2 {
		s.wg.Go(fn)
	}
}

// flight returns the build of key, starting one if none runs (or, with retry or after RetryFailed, if the
// last one failed); envID, if set, has its status follow the build.
func (s *Service) flight(key string, l List, envID string, retry bool) *flight {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.builds[key]
	if f != nil {
		select {
		case <-f.done:
			if f.err == nil || (!retry && time.Since(f.ended) < s.cfg.RetryFailed) {
				return f
			}
			f = nil // failed a while ago, or asked again: build again
		default:
		}
	}
	if f == nil {
		f = &flight{done: make(chan struct{}), envs: map[string]bool{}}
		s.builds[key] = f
		if s.state == 2 {
			f.err, f.ended = &BuildError{Message: "the server is stopping"}, time.Now()
			close(f.done)
			return f
		}
		s.wg.Go(func() { s.run(key, l, f) })
	}
	if envID != "" && s.state != 2 {
		f.envs[envID] = true
		s.wg.Go(func() {
			s.setStatus(envID, &apitype.EnvironmentImage{Status: apitype.ImageBuilding, ID: key, UpdatedAt: apitype.Now()})
		})
	}
	return f
}

// run builds key and records the result for the environments that follow it.
func (s *Service) run(key string, l List, f *flight) {
	var berr *BuildError
	base, err := s.baseReady(s.ctx)
	if err == nil {
		_, err = EnsureLayer(s.ctx, s.cfg.Layer, base, l)
	} else {
		err = fmt.Errorf("the base image: %w", err)
	}
	if err != nil && !errors.As(err, &berr) {
		berr = &BuildError{Message: err.Error()}
	}
	s.mu.Lock()
	if berr != nil {
		f.err = berr
	} else {
		delete(s.builds, key) // built: the cache answers from now on
	}
	f.ended = time.Now()
	close(f.done)
	envs := f.envs
	f.envs = nil
	s.mu.Unlock()
	if berr != nil && s.ctx.Err() != nil {
		return // stopped, not failed: the status stays building, and the next start builds it again
	}
	img := &apitype.EnvironmentImage{Status: apitype.ImageReady, ID: key, UpdatedAt: apitype.Now()}
	if berr != nil {
		img.Status, img.Error = apitype.ImageFailed, wireError(berr)
	}
	for id := range envs {
		s.setStatus(id, img)
	}
}

// setStatus records an environment's image status; a status of an image the environment no longer has is
// dropped, and so is every status without a Store.
func (s *Service) setStatus(envID string, img *apitype.EnvironmentImage) {
	if s.cfg.Store == nil || envID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 30*time.Second)
	defer cancel()
	err := s.cfg.Store.EnvironmentImageSet(ctx, envID, img)
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		s.cfg.Log.Warn("environment image status not stored", "environment", envID, "image", img.ID, "err", err)
	}
}

// Acquire returns the root filesystem of the image of env, waiting for the base and the layer (building it if
// nobody has), and holds the layer against garbage collection until release (sandbox.Images).
func (s *Service) Acquire(ctx context.Context, env *apitype.EnvConfig) (string, func(), error) {
	base, err := s.baseReady(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, fmt.Errorf("waiting for the base image: %w", err)
		}
		return "", nil, &sandbox.ImageError{ImageBuildError: apitype.ImageBuildError{Message: "the base image: " + err.Error()}}
	}
	l := Canonical(env.Packages)
	if l.Empty() {
		return base.RootFS, func() {}, nil
	}
	key := LayerKey(s.cfg.Layer, s.baseID, l)
	for {
		release, err := useLock(ctx, s.cfg.Base.Dir, key)
		if err != nil {
			return "", nil, err
		}
		if Built(s.cfg.Base.Dir, key) {
			touch(filepath.Join(s.cfg.Base.Dir, "images", key+".use"))
			return filepath.Join(LayerDir(s.cfg.Base.Dir, key), "rootfs"), func() {
				touch(filepath.Join(s.cfg.Base.Dir, "images", key+".use"))
				release()
			}, nil
		}
		release()
		f := s.flight(key, l, "", false)
		select {
		case <-f.done:
		case <-ctx.Done():
			return "", nil, fmt.Errorf("waiting for the environment's image: %w", ctx.Err())
		}
		if f.err != nil {
			return "", nil, &sandbox.ImageError{ImageBuildError: *wireError(f.err)}
		}
	}
}

// useLock takes a shared lock on the layer's use file, which GC takes exclusively before it removes a layer.
func useLock(ctx context.Context, dir, key string) (func(), error) {
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "images", key+".use"), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return sync.OnceFunc(func() { f.Close() }), nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("image: lock %s: %w", key, err)
		}
		select {
		case <-ctx.Done(): // GC holds it for a moment only
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// GC removes the layers no stored environment's current package list nor Keep list needs and no sandbox uses
// (here or in another process sharing the cache), nor another service sharing the cache marked as its own in
// the last KeepFor, and what failed or killed builds left behind; it returns how many layers it removed. It
// marks the layers it keeps first (images/<key>.keep.<service>), for the other services' passes.
func (s *Service) GC(ctx context.Context) (int, error) {
	keep := map[string]bool{}
	if err := s.eachEnvironment(ctx, func(e *apitype.Environment) {
		if e.Config.Type != apitype.EnvironmentSelfHosted {
			keep[s.Key(&e.Config)] = true
		}
	}); err != nil {
		return 0, err
	}
	for _, p := range s.cfg.Keep {
		keep[s.Key(&apitype.EnvConfig{Packages: p})] = true
	}
	s.mu.Lock()
	for k := range s.builds {
		keep[k] = true
	}
	s.mu.Unlock()
	images := filepath.Join(s.cfg.Base.Dir, "images")
	entries, err := os.ReadDir(images)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if key, ok := strings.CutSuffix(e.Name(), ".keep."+s.id); ok && !keep[key] {
			_ = os.Remove(filepath.Join(images, e.Name())) // the store dropped it: its own mark goes
		}
	}
	for k := range keep {
		if Built(s.cfg.Base.Dir, k) {
			mark(filepath.Join(images, k+".keep."+s.id))
		}
	}
	n := 0
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if rest, ok := strings.CutPrefix(name, ".build-"); ok && e.IsDir() {
			// A build's temporary tree: stale when its key's build lock is free.
			if k, _, ok := strings.Cut(rest, "-"); ok && !keep[k] {
				if unlock, ok := tryLock(filepath.Join(images, k+".lock")); ok {
					errs = append(errs, os.RemoveAll(filepath.Join(images, name)))
					unlock()
				}
			}
			continue
		}
		if strings.HasPrefix(name, ".trash-") && e.IsDir() { // a removal cut short
			errs = append(errs, os.RemoveAll(filepath.Join(images, name)))
			continue
		}
		if !e.IsDir() || !strings.HasPrefix(name, "img-") || keep[name] {
			continue
		}
		removed, err := s.remove(images, name)
		if removed {
			n++
		}
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// remove removes the layer key unless a sandbox uses it, a build of it runs, it was built or last used less
// than GCGrace ago, or a service sharing the cache marked it as its store's less than KeepFor ago.
func (s *Service) remove(images, key string) (bool, error) {
	if s.cfg.GCGrace > 0 {
		for _, f := range []string{filepath.Join(images, key, "done"), filepath.Join(images, key+".use")} {
			if fi, err := os.Stat(f); err == nil && time.Since(fi.ModTime()) < s.cfg.GCGrace {
				return false, nil
			}
		}
	}
	marks, err := filepath.Glob(filepath.Join(images, key+".keep.*"))
	if err != nil {
		return false, err
	}
	for _, m := range marks {
		if fi, err := os.Stat(m); err == nil && time.Since(fi.ModTime()) < s.cfg.KeepFor {
			return false, nil
		}
	}
	unuse, ok := tryLock(filepath.Join(images, key+".use"))
	if !ok {
		return false, nil
	}
	defer unuse()
	unbuild, ok := tryLock(filepath.Join(images, key+".lock"))
	if !ok {
		return false, nil
	}
	defer unbuild()
	trash, err := os.MkdirTemp(images, ".trash-")
	if err != nil {
		return false, err
	}
	if err := os.Rename(filepath.Join(images, key), filepath.Join(trash, key)); err != nil {
		_ = os.Remove(trash)
		return false, err
	}
	s.cfg.Log.Info("removing an unused image", "key", key)
	for _, m := range marks {
		_ = os.Remove(m) // stale: their services have not listed the layer for KeepFor
	}
	return true, os.RemoveAll(trash)
}

// mark sets path's modification time to now, creating it if need be (a service's mark on a layer its store
// lists).
func mark(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
		f.Close()
	}
	touch(path)
}

// touch sets path's modification time to now (the last use of a layer), if it exists.
func touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// tryLock takes an exclusive flock on path if it is free.
func tryLock(path string) (func(), bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

// wireError is a build error as the API shows it.
func wireError(e *BuildError) *apitype.ImageBuildError {
	return &apitype.ImageBuildError{Manager: e.Manager, Package: e.Package, Message: e.Message}
}
