package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's layout: the user the processes run as, and where things are.
const (
	uid        = 65532
	home       = "/var/lib/corral"
	binDir     = "/usr/local/bin"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	listenPort = "8080"
	source     = "https://github.com/corralhq/corral"
)

type imageMeta struct {
	Created           time.Time
	Version, Revision string
}

type imageInputs struct {
	Platform      v1.Platform
	Corral, Agent string // paths of the binaries
	CABundle      []byte
	Meta          imageMeta
}

type platformImage struct {
	platform v1.Platform
	image    v1.Image
}

// entry is one file or directory of the layer.
type entry struct {
	path string // without a leading slash
	mode fs.FileMode
	uid  int
	data []byte // nil for a directory
}

// layerEntries lists the layer in the order it is written: every directory before what it holds.
func layerEntries(in imageInputs) ([]entry, error) {
	corral, err := os.ReadFile(in.Corral)
	if err != nil {
		return nil, err
	}
	agent, err := os.ReadFile(in.Agent)
	if err != nil {
		return nil, err
	}
	dir := func(p string, mode fs.FileMode, owner int) entry {
		return entry{path: p, mode: mode | fs.ModeDir, uid: owner}
	}
	file := func(p string, mode fs.FileMode, data []byte) entry { return entry{path: p, mode: mode, data: data} }
	return []entry{
		dir("etc", 0o755, 0),
		file("etc/group", 0o644, []byte("root:x:0:\ncorral:x:65532:\n")),
		file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")),
		file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\ncorral:x:65532:65532:corral:"+home+":/sbin/nologin\n")),
		dir("etc/ssl", 0o755, 0),
		dir("etc/ssl/certs", 0o755, 0),
		file(caPath[1:], 0o644, in.CABundle),
		dir("tmp", 0o777|fs.ModeSticky, 0),
		dir("usr", 0o755, 0),
		dir("usr/local", 0o755, 0),
		dir("usr/local/bin", 0o755, 0),
		file("usr/local/bin/corral", 0o755, corral),
		file("usr/local/bin/corral-sandbox-agent", 0o755, agent),
		dir("var", 0o755, 0),
		dir("var/lib", 0o755, 0),
		dir(home[1:], 0o700, uid),
	}, nil
}

// layer writes the entries as a gzipped tar whose every byte follows from them and from the time.
func layer(entries []entry, when time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.path,
			Mode:    int64(e.mode.Perm()),
			Uid:     e.uid,
			Gid:     e.uid,
			ModTime: when,
			Format:  tar.FormatPAX,
		}
		if e.mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if e.mode.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, e.path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// buildImage assembles one platform's image: the layer, and a config that runs `corral serve` as corral.
func buildImage(in imageInputs) (v1.Image, error) {
	entries, err := layerEntries(in)
	if err != nil {
		return nil, err
	}
	gz, err := layer(entries, in.Meta.Created)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	created := v1.Time{Time: in.Meta.Created}
	// The blob is the gzip stream as written (its digest is what makes the image reproducible); the config's
	// diff_id is the digest of the tar inside it, which the runtimes check when they unpack the layer.
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     l,
		History:   v1.History{Created: created, CreatedBy: "corral-image", Comment: "corral and corral-sandbox-agent " + in.Meta.Version},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant = in.Platform.OS, in.Platform.Architecture, in.Platform.Variant
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{binDir + "/corral"},
		Cmd:        []string{"serve"},
		WorkingDir: home,
		Env: []string{
			"PATH=" + binDir,
			"HOME=" + home,
			"SSL_CERT_FILE=" + caPath,
			"CORRAL_DATA=" + home,
			"CORRAL_LISTEN=0.0.0.0:" + listenPort,
		},
		ExposedPorts: map[string]struct{}{listenPort + "/tcp": {}},
		StopSignal:   "SIGTERM",
		Labels:       labels(in.Meta),
	}
	return mutate.ConfigFile(img, cf)
}

// imageIndex is the multi-platform index of the images.
func imageIndex(images []platformImage, meta imageMeta) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range images {
		p := pi.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: pi.image, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.Annotations(idx, labels(meta)).(v1.ImageIndex)
}

// labels are the OCI annotations of the image and its index.
func labels(meta imageMeta) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   "corral",
		"org.opencontainers.image.source":  source,
		"org.opencontainers.image.version": meta.Version,
		"org.opencontainers.image.created": meta.Created.Format(time.RFC3339),
	}
	if meta.Revision != "" {
		l["org.opencontainers.image.revision"] = meta.Revision
	}
	return l
}
