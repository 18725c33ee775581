// Package imagetest gives tests a base image, built once per machine and cached between runs.
package imagetest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/image"
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
