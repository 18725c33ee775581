package main

import (
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/image"
)

// TestImageFlags: the mode picks the images, a bad mode or limit is refused, and a backend without a root of
// its own gets the host's layout under auto and an error under debian.
func TestImageFlags(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	parse := func(args ...string) (*imageFlags, *handsFlags) {
		t.Helper()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var hf handsFlags
		hf.register(fs)
		var f imageFlags
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &f, &hf
	}
	f, hf := parse("--sandbox", "process")
	if imgs, err := f.images(t.TempDir(), hf, nil, logger); err != nil || imgs != (image.HostLayout{}) {
		t.Errorf("auto with the process backend: %T, %v", imgs, err)
	}
	f, hf = parse("--sandbox", "process", "--images", "debian")
	if _, err := f.images(t.TempDir(), hf, nil, logger); err == nil || !strings.Contains(err.Error(), "isolating") {
		t.Errorf("debian with the process backend: %v", err)
	}
	f, hf = parse("--images", "docker")
	if _, err := f.images(t.TempDir(), hf, nil, logger); err == nil || !strings.Contains(err.Error(), "want debian, host or auto") {
		t.Errorf("a bad mode: %v", err)
	}
	f, hf = parse("--images", "debian", "--image-build-disk", "0")
	if _, err := f.images(t.TempDir(), hf, nil, logger); err == nil || !strings.Contains(err.Error(), "must be positive") {
		t.Errorf("a zero disk limit: %v", err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	(&imageFlags{}).register(fs)
	if err := fs.Parse([]string{"--package-registry", "yum=http://mirror"}); err == nil || !strings.Contains(err.Error(), "unknown package manager") {
		t.Errorf("a bad mirror: %v", err)
	}
}
