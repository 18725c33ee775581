package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// PauseImage is the pod sandbox image: containerd.toml pins it, so it is imported at Start and never pulled.
const PauseImage = "localhost/corral/pause:3.10"

// pauseSource is the sandbox's first process. It only holds the pod's namespaces, so it waits for SIGTERM or
// SIGINT and reaps the orphans the kernel reparents to it meanwhile.
const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
`

// GoImage builds source, the text of one Go file of package main using only the standard library, into a static
// linux/amd64 binary and returns an image holding only that binary, as /app and its entrypoint. It runs the go
// command found on PATH (go test puts its own there).
func GoImage(ctx context.Context, source string) (v1.Image, error) {
	dir, err := os.MkdirTemp("", "kubetest-go-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module kubetestapp\n\ngo 1.22\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(source), 0o644); err != nil {
		return nil, err
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", "app", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %w: %s", err, out)
	}
	binary, err := os.ReadFile(filepath.Join(dir, "app"))
	if err != nil {
		return nil, err
	}

	img, err := fileImage("/app", binary)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Entrypoint = []string{"/app"}
	return mutate.ConfigFile(img, cfg)
}

// ImportImage imports img into the node's containerd (namespace k8s.io, where the kubelet's images live) under
// ref, a fully qualified reference such as "localhost/corral/test:1", as `ctr images import` does; pods then run
// it with imagePullPolicy Never. The import unpacks it for the overlayfs snapshotter.
func (c *Cluster) ImportImage(ctx context.Context, img v1.Image, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("import %s: %w", ref, err)
	}
	f, err := os.CreateTemp(c.Dir, "image-*.tar")
	if err != nil {
		return fmt.Errorf("import %s: %w", ref, err)
	}
	defer os.Remove(f.Name())
	// The Docker archive format (manifest.json) carries the tag, which ctr imports as the image's name.
	err = tarball.Write(tag, img, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("import %s: write the archive: %w", ref, err)
	}
	return c.ImportArchive(ctx, f.Name())
}

// ImportArchive imports an image archive (docker load's format, or an OCI layout's tar, the references it names
// inside: `corral-image --tar`'s) into the node's containerd, as `ctr images import` does.
func (c *Cluster) ImportArchive(ctx context.Context, path string) error {
	ctr := exec.CommandContext(ctx, filepath.Join(c.bin, "ctr"), "--address", c.layout.containerdSock(),
		"--namespace", "k8s.io", "images", "import", path)
	if out, err := ctr.CombinedOutput(); err != nil {
		return fmt.Errorf("import %s: ctr images import: %w: %s", filepath.Base(path), err, bytes.TrimSpace(out))
	}
	return nil
}
