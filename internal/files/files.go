// Package files is the Files API's storage: a file's bytes streamed into the blob store (bounded in size, its
// SHA-256 computed on the way, never held whole in memory) and its metadata in the store. The API's upload and
// the collection of a session's outputs both create files through it, the placement of file resources reads
// them through it.
package files

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/store"
)

// DefaultMaxBytes is the largest file by default: the hosted Files API's limit, 500 MB.
const DefaultMaxBytes = 500 << 20

// MaxFilenameLen bounds a file's name (bytes).
const MaxFilenameLen = 255

// ErrTooLarge: the content exceeds the service's MaxBytes. Nothing was stored.
var ErrTooLarge = errors.New("file too large")

// ErrEmpty: the content is empty. Nothing was stored.
var ErrEmpty = errors.New("file is empty")

// ErrNoSpace: the disk the files are written to is down to its reserve (SetSpace). Nothing was stored.
var ErrNoSpace = errors.New("the server's disk is nearly full")

// spaceCheckEvery is how many bytes a write may take between two checks of the disk reserve.
const spaceCheckEvery = 4 << 20

// Store is what the service keeps in the store: files and skills.
type Store interface {
	store.FileStore
	store.SkillStore
	store.Owners
}

// Service stores files, and the archives of skill versions.
type Service struct {
	store    Store
	blobs    blob.Store
	maxBytes int64
	// space checks the disk reserve of dir, the blobs' local directory, before and while a blob is written.
	space func(dir string) error
	dir   string
}

// Config configures a Service.
type Config struct {
	Store Store      // the files' and skills' metadata (required)
	Blobs blob.Store // their bytes (required)
	// MaxBytes is the largest file the service stores; <= 0 means DefaultMaxBytes.
	MaxBytes int64
}

// New returns a service over a store and a blob store.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Blobs == nil {
		return nil, errors.New("files: Config.Store and Config.Blobs are required")
	}
	return &Service{store: cfg.Store, blobs: cfg.Blobs, maxBytes: cmp.Or(max(cfg.MaxBytes, 0), DefaultMaxBytes)}, nil
}

// MaxBytes is the largest file the service stores.
func (s *Service) MaxBytes() int64 { return s.maxBytes }

// SetSpace makes every write to a blob store on the local disk (one with a Dir method: localfs) check check(dir)
// before it starts and after every few MiB, and fail with ErrNoSpace (and nothing stored) once it reports an
// error: the sandboxes' disk reserve (volume.Volumes.CheckSpace) then covers the files' writes, uploads and
// collected outputs alike. Call it before the service is used.
func (s *Service) SetSpace(check func(dir string) error) {
	if d, ok := s.blobs.(interface{ Dir() string }); ok {
		s.space, s.dir = check, d.Dir()
	}
}

// spaceReader checks the disk reserve every spaceCheckEvery bytes read through it.
type spaceReader struct {
	r       io.Reader
	check   func() error
	sinceOK int64
}

func (r *spaceReader) Read(p []byte) (int, error) {
	if r.sinceOK >= spaceCheckEvery {
		if err := r.check(); err != nil {
			return 0, err
		}
		r.sinceOK = 0
	}
	p = p[:min(int64(len(p)), spaceCheckEvery-r.sinceOK)]
	n, err := r.r.Read(p)
	r.sinceOK += int64(n)
	return n, err
}

// Content is a file's content as Put stored it.
type Content struct {
	Key    string
	Size   int64
	SHA256 string
}

// limited fails once more than n bytes were read.
type limited struct {
	r io.Reader
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	if l.n < 0 {
		return k, ErrTooLarge
	}
	return k, err
}

// Put streams r into the blob store as the content of file id: ErrTooLarge beyond MaxBytes, ErrEmpty if r
// yields nothing; in both cases, and on any other failure, nothing is left stored.
func (s *Service) Put(ctx context.Context, id string, r io.Reader) (*Content, error) {
	c, err := s.PutBlob(ctx, "files/"+id, r)
	if err != nil {
		return nil, err
	}
	if c.Size == 0 {
		s.Discard(ctx, c)
		return nil, ErrEmpty
	}
	return c, nil
}

