package kubetest

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
	img, err := layerImage(func() (io.ReadCloser, error) { return tarDir(rootfs), nil })
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

// layerImage is a linux/amd64 image of the one layer open reads.
func layerImage(open tarball.Opener) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(open)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	return mutate.ConfigFile(img, cf)
}

// tarDir streams the tree at root as a tar: regular files, directories and symlinks, owned by root (devices,
// sockets and fifos belong in no image layer).
func tarDir(root string) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || path == root {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				if link, err = os.Readlink(path); err != nil {
					return err
				}
			case !fi.Mode().IsRegular() && !fi.IsDir():
				return nil
			}
			hdr, err := tar.FileInfoHeader(fi, link)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = rel, 0, 0, "", ""
			if fi.IsDir() {
				hdr.Name += "/"
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return nil
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		})
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}
