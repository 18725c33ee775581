package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// MemoryStore keeps the memory stores, their memories (each with its current content) and every version of
// them. A memory's path is unique in its store, compared byte for byte (and ordered so: adapters use a binary
// collation). Versions stay when their memory is deleted and go with their store.
type MemoryStore interface {
	// MemoryStoreCreate stores a new memory store; ErrConflict if the id exists.
	MemoryStoreCreate(ctx context.Context, s *apitype.MemoryStore) error
	// MemoryStoreGet returns a memory store, archived or not; ErrNotFound if there is none.
	MemoryStoreGet(ctx context.Context, id string) (*apitype.MemoryStore, error)
	// MemoryStoreUpdate reads the store, applies fn and writes the result, atomically (the Update rule).
	MemoryStoreUpdate(ctx context.Context, id string, fn func(*apitype.MemoryStore) error) (*apitype.MemoryStore, error)
	// MemoryStoreList lists memory stores by (created_at, id).
	MemoryStoreList(ctx context.Context, p *ListParams) ([]apitype.MemoryStore, error)
	// MemoryStoreDelete removes a store with its memories and their versions; ErrNotFound if there is none.
	MemoryStoreDelete(ctx context.Context, id string) error
	// MemoryStoreArchive marks the store archived at p.At (idempotent: an archived store keeps its time).
	MemoryStoreArchive(ctx context.Context, p *ArchiveParams) (*apitype.MemoryStore, error)

	// MemoryWrite applies one change to a store's memories with the version that records it, in one
	// transaction, by the rule WriteMemory.
	MemoryWrite(ctx context.Context, p *MemoryWriteParams) (*MemoryWriteResult, error)
	// MemoryGet returns a memory of a store with its content; ErrNotFound if the store has no such memory.
	MemoryGet(ctx context.Context, storeID, id string) (*apitype.Memory, error)
	// MemoryList lists a store's memories in path order, rolled up below p.Depth (the rule ListMemories);
	// ErrNotFound if the store does not exist.
	MemoryList(ctx context.Context, p *MemoryListParams) ([]MemoryItem, error)

	// MemoryVersionGet returns a version of a store's memories; ErrNotFound if there is none.
	MemoryVersionGet(ctx context.Context, storeID, id string) (*apitype.MemoryVersion, error)
	// MemoryVersionList lists a store's versions, newest first (created_at, id descending), with p's filters;
	// ErrNotFound if the store does not exist.
	MemoryVersionList(ctx context.Context, p *MemoryVersionListParams) ([]apitype.MemoryVersion, error)
	// MemoryVersionRedact clears a version's path and content (the rule RedactMemoryVersion).
	MemoryVersionRedact(ctx context.Context, p *MemoryRedactParams) (*apitype.MemoryVersion, error)
}

// Memory store errors, each wrapping a sentinel above.
var (
	// ErrMemoryPrecondition: the memory's content_sha256 is not the one the write expected.
	ErrMemoryPrecondition = fmt.Errorf("%w: the memory's content_sha256 does not match the precondition", ErrConflict)
	// ErrMemoryPathTaken: another memory of the store has the path.
	ErrMemoryPathTaken = fmt.Errorf("%w: another memory of the store has this path", ErrConflict)
	// ErrMemoryStoreArchived: the store is archived; its memories are read and delete only.
	ErrMemoryStoreArchived = fmt.Errorf("%w: the memory store is archived; its memories can only be read or deleted", ErrConflict)
	// ErrMemoryVersionCurrent: a memory's current version cannot be redacted; update or delete the memory first.
	ErrMemoryVersionCurrent = fmt.Errorf("%w: this is the memory's current version; update or delete the memory before redacting it", ErrConflict)
)

// MemoryOp is the change a MemoryWrite makes.
type MemoryOp int