// Discard deletes content that Put stored and no metadata names.
func (s *Service) Discard(ctx context.Context, c *Content) {
	_ = s.blobs.Delete(context.WithoutCancel(ctx), c.Key)
}

// Record stores the metadata of a file whose content Put stored; if that fails the content is deleted. A file
// scoped to a session is its session's workspace's (the caller records the owner of any other file first).
func (s *Service) Record(ctx context.Context, meta *apitype.File, c *Content) (*store.File, error) {
	f := &store.File{File: *meta, SHA256: c.SHA256, BlobKey: c.Key}
	f.SizeBytes = c.Size
	err := s.ownScoped(ctx, meta)
	if err == nil {
		err = s.store.FileCreate(ctx, f)
	}
	if err != nil {
		_ = s.blobs.Delete(context.WithoutCancel(ctx), c.Key)
		return nil, fmt.Errorf("files: record %s: %w", meta.ID, err)
	}
	return f, nil
}

// ownScoped records that a file scoped to a session belongs to the session's workspace.
func (s *Service) ownScoped(ctx context.Context, meta *apitype.File) error {
	if meta.Scope == nil || meta.Scope.Type != apitype.FileScopeSession {
		return nil
	}
	ws, err := s.store.OwnerOf(ctx, meta.Scope.ID)
	if err != nil {
		return err
	}
	return s.store.Own(ctx, meta.ID, ws)
}

// Create stores a new file from content under a new id, with the given scope: Put, then Record.
func (s *Service) Create(ctx context.Context, filename, mimeType string, scope *apitype.FileScope, content io.Reader) (*store.File, error) {
	meta := &apitype.File{Type: apitype.ObjectFile, ID: apitype.NewID(apitype.PrefixFile), Filename: CleanFilename(filename, mimeType),
		MimeType: MimeType(filename, mimeType), CreatedAt: apitype.Now(), Downloadable: true, Scope: scope}
	c, err := s.Put(ctx, meta.ID, content)
	if err != nil {
		return nil, err
	}
	return s.Record(ctx, meta, c)
}

