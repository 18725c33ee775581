package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

const (
	memoryCols  = `m.id, m.store_id, m.path, %s, m.sha256, m.size, m.version_id, m.created_at, m.updated_at`
	versionCols = `v.id, v.store_id, v.memory_id, v.operation, v.created_at, v.path, %s, v.sha256, v.size,
		v.created_by, v.redacted_at, v.redacted_by`
)

var (
	memoryStores = &table[apitype.MemoryStore]{
		what: "memory store", name: "memory_stores", alias: "s", archivable: true,
		sel:  `SELECT s.doc FROM memory_stores s`,
		scan: scanDoc[apitype.MemoryStore]("memory store", nil),
		put: func(w *wtx, st, _ *apitype.MemoryStore) error {
			return putDoc(w, "memory_stores", st.ID, st.ArchivedAt, st)
		},
	}
	// memories reads memories with their content, memoriesBasic without (the list's basic view).
	memories      = memoryTable("m.content")
	memoriesBasic = memoryTable("NULL")
	// memoryVersions reads versions with their content, memoryVersionsBasic without.
	memoryVersions      = memoryVersionTable("v.content")
	memoryVersionsBasic = memoryVersionTable("NULL")
)

func memoryTable(content string) *table[apitype.Memory] {
	return &table[apitype.Memory]{
		what: "memory", name: "memories", alias: "m",
		sel:  `SELECT ` + fmt.Sprintf(memoryCols, content) + ` FROM memories m`,
		scan: scanMemory,
	}
}

func memoryVersionTable(content string) *table[apitype.MemoryVersion] {
	return &table[apitype.MemoryVersion]{
		what: "memory version", name: "memory_versions", alias: "v",
		sel:  `SELECT ` + fmt.Sprintf(versionCols, content) + ` FROM memory_versions v`,
		scan: scanMemoryVersion,
	}
}

// MemoryStoreCreate stores a new memory store.
func (s *Store) MemoryStoreCreate(ctx context.Context, st *apitype.MemoryStore) error {
	doc, err := json.Marshal(st)
	if err != nil {
		return writeErr(err, "create memory store %s", st.ID)
	}
	return memoryStores.create(ctx, s, st.ID, `INSERT INTO memory_stores (id, created_at, archived_at, doc) VALUES (?, ?, ?, ?)`,
		st.ID, micros(st.CreatedAt), nullMicros(st.ArchivedAt), doc)
}

// MemoryStoreGet returns a memory store.
func (s *Store) MemoryStoreGet(ctx context.Context, id string) (*apitype.MemoryStore, error) {
	return memoryStores.get(ctx, s, id, "s.id = ?", id)
}

// MemoryStoreUpdate applies fn to the memory store and stores the result, atomically.
func (s *Store) MemoryStoreUpdate(ctx context.Context, id string, fn func(*apitype.MemoryStore) error) (*apitype.MemoryStore, error) {
	return memoryStores.update(ctx, s, id, fn, store.KeepMemoryStore)
}

// MemoryStoreList lists memory stores.
func (s *Store) MemoryStoreList(ctx context.Context, p *store.ListParams) ([]apitype.MemoryStore, error) {
	return memoryStores.list(ctx, s, &filter{}, p)
}

// MemoryStoreDelete removes a memory store with its memories and versions (by cascade).
func (s *Store) MemoryStoreDelete(ctx context.Context, id string) error {
	return memoryStores.delete(ctx, s, id, "id = ?", id)
}

// MemoryStoreArchive archives a memory store (store.Archive's rule: once).
func (s *Store) MemoryStoreArchive(ctx context.Context, p *store.ArchiveParams) (*apitype.MemoryStore, error) {
	return writeResult(ctx, s, func(w *wtx) (*apitype.MemoryStore, error) {
		st, err := memoryStores.read(w, "s.id = ?", p.ID)
		if err != nil || !store.Archive(&st.ArchivedAt, &st.UpdatedAt, p.At) {
			return st, err
		}
		return st, memoryStores.put(w, st, nil)
	}, "archive memory store %s", p.ID)
}

// MemoryWrite applies a change under store.WriteMemory's rule. The single writer makes concurrent puts of one
// path queue: the later finds the earlier's memory and updates it.
func (s *Store) MemoryWrite(ctx context.Context, p *store.MemoryWriteParams) (*store.MemoryWriteResult, error) {
	return writeResult(ctx, s, func(w *wtx) (*store.MemoryWriteResult, error) {
		return store.WriteMemory(memoryTx{w}, p)
	}, "write memory of store %s", p.StoreID)
}

// MemoryGet returns a memory with its content.
func (s *Store) MemoryGet(ctx context.Context, storeID, id string) (*apitype.Memory, error) {
	return memories.get(ctx, s, id, "m.store_id = ? AND m.id = ?", storeID, id)
}

