// Package localfs is the blob store in a directory of the local filesystem (by default under the server's data
// directory). A blob is a file named by its key; Put writes a temporary file under .tmp, syncs it and renames it
// into place, so a blob appears whole or not at all. Every access goes through an os.Root: a key cannot reach
// outside the directory, whatever links are in it.
package localfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/corralhq/corral/internal/blob"
)

// tmpDir holds blobs being written. Keys cannot start with '.', so it never collides with one.
const tmpDir = ".tmp"

// Store is a blob.Store in a directory.
type Store struct {
	root *os.Root
	dir  string
}

var _ blob.Store = (*Store)(nil)

// Open opens (creating it 0700 if missing) the directory dir as a blob store, and removes what interrupted
// writes left in it.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("localfs: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("localfs: %w", err)
	}
	if err := root.RemoveAll(tmpDir); err != nil {
		root.Close()
		return nil, fmt.Errorf("localfs: clear %s: %w", tmpDir, err)
	}
	if err := root.Mkdir(tmpDir, 0o700); err != nil {
		root.Close()
		return nil, fmt.Errorf("localfs: %w", err)
	}
	return &Store{root: root, dir: dir}, nil
}

// Dir is the directory the blobs are written to (the Files API checks the disk reserve there).
func (s *Store) Dir() string { return s.dir }

// Close releases the directory.
func (s *Store) Close() error { return s.root.Close() }

// ctxReader fails reads once ctx is done, so a long copy stops when its caller gives up.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Put writes r to a temporary file, syncs it and renames it to key.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (n int64, err error) {
	if err := blob.CheckKey(key); err != nil {
		return 0, err
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(tmpDir, hex.EncodeToString(rnd[:]))
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("localfs: put %s: %w", key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = s.root.Remove(tmp)
		}
	}()
	if n, err = io.Copy(f, ctxReader{ctx, r}); err != nil {
		return 0, fmt.Errorf("localfs: put %s: %w", key, err)
	}
	if err = f.Sync(); err != nil {
		return 0, fmt.Errorf("localfs: put %s: sync: %w", key, err)
	}
	if err = f.Close(); err != nil {
		return 0, fmt.Errorf("localfs: put %s: %w", key, err)
	}
	if err = ctx.Err(); err != nil {
		return 0, fmt.Errorf("localfs: put %s: %w", key, err)
	}
	dir := path.Dir(key)
	if dir != "." {
		if err = s.root.MkdirAll(dir, 0o700); err != nil {
			return 0, fmt.Errorf("localfs: put %s: %w", key, err)
		}
	}
	if err = s.root.Rename(tmp, key); err != nil {
		return 0, fmt.Errorf("localfs: put %s: %w", key, err)
	}
	if err = s.syncDir(dir); err != nil {
		return 0, fmt.Errorf("localfs: put %s: sync directory: %w", key, err)
	}
	return n, nil
}

func (s *Store) syncDir(dir string) error {
	d, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Open opens the blob's file.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	if err := blob.CheckKey(key); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	f, err := s.root.Open(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("localfs: %s: %w", key, blob.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("localfs: open %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file: %w", blob.ErrNotFound)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("localfs: open %s: %w", key, err)
	}
	return f, fi.Size(), nil
}

// Delete removes the blob's file.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.root.Remove(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("localfs: delete %s: %w", key, err)
	}
	return nil
}
