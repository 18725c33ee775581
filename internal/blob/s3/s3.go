// Package s3 is the blob store in a bucket of an S3-compatible object store (AWS S3, MinIO, SeaweedFS, Ceph...),
// through minio-go: for deployments where several servers share one PostgreSQL database and must see the same
// bytes. A blob is the object named by the configured prefix and its key.
//
// Put streams: it reads the blob in parts of PartSize bytes (16 MiB by default), so one upload holds at most one
// part in memory whatever its size (and a blob of up to 256 KiB no more than itself). A blob that fits in one part is written with a single PUT; a larger one with
// a multipart upload that is completed only once the reader is drained, and aborted when the reader fails or ctx
// is cancelled, so a blob appears whole or not at all (S3 never shows an incomplete multipart upload as an
// object, and an aborted one leaves no parts behind).
package s3

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/corralhq/corral/internal/blob"
)

// DefaultPartSize is the size of one part of a multipart upload, and so the memory one upload holds.
const DefaultPartSize = 16 << 20

// minPartSize is S3's smallest part (but the last).
const minPartSize = 5 << 20

// maxParts is S3's largest count of parts in one upload: with the default part size, a blob of up to 160 GB.
const maxParts = 10000

// smallSize is the buffer a blob is first read into: one that fits takes no part-sized buffer.
const smallSize = 256 << 10

// abortTimeout bounds the abort of a failed multipart upload, which runs even when the caller's ctx is done.
const abortTimeout = 30 * time.Second

// Config says where the bucket is and how to reach it.
type Config struct {
	// Endpoint is the server: "host[:port]" (HTTPS) or a URL, "https://host[:port]" or "http://host[:port]"
	// (plain HTTP, for a server on a trusted network only).
	Endpoint string
	// Bucket holds the blobs; it must exist.
	Bucket string
	// Prefix is put before every key ("corral/" keeps the blobs under one folder of a shared bucket); empty
	// for none. It must itself be a valid key followed by '/', or empty.
	Prefix string
	// Region of the bucket; empty lets the client find it out.
	Region string
	// AccessKey and SecretKey sign requests; both empty for anonymous access.
	AccessKey, SecretKey string
	// PartSize is the size of one part of a multipart upload, at least 5 MiB; 0 for DefaultPartSize.
	PartSize int64
	// Transport carries the requests; nil for a default one.
	Transport http.RoundTripper
}

func (c *Config) validate() error {
	if c.Endpoint == "" {
		return errors.New("s3: an endpoint is required")
	}
	if c.Bucket == "" {
		return errors.New("s3: a bucket is required")
	}
	if c.Prefix != "" {
		if !strings.HasSuffix(c.Prefix, "/") {
			return fmt.Errorf("s3: prefix %q must end with '/'", c.Prefix)
		}
		if err := blob.CheckKey(strings.TrimSuffix(c.Prefix, "/")); err != nil {
			return fmt.Errorf("s3: prefix: %w", err)
		}
	}
	if c.PartSize != 0 && c.PartSize < minPartSize {
		return fmt.Errorf("s3: part size %d is below S3's minimum of %d bytes", c.PartSize, minPartSize)
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return errors.New("s3: an access key needs its secret key, and the other way round")
	}
	return nil
}

// Store is a blob.Store in a bucket.
type Store struct {
	core     minio.Core
	bucket   string
	prefix   string
	partSize int64
	bufs     sync.Pool // *[]byte of partSize bytes
	small    sync.Pool // *[]byte of smallSize bytes
}

var _ blob.Store = (*Store)(nil)

// Open connects to the bucket and checks that it exists (and that the credentials may see it).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	host, secure := cfg.Endpoint, true
	if strings.Contains(cfg.Endpoint, "://") {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("s3: endpoint: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") != "" ||
			u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("s3: endpoint %q must be host[:port] or http(s)://host[:port]", cfg.Endpoint)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	opts := &minio.Options{Secure: secure, Region: cfg.Region, Transport: cfg.Transport}
	if cfg.AccessKey != "" {
		opts.Creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	}
	client, err := minio.New(host, opts)
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3: bucket %s: %w", cfg.Bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("s3: bucket %s does not exist", cfg.Bucket)
	}
	s := &Store{core: minio.Core{Client: client}, bucket: cfg.Bucket, prefix: cfg.Prefix,
		partSize: cmp.Or(cfg.PartSize, DefaultPartSize)}
	s.bufs.New = func() any { b := make([]byte, s.partSize); return &b }
	s.small.New = func() any { b := make([]byte, smallSize); return &b }
	return s, nil
}

// Close releases nothing (the HTTP client's idle connections close on their own); it is here for symmetry.
func (s *Store) Close() error { return nil }