// Memory writes.
const (
	// MemoryOpCreate creates a memory at Path with Content (ErrMemoryPathTaken if the path is taken).
	MemoryOpCreate MemoryOp = iota + 1
	// MemoryOpUpdate changes memory ID's Content and/or Path (a rename keeps the id); a change to neither
	// writes no version.
	MemoryOpUpdate
	// MemoryOpDelete deletes memory ID.
	MemoryOpDelete
	// MemoryOpPut writes Content at Path: an update of the memory there, or a create if there is none (what a
	// session's mount writes back). A concurrent create of the same path makes it an update: no write is lost.
	MemoryOpPut
)

// MemoryWriteParams is one change of a store's memories.
type MemoryWriteParams struct {
	StoreID string
	Op      MemoryOp
	// ID is the memory updated or deleted (MemoryOpUpdate, MemoryOpDelete).
	ID string
	// Path is the memory's path (create, put) or its new path (update: nil keeps it). Validated by the caller.
	Path *string
	// Content is the memory's content (create, put) or its new content (update: nil keeps it).
	Content *string
	// ExpectSHA256, if set, is the content_sha256 the memory must have (update, delete, put of an existing
	// memory): ErrMemoryPrecondition otherwise.
	ExpectSHA256 string
	Actor        apitype.Actor
	At           time.Time
	// NewMemoryID and NewVersionID are the ids a created memory and a written version take.
	NewMemoryID, NewVersionID string
}

// MemoryWriteResult is what a MemoryWrite did: the memory as it now is (nil after a delete) and the version
// written (nil for a no-op update).
type MemoryWriteResult struct {
	Memory  *apitype.Memory
	Version *apitype.MemoryVersion
}

// MemoryListParams lists a store's memories in path order.
type MemoryListParams struct {
	StoreID string
	// Prefix keeps the memories whose path starts with it ("" or "/": all); it ends with "/".
	Prefix string
	// Depth > 0 lists the memories at most Depth segments below Prefix and rolls each deeper group up into one
	// MemoryItem.Prefix; 0 lists every memory below Prefix.
	Depth int
	Limit int
	// After continues after the item of this path (a memory's path or a roll-up's).
	After string
	// Content includes each memory's content (the full view).
	Content bool
}

// MemoryItem is an item of a memory list: a memory, or the path of a roll-up (ending in "/").
type MemoryItem struct {
	Memory *apitype.Memory
	Prefix string
}

// MemoryVersionListParams selects a store's versions.
type MemoryVersionListParams struct {
	StoreID          string
	MemoryID         string
	SessionID        string // created by this session (a session_actor)
	APIKeyID         string // created by this API key (an api_actor)
	ServiceAccountID string
	Operation        apitype.MemoryOperation
	CreatedFrom      *time.Time // created_at >= t
	CreatedTo        *time.Time // created_at <= t
	Limit            int
	After            *Cursor // continue after this version (newest first)
	Content          bool    // include content (the full view)
}

// MemoryRedactParams redacts a version.
type MemoryRedactParams struct {
	StoreID, ID string
	Actor       apitype.Actor
	At          time.Time
}

// MemoryTx is what the rules of MemoryStore need of an adapter's write transaction. The rows it reads are
// locked against concurrent writers until the transaction ends (where the adapter has any).
type MemoryTx interface {
	// Store reads a memory store (ErrNotFound).
	Store(id string) (*apitype.MemoryStore, error)
	// MemoryByID and MemoryByPath read a memory of the store with its content (ErrNotFound).
	MemoryByID(storeID, id string) (*apitype.Memory, error)
	MemoryByPath(storeID, path string) (*apitype.Memory, error)
	// InsertMemory adds a memory (ErrMemoryPathTaken if its path is taken); UpdateMemory rewrites one (its
	// path and content may change; ErrMemoryPathTaken if the new path is taken); DeleteMemory removes one.
	InsertMemory(m *apitype.Memory) error
	UpdateMemory(m *apitype.Memory) error
	DeleteMemory(storeID, id string) error
	// Version reads a version (ErrNotFound); InsertVersion adds one; PutVersion rewrites one (redaction).
	Version(storeID, id string) (*apitype.MemoryVersion, error)
	InsertVersion(v *apitype.MemoryVersion) error
	PutVersion(v *apitype.MemoryVersion) error
}

