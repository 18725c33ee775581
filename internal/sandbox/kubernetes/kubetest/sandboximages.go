package kubetest

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/corralhq/corral/internal/image"
)

// The references of the images ImportSandboxImages imports.
const (
	AgentImage   = "localhost/corral/agent:test"
	SandboxImage = "localhost/corral/sandbox:test"
)

// ImportSandboxImages imports the images the kubernetes backend's pods run: AgentImage, which holds only the
// in-sandbox agent at agentInImage (as Corral's own image does: no shell, no cp), and SandboxImage (ImportSandboxImage).
func (c *Cluster) ImportSandboxImages(ctx context.Context, agentPath, agentInImage, rootfs string) error {
	if err := c.importAgentImage(ctx, agentPath, agentInImage); err != nil {
		return err
	}
	return c.ImportSandboxImage(ctx, rootfs)
}

// ImportSandboxImage imports the root filesystem at rootfs (the tests' Debian base) as SandboxImage, one layer.
func (c *Cluster) ImportSandboxImage(ctx context.Context, rootfs string) error {
	img, err := layerImage(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(image.WriteLayer(ctx, pw, rootfs, "")) }()
		return pr, nil
	})
	if err != nil {
		return err
	}
	return c.ImportImage(ctx, img, SandboxImage)
}

func (c *Cluster) importAgentImage(ctx context.Context, agentPath, agentInImage string) error {
	agentBin, err := os.ReadFile(agentPath)
	if err != nil {
		return err
	}
	img, err := fileImage(agentInImage, agentBin)
	if err != nil {
		return err
	}
	return c.ImportImage(ctx, img, AgentImage)
}

// fileImage is a linux/amd64 image of one executable file at path (its parent directories made), nothing else.
func fileImage(path string, data []byte) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	name := strings.TrimPrefix(path, "/")
	var dirs []string
	for d := filepath.Dir(name); d != "."; d = filepath.Dir(d) {
		dirs = append([]string{d + "/"}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(data))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return layerImage(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
}

// layerImage is a linux image of the one layer open reads.
func layerImage(open tarball.Opener) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(open)
	if err != nil {
		return nil, err
	}
	return image.OCIImage(layer)
}
