// Package imagetest gives tests a base image, built once per machine and cached between runs.
package imagetest

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/sandbox"
)

// Settings read from the environment.
const (
	// CacheEnv is the directory the tests' images are cached in (default DefaultCache). CI keeps it between runs.
	CacheEnv = "CORRAL_TEST_IMAGES"
	// RequireEnv=1 (or CI=true) fails a test that cannot build the base instead of skipping it.
	RequireEnv = "CORRAL_REQUIRE_IMAGES"
	// DefaultCache is the cache without CacheEnv.
	DefaultCache = "/var/cache/corral-test-images"
)

// CacheDir is the directory tests cache their images in.
func CacheDir() string {
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	return DefaultCache
}

var (
	once    sync.Once
	base    image.Base
	baseErr error
)

// Base returns the default base image, building it on first use (a few minutes; later runs find it in
// CacheDir). Without debootstrap or Debian's mirror it skips the test, or fails it when images are required.
func Base(tb testing.TB) image.Base {
	tb.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		base, baseErr = image.EnsureBase(ctx, image.BaseConfig{Dir: CacheDir()})
	})
	Require(tb, baseErr)
	return base
}

// Require skips the test when unavailable is not nil, or fails it when RequireEnv=1 or CI=true.
func Require(tb testing.TB, unavailable error) {
	tb.Helper()
	if unavailable == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" || os.Getenv("CI") == "true" {
		tb.Fatalf("images required (%s=1 or CI=true) but unavailable: %v", RequireEnv, unavailable)
	}
	tb.Skipf("images unavailable: %v", unavailable)
}

// RegistryGateways are the default registries' host:port pairs that resolve to an internal address on this
// machine (a test network whose gateway answers for the internet, as on CI VMs): the builder's proxy refuses
// internal addresses unless the operator trusts them (--egress-allow-internal), so the tests trust these.
func RegistryGateways() []string {
	var out []string
	for _, hp := range []string{"deb.debian.org:80", "registry.npmjs.org:443", "proxy.golang.org:443", "sum.golang.org:443"} {
		host, _, _ := net.SplitHostPort(hp)
		addrs, err := net.LookupIP(host)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if !a.IsGlobalUnicast() || a.IsPrivate() || testNet(a) {
				out = append(out, hp)
				break
			}
		}
	}
	return out
}

// testNet reports whether ip is in one of the documentation ranges (RFC 5737), which are not public.
func testNet(ip net.IP) bool {
	for _, c := range []string{"192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"} {
		_, n, _ := net.ParseCIDR(c)
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// ManagerEgress is the egress of allow_package_managers with the given mirrors (MANAGER=URL, as
// --package-registry takes them), for sandboxtest.RunRegistries.
func ManagerEgress(mirrors []string) (sandbox.EgressSource, error) {
	var r image.Registries
	for _, m := range mirrors {
		if err := r.Set(m); err != nil {
			return nil, err
		}
	}
	return &image.ManagerEgress{Registries: &r}, nil
}
