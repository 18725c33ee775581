package image

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/netip"
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
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
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

	mu     sync.Mutex
	base   map[string]v1.Layer // the base layer by its root filesystem (its digest is computed once)
	pushed map[string]v1.Hash  // the images this process pushed or found in the registry, by layer key
}

var _ sandbox.ImageRefs = (*Publisher)(nil)

// NewPublisher pushes the images of s to repo ("registry.example.com/corral/env"), with the credentials the
// Docker configuration of the server's user holds for its registry (none: anonymous), over TLS unless the
// registry is on this host (tlsUnlessLocal).
func NewPublisher(s *Service, repo string) (*Publisher, error) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return nil, fmt.Errorf("image registry %q: %w", repo, err)
	}
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithTransport(tlsUnlessLocal{remote.DefaultTransport})}
	return &Publisher{Service: s, repo: r, opts: opts,
		base: map[string]v1.Layer{}, pushed: map[string]v1.Hash{}}, nil
}

// Ref returns the reference, by digest, of the image of env in the registry, building it if nobody has and
// pushing it if it is not there yet; "" for an environment without packages (the backend's own image).
func (p *Publisher) Ref(ctx context.Context, env *apitype.EnvConfig) (string, error) {
	l := Canonical(env.Packages)
	if l.Empty() {
		return "", nil
	}
	key := LayerKey(p.cfg.Layer, p.baseID, l)
	if d, ok := p.known(ctx, key); ok {
		return p.repo.Digest(d.String()).String(), nil
	}
	ch := p.pushes.DoChan(key, func() (any, error) {
		if d, ok := p.known(ctx, key); ok { // pushed by a flight that ended since
			return d, nil
		}
		// The service's context, not the caller's: a push others wait for finishes even if the first to ask
		// gives up, and ends with the service.
		actx, cancel := context.WithTimeout(p.ctx, p.cfg.Layer.Timeout)
		defer cancel()
		rootFS, release, err := p.Acquire(actx, env) // the layer is held against GC until it is pushed
		if err != nil {
			return nil, err
		}
		defer release()
		pctx, cancel := context.WithTimeout(p.ctx, pushTimeout)
		defer cancel()
		d, err := p.push(pctx, key, rootFS)
		if err != nil {
			p.cfg.Log.Warn("an environment's image was not pushed", "key", key, "repository", p.repo.String(), "err", err)
			return nil, &sandbox.ImageError{ImageBuildError: apitype.ImageBuildError{
				Message: fmt.Sprintf("pushing the image to %s failed (the server's log has the registry's answer)", p.repo)}}
		}
		p.record(key, d)
		return d, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", r.Err
		}
		return p.repo.Digest(r.Val.(v1.Hash).String()).String(), nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for the environment's image to be built and pushed: %w", ctx.Err())
	}
}

// pushTimeout bounds one push of an image.
const pushTimeout = 30 * time.Minute

// known returns the digest of the image of key in the registry if this process pushed it or found it there;
// else, if the layer's record (written by a push of this or another process) names one, it asks the registry
// for it, once per process: a record whose image the registry no longer has (wiped, collected) is removed.
func (p *Publisher) known(ctx context.Context, key string) (v1.Hash, bool) {
	p.mu.Lock()
	d, ok := p.pushed[key]
	p.mu.Unlock()
	if ok {
		return d, true
	}
	marker := p.marker(key)
	b, err := os.ReadFile(marker)
	if err != nil {
		return v1.Hash{}, false
	}
	if d, err = v1.NewHash(strings.TrimSpace(string(b))); err != nil {
		_ = os.Remove(marker) // not a record of ours
		return v1.Hash{}, false
	}
	if _, err := remote.Head(p.repo.Digest(d.String()), append(p.opts, remote.WithContext(ctx))...); err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			_ = os.Remove(marker)
		}
		return v1.Hash{}, false
	}
	p.mu.Lock()
	p.pushed[key] = d
	p.mu.Unlock()
	return d, true
}

// record notes that the image of key is in the registry, in memory and in the layer's directory (written
// whole: a temporary file renamed).
func (p *Publisher) record(key string, d v1.Hash) {
	p.mu.Lock()
	p.pushed[key] = d
	p.mu.Unlock()
	marker := p.marker(key)
	tmp := marker + ".tmp-" + rand.Text()[:8]
	err := os.WriteFile(tmp, []byte(d.String()+"\n"), 0o644)
	if err == nil {
		err = os.Rename(tmp, marker)
	}
	if err != nil {
		_ = os.Remove(tmp)
		p.cfg.Log.Warn("the image's push not recorded", "key", key, "err", err)
	}
}

// marker is the file of the layer key that records the digest of its image in p's repository.
func (p *Publisher) marker(key string) string {
	return filepath.Join(LayerDir(p.cfg.Base.Dir, key), "pushed-"+shortHash(p.repo.String()))
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
	// A tag of its own per image: another server's image of the same key (its directories' times differ) keeps
	// its tag.
	err = remote.Write(p.repo.Tag(key+"-"+d.Hex[:12]), img, append(p.opts, remote.WithContext(ctx), remote.WithProgress(progress))...)
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

// imageOf is the linux OCI image of layers, for this machine's architecture, its PATH Debian's.
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

// treeLayer is the layer of the tree at root (WriteLayer), gzip-compressed when it is pushed. Its digests are
// computed here and when the image is made, each reading the whole tree; each upload reads it again (one that
// stops early closes the reader, which ends the writing).
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
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{} // a file with several names: its first
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
		if !inLayer(fi) {
			return nil
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
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
			if first, ok := links[inode{st.Dev, st.Ino}]; ok {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				links[inode{st.Dev, st.Ino}] = rel
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

// inLayer reports whether a layer holds an entry like fi: a directory, a regular file or a symbolic link.
func inLayer(fi fs.FileInfo) bool {
	return fi.IsDir() || fi.Mode().IsRegular() || fi.Mode()&fs.ModeSymlink != 0
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
		case err == nil && inLayer(fi) && d.IsDir() && !fi.IsDir():
			return fs.SkipDir // root's entry replaces the directory
		case err == nil && inLayer(fi):
			return nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return err
		}
		// Not in root, or of a kind no layer holds: hidden.
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

// tlsUnlessLocal refuses plain HTTP to anything but this host: go-containerregistry falls back to HTTP for a
// registry at a private address, where the credentials it sends would cross the network in the clear.
type tlsUnlessLocal struct{ http.RoundTripper }

func (t tlsUnlessLocal) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" {
		h := r.URL.Hostname()
		if ip, err := netip.ParseAddr(h); h != "localhost" && (err != nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("plain HTTP to %s refused: only a registry on this host is reached without TLS", r.URL.Host)
		}
	}
	return t.RoundTripper.RoundTrip(r)
}