// WriteMemory is MemoryWrite's rule. The store must exist (ErrNotFound) and, but for a delete, not be archived
// (ErrMemoryStoreArchived); the memory updated or deleted must exist (ErrNotFound) and hold p.ExpectSHA256 if
// set (ErrMemoryPrecondition); a path must be free (ErrMemoryPathTaken). Every change but a no-op update writes a
// version with p.Actor.
func WriteMemory(tx MemoryTx, p *MemoryWriteParams) (*MemoryWriteResult, error) {
	st, err := tx.Store(p.StoreID)
	if err != nil {
		return nil, err
	}
	if st.ArchivedAt != nil && p.Op != MemoryOpDelete {
		return nil, ErrMemoryStoreArchived
	}
	var cur *apitype.Memory
	switch p.Op {
	case MemoryOpCreate:
		if p.Path == nil || p.Content == nil {
			return nil, errors.New("store: memory create needs a path and content")
		}
	case MemoryOpPut:
		if p.Path == nil || p.Content == nil {
			return nil, errors.New("store: memory put needs a path and content")
		}
		cur, err = tx.MemoryByPath(p.StoreID, *p.Path)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	case MemoryOpUpdate, MemoryOpDelete:
		if cur, err = tx.MemoryByID(p.StoreID, p.ID); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("store: unknown memory write %d", p.Op)
	}
	if cur != nil && p.ExpectSHA256 != "" && cur.ContentSHA256 != p.ExpectSHA256 {
		return nil, ErrMemoryPrecondition
	}
	if cur == nil { // create, or put of a new path
		content := *p.Content
		m := &apitype.Memory{
			Type: apitype.ObjectMemory, ID: p.NewMemoryID, MemoryStoreID: p.StoreID, Path: *p.Path,
			Content: &content, ContentSHA256: apitype.ContentSHA256(content), ContentSizeBytes: int64(len(content)),
			MemoryVersionID: p.NewVersionID, CreatedAt: p.At, UpdatedAt: p.At,
		}
		if err := tx.InsertMemory(m); err != nil {
			return nil, err
		}
		v := versionOf(m, apitype.MemoryCreated, p)
		return &MemoryWriteResult{Memory: m, Version: v}, tx.InsertVersion(v)
	}
	if p.Op == MemoryOpDelete {
		if err := tx.DeleteMemory(p.StoreID, cur.ID); err != nil {
			return nil, err
		}
		v := versionOf(cur, apitype.MemoryDeleted, p)
		return &MemoryWriteResult{Version: v}, tx.InsertVersion(v)
	}
	next := *cur
	if p.Path != nil {
		next.Path = *p.Path
	}
	if p.Content != nil {
		content := *p.Content
		next.Content, next.ContentSHA256, next.ContentSizeBytes = &content, apitype.ContentSHA256(content), int64(len(content))
	}
	if next.Path == cur.Path && next.ContentSHA256 == cur.ContentSHA256 {
		return &MemoryWriteResult{Memory: cur}, nil // a no-op writes no version
	}
	next.MemoryVersionID, next.UpdatedAt = p.NewVersionID, p.At
	if err := tx.UpdateMemory(&next); err != nil {
		return nil, err
	}
	v := versionOf(&next, apitype.MemoryModified, p)
	return &MemoryWriteResult{Memory: &next, Version: v}, tx.InsertVersion(v)
}

// versionOf is the version that records operation op on memory m (as it is after a create or update, as it was
// before a delete).
func versionOf(m *apitype.Memory, op apitype.MemoryOperation, p *MemoryWriteParams) *apitype.MemoryVersion {
	actor := p.Actor
	path := m.Path
	v := &apitype.MemoryVersion{
		Type: apitype.ObjectMemoryVersion, ID: p.NewVersionID, MemoryID: m.ID, MemoryStoreID: m.MemoryStoreID,
		Operation: op, CreatedAt: p.At, Path: &path, CreatedBy: &actor,
	}
	if op != apitype.MemoryDeleted {
		content, sum, size := *m.Content, m.ContentSHA256, m.ContentSizeBytes
		v.Content, v.ContentSHA256, v.ContentSizeBytes = &content, &sum, &size
	}
	return v
}