// Open returns a file's metadata and its content; ErrNotFound (the store's) if there is no such file.
func (s *Service) Open(ctx context.Context, id string) (*store.File, io.ReadCloser, error) {
	f, err := s.store.FileGet(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	rc, _, err := s.blobs.Open(ctx, f.BlobKey)
	if err != nil {
		return nil, nil, fmt.Errorf("files: content of %s: %w", id, err)
	}
	return f, rc, nil
}

// Delete removes a file's metadata, then its content.
func (s *Service) Delete(ctx context.Context, id string) error {
	f, err := s.store.FileGet(ctx, id)
	if err != nil {
		return err
	}
	if err := s.store.FileDelete(ctx, id); err != nil {
		return err
	}
	if err := s.blobs.Delete(context.WithoutCancel(ctx), f.BlobKey); err != nil {
		return fmt.Errorf("files: delete the content of %s: %w", id, err)
	}
	return nil
}

// CleanFilename keeps the final path component of a client's file name (either slash), as valid UTF-8 without
// control characters, at most MaxFilenameLen bytes; an empty name becomes "unnamed" plus the extension of the
// MIME type, when one is known.
func CleanFilename(name, mimeType string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	name = strings.TrimSpace(name)
	if name == "." || name == ".." {
		name = ""
	}
	for len(name) > MaxFilenameLen {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" {
		name = "unnamed"
		if exts, _ := mime.ExtensionsByType(MimeType("", mimeType)); len(exts) > 0 {
			name += exts[0]
		}
	}
	return name
}

// MimeType is the file's MIME type: the client's (without parameters) unless it is missing or generic, then the
// one of the name's extension, else application/octet-stream.
func MimeType(name, given string) string {
	if mt, _, err := mime.ParseMediaType(given); err == nil && mt != "application/octet-stream" {
		return mt
	}
	if mt := mime.TypeByExtension(path.Ext(name)); mt != "" {
		if base, _, err := mime.ParseMediaType(mt); err == nil {
			return base
		}
	}
	return "application/octet-stream"
}

// OpenContent returns the content of a file (the workspace places file resources with it).
func (s *Service) OpenContent(ctx context.Context, id string) (io.ReadCloser, error) {
	_, rc, err := s.Open(ctx, id)
	return rc, err
}

// CreateOutput stores a file a session left in its outputs directory, scoped to the session, and returns its id
// (the workspace collects outputs with it).
func (s *Service) CreateOutput(ctx context.Context, sessionID, name string, content io.Reader) (string, error) {
	f, err := s.Create(ctx, name, "", &apitype.FileScope{Type: apitype.FileScopeSession, ID: sessionID}, content)
	if err != nil {
		return "", err
	}
	return f.ID, nil
}

// PutBlob streams r into the blob store under key (a skill version's archive), bounded by MaxBytes, and
// returns its size and SHA-256. Nothing is left stored on failure.
func (s *Service) PutBlob(ctx context.Context, key string, r io.Reader) (*Content, error) {
	h := sha256.New()
	var src io.Reader = &limited{r: r, n: s.maxBytes}
	if s.space != nil {
		check := func() error {
			if err := s.space(s.dir); err != nil {
				return fmt.Errorf("%w: %w", ErrNoSpace, err)
			}
			return nil
		}
		if err := check(); err != nil {
			return nil, err
		}
		src = &spaceReader{r: src, check: check}
	}
	n, err := s.blobs.Put(ctx, key, io.TeeReader(src, h))
	if err != nil {
		switch {
		case errors.Is(err, ErrTooLarge):
			return nil, ErrTooLarge
		case errors.Is(err, ErrNoSpace):
			return nil, err
		}
		return nil, fmt.Errorf("files: store %s: %w", key, err)
	}
	return &Content{Key: key, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// OpenBlob opens a blob by key.
func (s *Service) OpenBlob(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	return s.blobs.Open(ctx, key)
}

// DeleteBlob deletes a blob by key (idempotent).
func (s *Service) DeleteBlob(ctx context.Context, key string) error {
	return s.blobs.Delete(context.WithoutCancel(ctx), key)
}

// OpenSkill returns a skill version's metadata and its archive; version may be "latest".
func (s *Service) OpenSkill(ctx context.Context, skillID, version string) (*store.SkillVersion, io.ReadCloser, error) {
	v, err := s.store.SkillVersionGet(ctx, skillID, version)
	if err != nil {
		return nil, nil, err
	}
	rc, _, err := s.blobs.Open(ctx, v.BlobKey)
	if err != nil {
		return nil, nil, fmt.Errorf("files: archive of skill %s version %s: %w", skillID, v.ID, err)
	}
	return v, rc, nil
}

// OpenSkillArchive returns the name of a skill version and its zip (the workspace places skills with it).
func (s *Service) OpenSkillArchive(ctx context.Context, skillID, version string) (string, io.ReadCloser, error) {
	v, rc, err := s.OpenSkill(ctx, skillID, version)
	if err != nil {
		return "", nil, err
	}
	return v.Name, rc, nil
}

// sweepBatch is how many expired files one round of SweepExpired lists.
const sweepBatch = 100

// SweepExpired deletes the files expired at now, metadata and bytes, and returns how many it deleted.
func (s *Service) SweepExpired(ctx context.Context, now time.Time) (int, error) {
	n := 0
	for {
		batch, err := s.store.FileExpired(ctx, now, sweepBatch)
		if err != nil {
			return n, fmt.Errorf("files: expired files: %w", err)
		}
		for _, f := range batch {
			if err := s.Delete(ctx, f.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return n, err
			}
			n++
		}
		if len(batch) < sweepBatch {
			return n, nil
		}
	}
}
