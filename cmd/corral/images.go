package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	corral "github.com/corralhq/corral/internal/server" // aliased: the e2e tests have a type server
	"github.com/corralhq/corral/internal/store"
)

// imageFlags configure the environments' images: serve's, harness's and worker's --images, --image-cache,
// --image-build-timeout, --image-build-disk and --package-registry, and worker's --package.
type imageFlags struct {
	mode       string
	cache      string
	timeout    time.Duration
	diskMB     int64
	registries image.Registries
	gc         time.Duration
	// dir is the cache images() chose ("" with the host's layout), for serve's first lines.
	dir string
	// packages are corral worker's --package: the packages of its one image (registerPackages).
	packages packageFlag
}

func (f *imageFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "images", envOr("CORRAL_IMAGES", "auto"), "`mode` of the sandboxes' root filesystems (env CORRAL_IMAGES): debian (a minimal Debian base built with debootstrap, "+
		"plus each environment's packages, built when the environment is created or changed; on corral worker, plus its --package list), "+
		"host (the host's /usr, as before images; for machines without debootstrap: environments with packages then fail with a clear error), "+
		"or auto (debian when running as root with debootstrap and bwrap installed and the backend isolates, else host; "+
		"on kubernetes, debian only with --k8s-registry, where the images are pushed for the pods)")
	fs.StringVar(&f.cache, "image-cache", cmp.Or(os.Getenv("CORRAL_IMAGE_CACHE"), defaultImageCache(os.Geteuid(), os.Getenv, os.UserHomeDir)), "`directory` of the built images, shared by every server and worker on the machine (env CORRAL_IMAGE_CACHE): /var/cache/corral/images as root, else $XDG_CACHE_HOME/corral/images or ~/.cache/corral/images; the base takes ~300 MB, each package list a layer of its own")
	fs.DurationVar(&f.timeout, "image-build-timeout", image.DefaultBuildTimeout, "time limit of one environment's package build")
	fs.Int64Var(&f.diskMB, "image-build-disk", image.DefaultBuildDiskBytes>>20, "disk limit of one environment's package build in `MiB` (needs loop devices and mkfs.ext4, as --sandbox-disk)")
	fs.DurationVar(&f.gc, "image-gc", envDuration("CORRAL_IMAGE_GC", image.DefaultGCInterval), "how often images no environment lists and no sandbox uses (for as long) are removed (env CORRAL_IMAGE_GC; 0 = never)")
	fs.Var(&f.registries, "package-registry", "a mirror of a package manager's registry for the builds, as `MANAGER=URL` (apt: a Debian mirror, also the base's; pip: a simple index; npm; cargo; gem; go: a GOPROXY); repeatable")
}

// registerPackages adds corral worker's --package: a self-hosted environment lists no packages (the API
// refuses them, as Anthropic's), so the worker's operator chooses those of the worker's image.
func (f *imageFlags) registerPackages(fs *flag.FlagSet) {
	fs.Var(&f.packages, "package", "a package of the sandboxes' image, as `MANAGER=PACKAGE` (apt=jq, pip=requests==2.32.3, npm=is-number@7.0.0, "+
		"cargo=ripgrep@14.1.0, gem=rake:13.2.1, go=golang.org/x/tools/cmd/stringer@v0.29.0), checked as the API checks an environment's "+
		"packages and built on the Debian base (needs --images debian or auto on a machine that builds images); repeatable")
}

// packageFlag is corral worker's repeatable --package MANAGER=PACKAGE.
type packageFlag struct{ apitype.Packages }

func (f *packageFlag) String() string {
	var out []string
	for _, m := range image.Managers {
		for _, p := range *f.list(m) {
			out = append(out, m+"="+p)
		}
	}
	return strings.Join(out, ",")
}

// Set adds one package, refusing what the API refuses in an environment's packages (image.CheckPackages).
func (f *packageFlag) Set(v string) error {
	m, p, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(p) == "" {
		return errors.New("want MANAGER=PACKAGE, e.g. apt=jq or pip=requests==2.32.3")
	}
	l := f.list(m)
	if l == nil {
		return fmt.Errorf("unknown package manager %q (want one of %s)", m, strings.Join(image.Managers, ", "))
	}
	*l = append(*l, p)
	return image.CheckPackages(&f.Packages)
}

// list is the list of manager m (nil if m is no manager).
func (f *packageFlag) list(m string) *[]string {
	switch m {
	case image.Apt:
		return &f.Apt
	case image.Pip:
		return &f.Pip
	case image.Npm:
		return &f.Npm
	case image.Cargo:
		return &f.Cargo
	case image.Gem:
		return &f.Gem
	case image.Go:
		return &f.Go
	}
	return nil
}

// empty reports whether no --package was given.
func (f *packageFlag) empty() bool { return image.Canonical(&f.Packages).Empty() }

// Set and String make f.registries a flag.Value through imageFlags (flag.Var takes *image.Registries).
var _ flag.Value = (*image.Registries)(nil)

