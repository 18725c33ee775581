package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// memoryPutAttempts bounds the transactions a MemoryOpPut runs: one that loses the race to create its path to a
// concurrent put runs again and updates the winner's memory.
const memoryPutAttempts = 5

const (
	memoryCols  = `m.id, m.store_id, m.path, %s, m.sha256, m.size, m.version_id, m.created_at, m.updated_at`
	versionCols = `v.id, v.store_id, v.memory_id, v.operation, v.created_at, v.path, %s, v.sha256, v.size,
		v.created_by, v.redacted_at, v.redacted_by`
)

var (
	memoryStores = &table[apitype.MemoryStore]{
		what: "memory store", name: "memory_stores", alias: "s", archivable: true,
		sel:  `SELECT s.doc, s.archived_at FROM memory_stores s`,
		scan: scanDoc("memory store", func(st *apitype.MemoryStore, at *time.Time) { st.ArchivedAt = at }),
		put: func(ctx context.Context, tx pgx.Tx, st, _ *apitype.MemoryStore) error {
			return putDoc(ctx, tx, "memory_stores", st.ID, st.ArchivedAt, st)
		},
	}
	// memories reads memories with their content, memoriesBasic without (the list's basic view).
	memories      = memoryTable("m.content")
	memoriesBasic = memoryTable("NULL::text")
	// memoryVersions reads versions with their content, memoryVersionsBasic without.
	memoryVersions      = memoryVersionTable("v.content")
	memoryVersionsBasic = memoryVersionTable("NULL::text")
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

// MemoryStoreCreate stores a new memory store; ErrConflict if the id exists.
func (s *Store) MemoryStoreCreate(ctx context.Context, st *apitype.MemoryStore) error {
	doc, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("memory store create: encode: %w", err)
	}
	return memoryStores.create(ctx, s, `INSERT INTO memory_stores (id, created_at, archived_at, doc) VALUES ($1, $2, $3, $4)`,
		st.ID, st.CreatedAt, st.ArchivedAt, doc)
}

// MemoryStoreGet returns a memory store.
func (s *Store) MemoryStoreGet(ctx context.Context, id string) (*apitype.MemoryStore, error) {
	return memoryStores.get(ctx, s, "s.id = $1", id)
}

// MemoryStoreUpdate applies fn to the memory store under a row lock and stores the result.
func (s *Store) MemoryStoreUpdate(ctx context.Context, id string, fn func(*apitype.MemoryStore) error) (*apitype.MemoryStore, error) {
	return memoryStores.update(ctx, s, id, fn, store.KeepMemoryStore)
}

// MemoryStoreList lists memory stores.
func (s *Store) MemoryStoreList(ctx context.Context, p *store.ListParams) ([]apitype.MemoryStore, error) {
	return memoryStores.list(ctx, s, memoryStores.query(), p)
}

// MemoryStoreDelete removes a memory store with its memories and versions (by cascade).
func (s *Store) MemoryStoreDelete(ctx context.Context, id string) error {
	return memoryStores.delete(ctx, s, "id = $1", id)
}

// MemoryStoreArchive archives a memory store (store.Archive's rule: once). Its row lock waits for the memory
// writes under way, which hold a share lock on the store.
func (s *Store) MemoryStoreArchive(ctx context.Context, p *store.ArchiveParams) (*apitype.MemoryStore, error) {
	return txResult(ctx, s, "memory store archive", func(tx pgx.Tx) (*apitype.MemoryStore, error) {
		st, err := memoryStores.read(ctx, tx, " FOR NO KEY UPDATE", "s.id = $1", p.ID)
		if err != nil || !store.Archive(&st.ArchivedAt, &st.UpdatedAt, p.At) {
			return st, err
		}
		return st, memoryStores.put(ctx, tx, st, nil)
	})
}

// MemoryWrite applies a change under store.WriteMemory's rule. Two puts of a new path race on the unique path
// index: the loser's transaction runs again (at most memoryPutAttempts times in all) and updates the winner's
// memory, so that neither write is lost.
func (s *Store) MemoryWrite(ctx context.Context, p *store.MemoryWriteParams) (*store.MemoryWriteResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := txResult(ctx, s, "memory write", func(tx pgx.Tx) (*store.MemoryWriteResult, error) {
			return store.WriteMemory(memoryTx{ctx, tx}, p)
		})
		if p.Op == store.MemoryOpPut && errors.Is(err, store.ErrMemoryPathTaken) && attempt < memoryPutAttempts {
			continue
		}
		return res, err
	}
}