func (s *Store) object(key string) (string, error) {
	if err := blob.CheckKey(key); err != nil {
		return "", err
	}
	return s.prefix + key, nil
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	obj, err := s.object(key)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// Most blobs are small: read into a small buffer first, and take a part's buffer only for a larger one.
	sp := s.small.Get().(*[]byte)
	n, err := readPart(ctx, r, *sp)
	if err == io.EOF {
		defer s.small.Put(sp)
		return s.putOne(ctx, key, obj, (*sp)[:n])
	}
	if err != nil {
		s.small.Put(sp)
		return 0, err
	}
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	buf := *bp
	copy(buf, (*sp)[:n])
	s.small.Put(sp)
	k, err := readPart(ctx, r, buf[n:])
	n += k
	if err == io.EOF {
		return s.putOne(ctx, key, obj, buf[:n])
	}
	if err != nil {
		return 0, err
	}
	return s.putMultipart(ctx, key, obj, r, buf)
}

// putOne uploads a whole blob with one PUT, which S3 applies whole or not at all.
func (s *Store) putOne(ctx context.Context, key, obj string, b []byte) (int64, error) {
	md5b64, sha := sums(b)
	if _, err := s.core.PutObject(ctx, s.bucket, obj, bytes.NewReader(b), int64(len(b)), md5b64, sha,
		minio.PutObjectOptions{}); err != nil {
		return 0, s.fail(ctx, "put", key, err)
	}
	return int64(len(b)), nil
}

// putMultipart uploads the blob whose first part fills buf, and the rest of r, as a multipart upload.
func (s *Store) putMultipart(ctx context.Context, key, obj string, r io.Reader, buf []byte) (_ int64, err error) {
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, obj, minio.PutObjectOptions{})
	if err != nil {
		return 0, s.fail(ctx, "start upload", key, err)
	}
	defer func() {
		if err == nil {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		if aerr := s.core.AbortMultipartUpload(actx, s.bucket, obj, id); aerr != nil {
			err = errors.Join(err, fmt.Errorf("s3: abort upload of %s: %w", key, aerr))
		}
	}()
	var parts []minio.CompletePart
	var total int64
	n, last := len(buf), false
	for {
		if len(parts) == maxParts {
			return 0, fmt.Errorf("s3: %s is larger than %d parts of %d bytes", key, maxParts, s.partSize)
		}
		md5b64, sha := sums(buf[:n])
		p, err := s.core.PutObjectPart(ctx, s.bucket, obj, id, len(parts)+1, bytes.NewReader(buf[:n]), int64(n),
			minio.PutObjectPartOptions{Md5Base64: md5b64, Sha256Hex: sha})
		if err != nil {
			return 0, s.fail(ctx, "upload part", key, err)
		}
		parts = append(parts, minio.CompletePart{PartNumber: p.PartNumber, ETag: p.ETag})
		total += int64(n)
		if last {
			break
		}
		n, err = readPart(ctx, r, buf)
		if err == io.EOF {
			if n == 0 {
				break // the previous part was the last (a part cannot be empty)
			}
			last = true
		} else if err != nil {
			return 0, err
		}
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, obj, id, parts, minio.PutObjectOptions{}); err != nil {
		return 0, s.fail(ctx, "complete upload", key, err)
	}
	return total, nil
}

// readPart fills buf from r: io.EOF when r ended (n bytes read, possibly fewer than buf holds), nil when buf is
// full and r may hold more; r's own error, or ctx's, otherwise.
func readPart(ctx context.Context, r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, err := r.Read(buf[n:])
		n += k
		if err == io.EOF {
			return n, io.EOF
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func sums(b []byte) (md5b64, sha256hex string) {
	m := md5.Sum(b)
	h := sha256.Sum256(b)
	return base64.StdEncoding.EncodeToString(m[:]), hex.EncodeToString(h[:])
}

// fail wraps a failed request's error, with ctx's error when ctx ended (the client's own error may not say so).
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = errors.Join(cerr, err)
	}
	return fmt.Errorf("s3: %s %s: %w", op, key, err)
}

// Open implements blob.Store.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	obj, err := s.object(key)
	if err != nil {
		return nil, 0, err
	}
	rc, info, _, err := s.core.GetObject(ctx, s.bucket, obj, minio.GetObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, 0, fmt.Errorf("s3: %s: %w", key, blob.ErrNotFound)
		}
		return nil, 0, s.fail(ctx, "get", key, err)
	}
	return rc, info.Size, nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	obj, err := s.object(key)
	if err != nil {
		return err
	}
	if err := s.core.RemoveObject(ctx, s.bucket, obj, minio.RemoveObjectOptions{}); err != nil &&
		minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}