// images returns the server's images: an image.Service on the cache, or image.HostLayout (--images host, or
// auto where Debian images cannot be built: the reason is logged). hf is the backend's flags; st is nil on
// corral worker, whose --package lists the service builds at start and keeps (host images refuse them).
func (f *imageFlags) images(dataDir string, hf *handsFlags, st store.Store, logger *slog.Logger) (corral.Images, error) {
	mode := f.mode
	why := "--images host installs no packages"
	registry, kube := "", false
	if b, err := lookupBackend(hf.kind); err == nil && b.name == "kubernetes" {
		registry, kube = hf.kube.registry, true
	}
	switch mode {
	case "debian", "host":
	case "auto":
		switch why = debianUnavailable(hf.kind); {
		case kube && registry == "":
			why = "the kubernetes backend's pods run --k8s-image unless --k8s-registry says where their images go"
			logger.Info("the environments' packages are not built: " + why)
			mode = "host"
		case why != "" && kube:
			mode = "host" // --k8s-registry: refused below with the reason
		case why != "":
			logger.Warn("sandboxes run on the host's layout, and environments with packages fail (--images host)", "reason", why)
			mode = "host"
		default:
			mode = "debian"
		}
	default:
		return nil, fmt.Errorf("--images %q: want debian, host or auto", f.mode)
	}
	if mode == "host" {
		if !f.packages.empty() {
			return nil, fmt.Errorf("--package needs Debian images (--images debian): %s", why)
		}
		if registry != "" {
			return nil, fmt.Errorf("--k8s-registry needs Debian images (--images debian): %s", why)
		}
		return image.HostLayout{}, nil
	}
	if hf.kind == "process" || hf.kind == "none" {
		return nil, fmt.Errorf("--images debian needs an isolating --sandbox backend (bwrap, oci, gvisor, kubernetes), not %s", hf.kind)
	}
	if kube && registry == "" {
		return nil, errors.New("--images debian with the kubernetes backend needs --k8s-registry: its pods pull the environments' images from there")
	}
	if f.timeout <= 0 || f.diskMB <= 0 {
		return nil, errors.New("--image-build-timeout and --image-build-disk must be positive")
	}
	cache := cmp.Or(f.cache, defaultImageCache(os.Geteuid(), os.Getenv, os.UserHomeDir))
	if cache == "" {
		cache = filepath.Join(dataDir, "images") // no home directory
	}
	cache, err := filepath.Abs(cache)
	if err != nil {
		return nil, err
	}
	f.dir = cache
	agentPath, _, err := hf.agentPath(dataDir)
	if err != nil {
		return nil, err
	}
	eo, err := hf.egress.parse()
	if err != nil {
		return nil, err
	}
	// The builder trusts the host's CA bundle, and the operator's --egress-ca-file with it.
	caFile, err := image.BuilderCAFile(cache, eo.CAPEM)
	if err != nil {
		return nil, err
	}
	base := image.BaseConfig{Dir: cache, Mirror: f.registries.Get(image.Apt).URL}
	gc := f.gc
	if gc <= 0 {
		gc = -1
	}
	// Each build runs in a memory- and pids-limited cgroup where the hierarchies are there (as the sandboxes do).
	cgroupRoot := cgroup.DefaultRoot
	if err := cgroup.Available(cgroupRoot); err != nil {
		logger.Warn("image builds run without memory and process limits", "err", err)
		cgroupRoot = ""
	}
	var keep []*apitype.Packages
	if !f.packages.empty() {
		keep = []*apitype.Packages{&f.packages.Packages}
	}
	svc, err := image.New(image.Config{Base: base, Store: st, Keep: keep, Log: logger, GCInterval: gc, GCGrace: gc,
		Layer: image.LayerConfig{Agent: agentPath, Registries: &f.registries, Timeout: f.timeout, DiskBytes: f.diskMB << 20,
			CgroupRoot: cgroupRoot, AllowInternal: eo.AllowInternal, CAFile: caFile}})
	if err != nil || registry == "" {
		return svc, err
	}
	return image.NewPublisher(svc, registry) // pods pull the images from there
}

// defaultImageCache is the machine's image cache when neither --image-cache nor CORRAL_IMAGE_CACHE says: one per
// machine, not per data directory, so that a second server (another --data) finds the base and the layers
// built (their garbage collection is safe across servers: image.Config.KeepFor). /var/cache/corral/images for
// root (the FHS's place for a cache a daemon can rebuild), else $XDG_CACHE_HOME/corral/images or
// ~/.cache/corral/images; "" when there is no home directory.
func defaultImageCache(euid int, getenv func(string) string, home func() (string, error)) string {
	return defaultDir(euid, getenv, home, "/var/cache/corral/images", "XDG_CACHE_HOME", ".cache", "corral/images")
}

// envDuration is the duration in the environment variable name, or def when it is unset or not a duration.
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// debianUnavailable says why Debian images cannot be built here for the backend kind ("" if they can).
func debianUnavailable(kind string) string {
	switch {
	case kind == "process" || kind == "none":
		return "the " + kind + " backend runs no sandbox of its own root"
	case os.Geteuid() != 0:
		return "image builds need root"
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return image.ErrNoDebootstrap.Error()
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		return "the image builder needs bubblewrap: apt-get install bubblewrap"
	}
	return ""
}
