// Package blob is the port to the byte storage behind the Files and Skills APIs: uploaded files, the outputs
// collected from sessions and the archives of skill versions. A blob is written once, under a key, from a
// stream (never held whole in memory), and is visible only once it is complete; it is read back as a stream
// and deleted by key.
//
// Adapters: localfs (a directory under the data directory, the default) and s3 (a bucket of an S3-compatible
// object store, through minio-go, for servers on several machines sharing one PostgreSQL database). Each passes
// the conformance suite in blobtest; s3's against a real SeaweedFS server.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrNotFound: no blob has the key (it was never written completely, or it was deleted).
var ErrNotFound = errors.New("blob not found")

// Store keeps blobs by key.
type Store interface {
	// Put stores everything r yields under key and returns its size. The blob appears whole or not at all: a
	// reader that fails, a cancelled ctx or a crash leaves nothing under the key (a blob it replaces stays).
	// It returns once the blob is durable.
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	// Open returns the blob's content as a stream, and its size. ErrNotFound if there is none.
	Open(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// Delete removes the blob. Idempotent: a missing blob is not an error.
	Delete(ctx context.Context, key string) error
}

// MaxKeyLen bounds a key.
const MaxKeyLen = 512

// CheckKey validates a key: slash-separated segments of ASCII letters, digits, '-', '_' and '.', none empty,
// "." or "..", and none starting with '.': a key names one place under the store's root and nothing else.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("blob: key must be 1 to %d bytes", MaxKeyLen)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg[0] == '.' {
			return fmt.Errorf("blob: invalid key %q: empty segment or one starting with '.'", key)
		}
		for i := range len(seg) {
			c := seg[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
				return fmt.Errorf("blob: invalid key %q: byte %q not allowed", key, c)
			}
		}
	}
	return nil
}
