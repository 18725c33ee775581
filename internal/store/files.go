package store

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// FileStore keeps the metadata of the Files API's files. Their bytes are in a blob store (internal/blob) under
// File.BlobKey; the store records where, with the content's SHA-256.
type FileStore interface {
	// FileCreate stores a new file's metadata; ErrConflict if the id exists.
	FileCreate(ctx context.Context, f *File) error
	// FileGet returns a file's metadata; ErrNotFound if there is none.
	FileGet(ctx context.Context, id string) (*File, error)
	// FileList lists files by (created_at, id), of one scope if ScopeID is set, of the ids in IDs if set.
	FileList(ctx context.Context, p *FileListParams) ([]File, error)
	// FileDelete removes a file's metadata; ErrNotFound if there is none. The caller deletes the blob.
	FileDelete(ctx context.Context, id string) error
	// FileExpired lists up to limit (> 0) files whose expires_at is at or before t, the earliest expiry first.
	FileExpired(ctx context.Context, t time.Time, limit int) ([]File, error)
}

// File is a file's metadata as the store keeps it.
type File struct {
	apitype.File
	// SHA256 is the hex SHA-256 of the content, BlobKey where the blob store keeps it.
	SHA256, BlobKey string
}

// FileListParams selects files. ListParams.IncludeArchived is ignored: files are not archived.
type FileListParams struct {
	ListParams
	ScopeID string
	IDs     []string
}
