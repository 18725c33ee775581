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

// TestPackageFlags: corral worker's --package takes MANAGER=PACKAGE, repeatable, refuses what the API refuses
// in an environment's packages, and needs Debian images.
func TestPackageFlags(t *testing.T) {
	parse := func(args ...string) (*imageFlags, *handsFlags, error) {
		t.Helper()
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var hf handsFlags
		hf.register(fs)
		var f imageFlags
		f.register(fs)
		f.registerPackages(fs)
		return &f, &hf, fs.Parse(args)
	}
	f, _, err := parse("--package", "apt=jq=1.6-2.1+deb12u2", "--package", "pip=requests==2.32.3", "--package", "apt=bc")
	if err != nil || strings.Join(f.packages.Apt, " ") != "jq=1.6-2.1+deb12u2 bc" || strings.Join(f.packages.Pip, " ") != "requests==2.32.3" ||
		f.packages.String() != "apt=jq=1.6-2.1+deb12u2,apt=bc,pip=requests==2.32.3" {
		t.Errorf("packages %+v (%s), %v", f.packages.Packages, f.packages.String(), err)
	}
	for arg, want := range map[string]string{
		"jq":                     "want MANAGER=PACKAGE",
		"apt=":                   "want MANAGER=PACKAGE",
		"yum=jq":                 `unknown package manager "yum"`,
		"npm=file:../../etc":     `npm package "file:../../etc" cannot be installed`,
		"apt=--allow-downgrades": "may not start with '-'",
		"go=golang.org/x/tools":  "need a version",
	} {
		if _, _, err := parse("--package", arg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--package %s: %v, want %q", arg, err, want)
		}
	}
	logger := slog.New(slog.DiscardHandler)
	f, hf, err := parse("--sandbox", "process", "--package", "apt=jq")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.images(t.TempDir(), hf, nil, logger); err == nil || !strings.Contains(err.Error(), "--package needs Debian images") ||
		!strings.Contains(err.Error(), "runs no sandbox of its own root") {
		t.Errorf("--package where auto falls back to the host's layout: %v", err)
	}
	f, hf, _ = parse("--sandbox", "bwrap", "--images", "host", "--package", "apt=jq")
	if _, err := f.images(t.TempDir(), hf, nil, logger); err == nil || !strings.Contains(err.Error(), "--images host installs no packages") {
		t.Errorf("--package with --images host: %v", err)
	}
	// The kubernetes backend's images: built only to be pushed (--k8s-registry), pulled by the pods.
	t.Setenv("CORRAL_K8S_REGISTRY", "") // the flag's default
	f, hf, _ = parse("--sandbox", "k8s")
	if imgs, err := f.images(t.TempDir(), hf, nil, logger); err != nil || imgs != (image.HostLayout{}) {
		t.Errorf("kubernetes without --k8s-registry, --images auto: %T, %v; want the host's layout (pods run --k8s-image)", imgs, err)
	}
	f, hf, _ = parse("--sandbox", "kubernetes", "--images", "debian")
	if _, err := f.images(t.TempDir(), hf, nil, logger); err == nil || !strings.Contains(err.Error(), "needs --k8s-registry") {
		t.Errorf("--images debian on kubernetes without --k8s-registry: %v", err)
	}
	f, hf, _ = parse("--sandbox", "kubernetes", "--images", "host", "--k8s-registry", "registry.example.com/corral/env")
	if _, err := f.images(t.TempDir(), hf, nil, logger); err == nil || !strings.Contains(err.Error(), "--k8s-registry needs Debian images") {
		t.Errorf("--k8s-registry with --images host: %v", err)
	}
}