// MemoryList lists a store's memories under store.ListMemories's rule, scanning the path index by range (not
// LIKE: '%' and '_' may be in paths).
func (s *Store) MemoryList(ctx context.Context, p *store.MemoryListParams) ([]store.MemoryItem, error) {
	if _, err := s.MemoryStoreGet(ctx, p.StoreID); err != nil {
		return nil, err
	}
	scan := func(prefix, from string, limit int, content bool) ([]apitype.Memory, error) {
		t, query, args := memoryScanQuery(p.StoreID, prefix, from, limit, content)
		return t.rows(ctx, s, "list memories", query, args...)
	}
	return store.ListMemories(scan, p)
}

// memoryScanQuery is the store.MemoryScan of a store's memories: a range of the memories_path index.
func memoryScanQuery(storeID, prefix, from string, limit int, content bool) (*table[apitype.Memory], string, []any) {
	t := memoriesBasic
	if content {
		t = memories
	}
	return t, t.sel + ` WHERE m.store_id = ? AND m.path >= ? AND m.path < ? ORDER BY m.path LIMIT ?`,
		[]any{storeID, max(from, prefix), store.After(prefix), limitArg(limit)}
}

// MemoryVersionGet returns a version with its content.
func (s *Store) MemoryVersionGet(ctx context.Context, storeID, id string) (*apitype.MemoryVersion, error) {
	return memoryVersions.get(ctx, s, id, "v.store_id = ? AND v.id = ?", storeID, id)
}

// MemoryVersionList lists a store's versions, newest first.
func (s *Store) MemoryVersionList(ctx context.Context, p *store.MemoryVersionListParams) ([]apitype.MemoryVersion, error) {
	if _, err := s.MemoryStoreGet(ctx, p.StoreID); err != nil {
		return nil, err
	}
	t, query, args := memoryVersionListQuery(p)
	return t.rows(ctx, s, "list memory versions", query, args...)
}

// memoryVersionListQuery selects a store's versions, newest first.
func memoryVersionListQuery(p *store.MemoryVersionListParams) (*table[apitype.MemoryVersion], string, []any) {
	var f filter
	f.add("v.store_id = ?", p.StoreID)
	for _, c := range []struct{ col, v string }{
		{"memory_id", p.MemoryID}, {"session_id", p.SessionID}, {"api_key_id", p.APIKeyID},
		{"service_account_id", p.ServiceAccountID}, {"operation", string(p.Operation)},
	} {
		if c.v != "" {
			f.add("v."+c.col+" = ?", c.v)
		}
	}
	if p.CreatedFrom != nil {
		f.add("v.created_at >= ?", micros(*p.CreatedFrom))
	}
	if p.CreatedTo != nil {
		f.add("v.created_at <= ?", micros(*p.CreatedTo))
	}
	if p.After != nil {
		f.add("(v.created_at, v.id) < (?, ?)", micros(p.After.CreatedAt), p.After.ID)
	}
	t := memoryVersionsBasic
	if p.Content {
		t = memoryVersions
	}
	return t, t.sel + f.where() + ` ORDER BY v.created_at DESC, v.id DESC LIMIT ?`, append(f.args, limitArg(p.Limit))
}

// MemoryVersionRedact redacts a version under store.RedactMemoryVersion's rule.
func (s *Store) MemoryVersionRedact(ctx context.Context, p *store.MemoryRedactParams) (*apitype.MemoryVersion, error) {
	return writeResult(ctx, s, func(w *wtx) (*apitype.MemoryVersion, error) {
		return store.RedactMemoryVersion(memoryTx{w}, p)
	}, "redact memory version %s of store %s", p.ID, p.StoreID)
}

// memoryTx is store.MemoryTx over a write transaction (the single writer needs no row locks).
type memoryTx struct{ w *wtx }

func (t memoryTx) Store(id string) (*apitype.MemoryStore, error) {
	return memoryStores.read(t.w, "s.id = ?", id)
}

func (t memoryTx) MemoryByID(storeID, id string) (*apitype.Memory, error) {
	return memories.read(t.w, "m.store_id = ? AND m.id = ?", storeID, id)
}

func (t memoryTx) MemoryByPath(storeID, path string) (*apitype.Memory, error) {
	return memories.read(t.w, "m.store_id = ? AND m.path = ?", storeID, path)
}