// MemoryGet returns a memory with its content.
func (s *Store) MemoryGet(ctx context.Context, storeID, id string) (*apitype.Memory, error) {
	return memories.get(ctx, s, "m.store_id = $1 AND m.id = $2", storeID, id)
}

// MemoryList lists a store's memories under store.ListMemories's rule, scanning the path index by range (not
// LIKE: '%' and '_' may be in paths); the path column's "C" collation makes the range byte-wise.
func (s *Store) MemoryList(ctx context.Context, p *store.MemoryListParams) ([]store.MemoryItem, error) {
	if _, err := s.MemoryStoreGet(ctx, p.StoreID); err != nil {
		return nil, err
	}
	scan := func(prefix, from string, limit int, content bool) ([]apitype.Memory, error) {
		t := memoriesBasic
		if content {
			t = memories
		}
		return t.rows(ctx, s, "memory list", t.sel+` WHERE m.store_id = $1 AND m.path >= $2 AND m.path < $3
			ORDER BY m.path LIMIT $4`, p.StoreID, max(from, prefix), store.After(prefix), max(limit, 0))
	}
	return store.ListMemories(scan, p)
}

// MemoryVersionGet returns a version with its content.
func (s *Store) MemoryVersionGet(ctx context.Context, storeID, id string) (*apitype.MemoryVersion, error) {
	return memoryVersions.get(ctx, s, "v.store_id = $1 AND v.id = $2", storeID, id)
}

// MemoryVersionList lists a store's versions, newest first.
func (s *Store) MemoryVersionList(ctx context.Context, p *store.MemoryVersionListParams) ([]apitype.MemoryVersion, error) {
	if _, err := s.MemoryStoreGet(ctx, p.StoreID); err != nil {
		return nil, err
	}
	t := memoryVersionsBasic
	if p.Content {
		t = memoryVersions
	}
	q := t.query()
	fmt.Fprintf(&q.sql, " AND v.store_id = %s", q.arg(p.StoreID))
	for _, c := range []struct{ col, v string }{
		{"memory_id", p.MemoryID}, {"session_id", p.SessionID}, {"api_key_id", p.APIKeyID},
		{"service_account_id", p.ServiceAccountID}, {"operation", string(p.Operation)},
	} {
		if c.v != "" {
			fmt.Fprintf(&q.sql, " AND v.%s = %s", c.col, q.arg(c.v))
		}
	}
	if p.CreatedFrom != nil {
		fmt.Fprintf(&q.sql, " AND v.created_at >= %s", q.arg(*p.CreatedFrom))
	}
	if p.CreatedTo != nil {
		fmt.Fprintf(&q.sql, " AND v.created_at <= %s", q.arg(*p.CreatedTo))
	}
	if p.After != nil {
		fmt.Fprintf(&q.sql, " AND (v.created_at, v.id) < (%s, %s)", q.arg(p.After.CreatedAt), q.arg(p.After.ID))
	}
	q.sql.WriteString(" ORDER BY v.created_at DESC, v.id DESC")
	if p.Limit > 0 {
		fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(p.Limit))
	}
	return t.rows(ctx, s, "memory version list", q.sql.String(), q.args...)
}

// MemoryVersionRedact redacts a version under store.RedactMemoryVersion's rule.
func (s *Store) MemoryVersionRedact(ctx context.Context, p *store.MemoryRedactParams) (*apitype.MemoryVersion, error) {
	return txResult(ctx, s, "memory version redact", func(tx pgx.Tx) (*apitype.MemoryVersion, error) {
		return store.RedactMemoryVersion(memoryTx{ctx, tx}, p)
	})
}

// memoryTx is store.MemoryTx over a transaction. It share-locks the store it reads (writes of one store run
// together, an archive or delete of the store waits for them) and locks the memories and versions it reads.
type memoryTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t memoryTx) Store(id string) (*apitype.MemoryStore, error) {
	return found(memoryStores.read(t.ctx, t.tx, " FOR SHARE", "s.id = $1", id))
}

func (t memoryTx) MemoryByID(storeID, id string) (*apitype.Memory, error) {
	return found(memories.read(t.ctx, t.tx, " FOR UPDATE", "m.store_id = $1 AND m.id = $2", storeID, id))
}

func (t memoryTx) MemoryByPath(storeID, path string) (*apitype.Memory, error) {
	return found(memories.read(t.ctx, t.tx, " FOR UPDATE", "m.store_id = $1 AND m.path = $2", storeID, path))
}

