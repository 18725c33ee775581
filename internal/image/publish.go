package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/singleflight"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// Publisher is a Service whose images are also pushed to an OCI registry, for the backends whose sandboxes pull
// their image by reference (sandbox.RootFSImageRef: kubernetes). An environment's image there has two layers:
// the base, the same blob in every image, and what the environment's build changed in it (its files, and
// whiteouts for what it removed). Each is pushed once per repository: the layer's directory records the
// digest pushed (a server that restarts, or another server on the cache, does not push it again), and the
// registry is asked for a blob before it is sent.
type Publisher struct {
	*Service
	repo name.Repository
	opts []remote.Option

	pushes singleflight.Group // by layer key

	mu   sync.Mutex
	base map[string]v1.Layer // the base layer by its root filesystem (its digest is computed once)
}

var _ sandbox.ImageRefs = (*Publisher)(nil)

// NewPublisher pushes the images of s to repo ("registry.example.com/corral/env"), with the credentials the
// Docker configuration of the server's user holds for its registry (none: anonymous). A registry on localhost
// or a private address is reached over plain HTTP when it does not answer HTTPS.
func NewPublisher(s *Service, repo string) (*Publisher, error) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return nil, fmt.Errorf("image registry %q: %w", repo, err)
	}
	return &Publisher{Service: s, repo: r, opts: []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)},
		base: map[string]v1.Layer{}}, nil
}

// Ref returns the reference, by digest, of the image of env in the registry, building it if nobody has and
// pushing it if it is not there yet; "" for an environment without packages (the backend's own image).
func (p *Publisher) Ref(ctx context.Context, env *apitype.EnvConfig) (string, error) {
	l := Canonical(env.Packages)
	if l.Empty() {
		return "", nil
	}
	key := LayerKey(p.cfg.Layer, p.baseID, l)
	marker := filepath.Join(LayerDir(p.cfg.Base.Dir, key), "pushed-"+shortHash(p.repo.String()))
	if b, err := os.ReadFile(marker); err == nil {
		return p.repo.Digest(strings.TrimSpace(string(b))).String(), nil
	}
	ch := p.pushes.DoChan(key, func() (any, error) {
		// Not the caller's context: a push others wait for finishes even if the first to ask gives up.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Layer.Timeout)
		defer cancel()
		rootFS, release, err := p.Acquire(ctx, env) // the layer is held against GC until it is pushed
		if err != nil {
			return nil, err
		}
		defer release()
		d, err := p.push(ctx, key, rootFS)
		if err != nil {
			return nil, &sandbox.ImageError{ImageBuildError: apitype.ImageBuildError{
				Message: fmt.Sprintf("pushing the image to %s: %v", p.repo, err)}}
		}
		if err := os.WriteFile(marker, []byte(d.String()+"\n"), 0o644); err != nil {
			p.cfg.Log.Warn("the image's push not recorded", "key", key, "err", err)
		}
		return d, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", r.Err
		}
		return p.repo.Digest(r.Val.(v1.Hash).String()).String(), nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for the environment's image to be pushed: %w", ctx.Err())
	}
}

// push pushes the image of the layer key, whose root filesystem is rootFS, and returns its digest.
func (p *Publisher) push(ctx context.Context, key, rootFS string) (v1.Hash, error) {
	base, err := p.baseReady(ctx)
	if err != nil {
		return v1.Hash{}, err
	}
	baseLayer, err := p.baseLayer(base.RootFS)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("the base layer: %w", err)
	}
	diff, err := treeLayer(rootFS, base.RootFS)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("the packages' layer: %w", err)
	}
	img, err := imageOf(baseLayer, diff)
	if err != nil {
		return v1.Hash{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	start := time.Now()
	p.cfg.Log.Info("pushing an environment's image", "key", key, "image", p.repo.Digest(d.String()).String())
	progress, done := make(chan v1.Update, 16), make(chan struct{})
	go func() {
		last := time.Now()
		for {
			select {
			case u, ok := <-progress:
				if !ok {
					return
				}
				if time.Since(last) >= 5*time.Second && u.Total > 0 {
					last = time.Now()
					p.cfg.Log.Info("pushing an environment's image", "key", key, "done_mb", u.Complete>>20, "total_mb", u.Total>>20)
				}
			case <-done:
				return
			}
		}
	}()
	err = remote.Write(p.repo.Tag(key), img, append(p.opts, remote.WithContext(ctx), remote.WithProgress(progress))...)
	close(done)
	if err != nil {
		return v1.Hash{}, err
	}
	p.cfg.Log.Info("pushed an environment's image", "key", key, "digest", d.String(), "duration", time.Since(start).Round(time.Millisecond))
	return d, nil
}

// baseLayer is the layer of the base at rootFS, made once per process.
func (p *Publisher) baseLayer(rootFS string) (v1.Layer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.base[rootFS]; l != nil {
		return l, nil
	}
	l, err := treeLayer(rootFS, "")
	if err != nil {
		return nil, err
	}
	p.base[rootFS] = l
	return l, nil
}

// imageOf is the linux image of layers, for this machine's architecture, its PATH Debian's.
func imageOf(layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return mutate.ConfigFile(img, cf)
}

// treeLayer is the layer of the tree at root (WriteLayer), gzip-compressed when it is pushed. Its digest is
// computed here, reading the whole tree; each upload reads it again (one that stops early closes the reader,
// which ends the writing).
func treeLayer(root, base string) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(WriteLayer(context.Background(), pw, root, base)) }()
		return pr, nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteLayer writes the tree at root as an image layer's tar: directories, regular files (hard links kept as
// links), symbolic links, with their modes, owners and modification times (devices, sockets and pipes are
// left out: a container's runtime makes its /dev). With base set, root is base with a build's changes applied
// (flatten: base's files hard-linked) and the layer holds only the changes: every directory, each file that is
// not base's, and a whiteout for each of base's entries root lacks. The same tree gives the same bytes.
func WriteLayer(ctx context.Context, w io.Writer, root, base string) error {
	tw := tar.NewWriter(w)
	links := map[uint64]string{} // a file with several names: its first
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if base != "" && !fi.IsDir() && st != nil {
			if b, err := os.Lstat(filepath.Join(base, rel)); err == nil && os.SameFile(fi, b) {
				return nil // the base's
			}
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname, h.AccessTime, h.ChangeTime = rel, "", "", time.Time{}, time.Time{}
		if fi.IsDir() {
			h.Name += "/"
		}
		if fi.Mode().IsRegular() && st != nil && st.Nlink > 1 {
			if first, ok := links[st.Ino]; ok {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				links[st.Ino] = rel
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	})
	if err == nil && base != "" {
		err = writeWhiteouts(tw, root, base)
	}
	if err != nil {
		return err
	}
	return tw.Close()
}

// writeWhiteouts writes a whiteout (.wh.<name>, OCI's) for each entry of base that root lacks.
func writeWhiteouts(tw *tar.Writer, root, base string) error {
	return filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, path)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(filepath.Join(root, rel))
		switch {
		case err == nil && d.IsDir() && !fi.IsDir():
			return fs.SkipDir // root's entry replaces the directory
		case err == nil || !errors.Is(err, fs.ErrNotExist):
			return err
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.Join(filepath.Dir(rel), ".wh."+d.Name()), Mode: 0o600}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
}

// shortHash is a short hex digest of s, for file names.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}