func (t memoryTx) InsertMemory(m *apitype.Memory) error {
	_, err := t.w.exec(`INSERT INTO memories (id, store_id, path, content, sha256, size, version_id, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, m.ID, m.MemoryStoreID, m.Path, *m.Content, m.ContentSHA256,
		m.ContentSizeBytes, m.MemoryVersionID, micros(m.CreatedAt), micros(m.UpdatedAt))
	return memoryPathErr(err)
}

func (t memoryTx) UpdateMemory(m *apitype.Memory) error {
	_, err := t.w.exec(`UPDATE memories SET path = ?, content = ?, sha256 = ?, size = ?, version_id = ?, updated_at = ?
		WHERE store_id = ? AND id = ?`, m.Path, *m.Content, m.ContentSHA256, m.ContentSizeBytes, m.MemoryVersionID,
		micros(m.UpdatedAt), m.MemoryStoreID, m.ID)
	return memoryPathErr(err)
}

func (t memoryTx) DeleteMemory(storeID, id string) error {
	return memories.deleteIn(t.w, "store_id = ? AND id = ?", storeID, id)
}

func (t memoryTx) Version(storeID, id string) (*apitype.MemoryVersion, error) {
	return memoryVersions.read(t.w, "v.store_id = ? AND v.id = ?", storeID, id)
}

func (t memoryTx) InsertVersion(v *apitype.MemoryVersion) error {
	by, err := json.Marshal(v.CreatedBy)
	if err != nil {
		return err
	}
	var session, apiKey, account any
	if a := v.CreatedBy; a != nil {
		session, apiKey, account = nullString(a.SessionID), nullString(a.APIKeyID), nullString(a.ServiceAccountID)
	}
	_, err = t.w.exec(`INSERT INTO memory_versions (id, store_id, memory_id, operation, created_at, path, content,
		sha256, size, created_by, session_id, api_key_id, service_account_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		v.ID, v.MemoryStoreID, v.MemoryID, string(v.Operation), micros(v.CreatedAt), orNull(v.Path), orNull(v.Content),
		orNull(v.ContentSHA256), orNull(v.ContentSizeBytes), by, session, apiKey, account)
	return err
}

func (t memoryTx) PutVersion(v *apitype.MemoryVersion) error {
	var by any
	if v.RedactedBy != nil {
		doc, err := json.Marshal(v.RedactedBy)
		if err != nil {
			return err
		}
		by = doc
	}
	_, err := t.w.exec(`UPDATE memory_versions SET path = ?, content = ?, sha256 = ?, size = ?, redacted_at = ?,
		redacted_by = ? WHERE store_id = ? AND id = ?`, orNull(v.Path), orNull(v.Content), orNull(v.ContentSHA256),
		orNull(v.ContentSizeBytes),
		nullMicros(v.RedactedAt), by, v.MemoryStoreID, v.ID)
	return err
}

// memoryPathErr is ErrMemoryPathTaken for a violation of the unique index memories_path (store_id, path).
func memoryPathErr(err error) error {
	if isConstraint(err) && strings.Contains(err.Error(), "memories.path") {
		return store.ErrMemoryPathTaken
	}
	return err
}

// orNull is NULL for nil, else *p.
func orNull[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// nullString is NULL for "", else s.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func scanMemory(row scanner) (*apitype.Memory, error) {
	var (
		m                apitype.Memory
		content          sql.NullString
		created, updated int64
	)
	if err := row.Scan(&m.ID, &m.MemoryStoreID, &m.Path, &content, &m.ContentSHA256, &m.ContentSizeBytes,
		&m.MemoryVersionID, &created, &updated); err != nil {
		return nil, err
	}
	m.Type, m.CreatedAt, m.UpdatedAt = apitype.ObjectMemory, fromMicros(created), fromMicros(updated)
	if content.Valid {
		m.Content = &content.String
	}
	return &m, nil
}

func scanMemoryVersion(row scanner) (*apitype.MemoryVersion, error) {
	var (
		v                  apitype.MemoryVersion
		op                 string
		created            int64
		path, content, sum sql.NullString
		size, redacted     sql.NullInt64
		by, redactedBy     []byte
	)
	if err := row.Scan(&v.ID, &v.MemoryStoreID, &v.MemoryID, &op, &created, &path, &content, &sum, &size,
		&by, &redacted, &redactedBy); err != nil {
		return nil, err
	}
	v.Type, v.Operation, v.CreatedAt, v.RedactedAt = apitype.ObjectMemoryVersion, apitype.MemoryOperation(op),
		fromMicros(created), timePtr(redacted)
	if path.Valid {
		v.Path = &path.String
	}
	if content.Valid {
		v.Content = &content.String
	}
	if sum.Valid {
		v.ContentSHA256 = &sum.String
	}
	if size.Valid {
		v.ContentSizeBytes = &size.Int64
	}
	if err := json.Unmarshal(by, &v.CreatedBy); err != nil {
		return nil, fmt.Errorf("decode memory version's created_by: %w", err)
	}
	if redactedBy != nil {
		if err := json.Unmarshal(redactedBy, &v.RedactedBy); err != nil {
			return nil, fmt.Errorf("decode memory version's redacted_by: %w", err)
		}
	}
	return &v, nil
}