// RedactMemoryVersion is MemoryVersionRedact's rule: the version's path, content, digest and size go, and it
// records who redacted it and when; redacting a redacted version changes nothing. The current version of a
// memory that exists cannot be redacted (ErrMemoryVersionCurrent): its content is the memory's.
func RedactMemoryVersion(tx MemoryTx, p *MemoryRedactParams) (*apitype.MemoryVersion, error) {
	if _, err := tx.Store(p.StoreID); err != nil {
		return nil, err
	}
	v, err := tx.Version(p.StoreID, p.ID)
	if err != nil {
		return nil, err
	}
	if v.RedactedAt != nil {
		return v, nil
	}
	m, err := tx.MemoryByID(p.StoreID, v.MemoryID)
	switch {
	case err == nil && m.MemoryVersionID == v.ID:
		return nil, ErrMemoryVersionCurrent
	case err != nil && !errors.Is(err, ErrNotFound):
		return nil, err
	}
	actor, at := p.Actor, p.At
	v.Path, v.Content, v.ContentSHA256, v.ContentSizeBytes = nil, nil, nil, nil
	v.RedactedAt, v.RedactedBy = &at, &actor
	return v, tx.PutVersion(v)
}

// MemoryScan reads a store's memories whose path starts with prefix and is at or after from (byte order), in
// path order, at most limit of them, with their content if content is set. Adapters implement it for
// ListMemories.
type MemoryScan func(prefix, from string, limit int, content bool) ([]apitype.Memory, error)

// ListMemories is MemoryList's rule over an adapter's scan: the memories below p.Prefix in path order, those
// deeper than p.Depth segments rolled up into one item per prefix, at most p.Limit items after p.After.
func ListMemories(scan MemoryScan, p *MemoryListParams) ([]MemoryItem, error) {
	prefix := p.Prefix
	if prefix == "" {
		prefix = "/"
	}
	from := prefix
	if p.After != "" {
		from = After(p.After)
	}
	var items []MemoryItem
	for len(items) < p.Limit {
		want := p.Limit - len(items)
		batch, err := scan(prefix, from, want, p.Content)
		if err != nil {
			return nil, err
		}
		cut := false
		for i := range batch {
			m := &batch[i]
			if roll := rollUp(prefix, m.Path, p.Depth); roll != "" {
				items = append(items, MemoryItem{Prefix: roll})
				from, cut = After(roll), true
				break // rescan past the roll-up's memories
			}
			items = append(items, MemoryItem{Memory: m})
			from = After(m.Path)
		}
		if len(batch) < want && !cut {
			break // the scan ran out
		}
	}
	return items, nil
}

// After is the first key after every key that path starts (a roll-up's "/a/" gives "/a0": '0' follows '/') or,
// for a memory's path, the first key after it ("\x01" is in no valid path).
func After(path string) string {
	if strings.HasSuffix(path, "/") {
		return path[:len(path)-1] + "0"
	}
	return path + "\x01"
}

// rollUp is the roll-up path of a memory at path below prefix when it lies deeper than depth segments, or "".
func rollUp(prefix, path string, depth int) string {
	if depth <= 0 {
		return ""
	}
	rest := strings.TrimPrefix(path, prefix)
	i := 0
	for range depth {
		j := strings.IndexByte(rest[i:], '/')
		if j < 0 {
			return ""
		}
		i += j + 1
	}
	return prefix + rest[:i]
}

// KeepMemoryStore is what MemoryStoreUpdate keeps of the store as read (the Update rule): its id, creation
// time and archive, which MemoryStoreArchive alone sets.
func KeepMemoryStore(next, cur *apitype.MemoryStore) {
	next.Type, next.ID, next.CreatedAt, next.ArchivedAt = cur.Type, cur.ID, cur.CreatedAt, cur.ArchivedAt
}