func (t memoryTx) InsertMemory(m *apitype.Memory) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO memories (id, store_id, path, content, sha256, size, version_id, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, m.ID, m.MemoryStoreID, m.Path, *m.Content, m.ContentSHA256,
		m.ContentSizeBytes, m.MemoryVersionID, m.CreatedAt, m.UpdatedAt)
	return memoryPathErr(err)
}

func (t memoryTx) UpdateMemory(m *apitype.Memory) error {
	_, err := t.tx.Exec(t.ctx, `UPDATE memories SET path = $3, content = $4, sha256 = $5, size = $6, version_id = $7,
		updated_at = $8 WHERE store_id = $1 AND id = $2`, m.MemoryStoreID, m.ID, m.Path, *m.Content, m.ContentSHA256,
		m.ContentSizeBytes, m.MemoryVersionID, m.UpdatedAt)
	return memoryPathErr(err)
}

func (t memoryTx) DeleteMemory(storeID, id string) error {
	return memories.deleteIn(t.ctx, t.tx, "store_id = $1 AND id = $2", storeID, id)
}

func (t memoryTx) Version(storeID, id string) (*apitype.MemoryVersion, error) {
	return found(memoryVersions.read(t.ctx, t.tx, " FOR UPDATE", "v.store_id = $1 AND v.id = $2", storeID, id))
}

func (t memoryTx) InsertVersion(v *apitype.MemoryVersion) error {
	by, err := json.Marshal(v.CreatedBy)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	var session, apiKey, account *string
	if a := v.CreatedBy; a != nil {
		session, apiKey, account = nonEmpty(a.SessionID), nonEmpty(a.APIKeyID), nonEmpty(a.ServiceAccountID)
	}
	_, err = t.tx.Exec(t.ctx, `INSERT INTO memory_versions (id, store_id, memory_id, operation, created_at, path,
		content, sha256, size, created_by, session_id, api_key_id, service_account_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		v.ID, v.MemoryStoreID, v.MemoryID, string(v.Operation), v.CreatedAt, v.Path, v.Content, v.ContentSHA256,
		v.ContentSizeBytes, by, session, apiKey, account)
	return err
}

func (t memoryTx) PutVersion(v *apitype.MemoryVersion) error {
	var by []byte
	if v.RedactedBy != nil {
		var err error
		if by, err = json.Marshal(v.RedactedBy); err != nil {
			return fmt.Errorf("encode: %w", err)
		}
	}
	_, err := t.tx.Exec(t.ctx, `UPDATE memory_versions SET path = $3, content = $4, sha256 = $5, size = $6,
		redacted_at = $7, redacted_by = $8 WHERE store_id = $1 AND id = $2`, v.MemoryStoreID, v.ID, v.Path, v.Content,
		v.ContentSHA256, v.ContentSizeBytes, v.RedactedAt, by)
	return err
}

// found is a transaction's read of a row, ErrNotFound if there was none (the rules test for it: a put of a new
// path, the redaction of a deleted memory's version).
func found[T any](v *T, err error) (*T, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return v, err
}

// memoryPathErr is ErrMemoryPathTaken for a violation of the unique index memories_path (store_id, path).
func memoryPathErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "memories_path" {
		return store.ErrMemoryPathTaken
	}
	return err
}

// nonEmpty is nil for "", else &s.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func scanMemory(row pgx.Row) (*apitype.Memory, error) {
	var m apitype.Memory
	if err := row.Scan(&m.ID, &m.MemoryStoreID, &m.Path, &m.Content, &m.ContentSHA256, &m.ContentSizeBytes,
		&m.MemoryVersionID, &m.CreatedAt, &m.UpdatedAt); err != nil {
		return nil, err
	}
	m.Type, m.CreatedAt, m.UpdatedAt = apitype.ObjectMemory, m.CreatedAt.UTC(), m.UpdatedAt.UTC()
	return &m, nil
}

func scanMemoryVersion(row pgx.Row) (*apitype.MemoryVersion, error) {
	var (
		v              apitype.MemoryVersion
		op             string
		by, redactedBy []byte
	)
	if err := row.Scan(&v.ID, &v.MemoryStoreID, &v.MemoryID, &op, &v.CreatedAt, &v.Path, &v.Content,
		&v.ContentSHA256, &v.ContentSizeBytes, &by, &v.RedactedAt, &redactedBy); err != nil {
		return nil, err
	}
	v.Type, v.Operation, v.CreatedAt, v.RedactedAt = apitype.ObjectMemoryVersion, apitype.MemoryOperation(op),
		v.CreatedAt.UTC(), utc(v.RedactedAt)
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
