package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The memory stores (§2.10): directories of small text documents that sessions mount, with every version of
// each document. The store's rules (paths unique, preconditions, no-op updates, roll-ups) are store.WriteMemory
// and store.ListMemories; here are the wire, the limits and who may call.

// Memory store limits, as the hosted service enforces them.
const (
	maxMemoryStoreName = 255
	maxMemoryStoreDesc = 1024
	// maxMemoryInstructions caps a memory_store resource's instructions.
	maxMemoryInstructions = 4096
	// maxFullViewLimit is the largest page of a list in the full view (with content).
	maxFullViewLimit = 20
)

type memoryStoreCreateRequest struct {
	Name        string            `json:"name"`
	Description *string           `json:"description"`
	Metadata    map[string]string `json:"metadata"`
}

type memoryStoreUpdateRequest struct {
	Name        nullable[string]   `json:"name"`
	Description nullable[string]   `json:"description"`
	Metadata    map[string]*string `json:"metadata"`
}

// memoryCreateRequest is a new memory. A null content is an empty one.
type memoryCreateRequest struct {
	Path    *string          `json:"path"`
	Content nullable[string] `json:"content"`
}

// memoryUpdateRequest changes a memory's content or path (a rename keeps its id), if its content is still the
// precondition's.
type memoryUpdateRequest struct {
	Content      nullable[string]    `json:"content"`
	Path         nullable[string]    `json:"path"`
	Precondition *memoryPrecondition `json:"precondition"`
}

type memoryPrecondition struct {
	Type          string `json:"type"`
	ContentSHA256 string `json:"content_sha256"`
}

func viewMemoryStore(m *apitype.MemoryStore) *apitype.MemoryStore {
	if m.Metadata == nil {
		m.Metadata = map[string]string{}
	}
	return m
}

// memoryView parses "view": whether memories and versions carry their content; def is the endpoint's default.
func memoryView(q query, def bool) (bool, error) {
	switch q.str("view") {
	case "":
		return def, nil
	case "basic":
		return false, nil
	case "full":
		return true, nil
	}
	return false, invalid("view", `must be "basic" or "full"`)
}

// memoryListLimit parses "limit" of a memory or version list: 1 to 100, default 20, at most 20 in the full view.
func memoryListLimit(q query, full bool) (int, error) {
	limit, err := q.limit(defaultLimit, maxLimit)
	if err != nil {
		return 0, err
	}
	if full && limit > maxFullViewLimit {
		return 0, invalid("limit", "must be at most %d with view=full (got %d): a page with content holds at most %d items",
			maxFullViewLimit, limit, maxFullViewLimit)
	}
	return limit, nil
}

// viewMemory drops a memory's content in the basic view.
func viewMemory(m *apitype.Memory, full bool) *apitype.Memory {
	if !full {
		m.Content = nil
	}
	m.Type = apitype.ObjectMemory
	return m
}

func viewMemoryVersion(v *apitype.MemoryVersion, full bool) *apitype.MemoryVersion {
	if !full {
		v.Content = nil
	}
	v.Type = apitype.ObjectMemoryVersion
	return v
}

// checkMemoryPath validates a memory's path (apitype.ValidateMemoryPath), naming field p and the rule.
func checkMemoryPath(p, v string) error {
	if err := apitype.ValidateMemoryPath(v); err != nil {
		return invalid(p, "%v", err)
	}
	return nil
}

// checkMemoryContent validates a memory's content (apitype.ValidateMemoryContent), naming field p and the rule.
func checkMemoryContent(p, v string) error {
	if err := apitype.ValidateMemoryContent(v); err != nil {
		return invalid(p, "%v", err)
	}
	return nil
}

// checkSHA256 reads a content_sha256 a write expects: 64 hex digits, compared lowercase.
func checkSHA256(p, v string) (string, error) {
	v = strings.ToLower(v)
	if !apitype.ValidSHA256(v) {
		return "", invalid(p, "must be a SHA-256 digest: 64 hexadecimal digits")
	}
	return v, nil
}

// memoryActor is who the request writes as: the session of a sessions token, else the API key.
func memoryActor(r *http.Request) apitype.Actor {
	if c := callerOf(r.Context()); c != nil && c.kind == kindToken {
		return apitype.Actor{Type: apitype.ActorSession, SessionID: c.work.Data.ID}
	}
	return apitype.Actor{Type: apitype.ActorAPI, APIKeyID: callerID(r.Context())}
}

// memoryWriteErr maps the errors of a memory write or redaction: the store's conflicts become 409s of their
// own types, and a not-found names the memory store if it is the store that is missing, else the memory.
func (s *Server) memoryWriteErr(r *http.Request, err error, kind, id string) error {
	storeID := r.PathValue("memory_store_id")
	switch {
	case errors.Is(err, store.ErrMemoryPrecondition):
		return &apiError{status: http.StatusConflict, typ: apitype.ErrMemoryPrecondition,
			msg: "the memory's content_sha256 is not the one expected: it changed since you read it"}
	case errors.Is(err, store.ErrMemoryPathTaken):
		return &apiError{status: http.StatusConflict, typ: apitype.ErrMemoryPathConflict,
			msg: "path: another memory of the store has this path"}
	case errors.Is(err, store.ErrMemoryStoreArchived):
		return conflict("memory store %s is archived: its memories can only be read or deleted", storeID)
	case errors.Is(err, store.ErrMemoryVersionCurrent):
		return conflict("memory version %s is its memory's current version: update or delete the memory before redacting it", id)
	case errors.Is(err, store.ErrNotFound):
		if _, serr := s.store.MemoryStoreGet(r.Context(), storeID); errors.Is(serr, store.ErrNotFound) {
			return notFound("memory store", storeID)
		}
		return notFound(kind, id)
	}
	return err
}

func (s *Server) memoryStoreCreate(w http.ResponseWriter, r *http.Request) error {
	var req memoryStoreCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := checkString("name", req.Name, true, maxMemoryStoreName); err != nil {
		return err
	}
	var desc string
	if req.Description != nil {
		desc = *req.Description
		if err := checkString("description", desc, false, maxMemoryStoreDesc); err != nil {
			return err
		}
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return err
	}
	now := s.now()
	m := &apitype.MemoryStore{Type: apitype.ObjectMemoryStore, ID: apitype.NewID(apitype.PrefixMemoryStore),
		Name: req.Name, Description: desc, Metadata: req.Metadata, CreatedAt: now, UpdatedAt: now}
	viewMemoryStore(m)
	if err := s.own(r.Context(), m.ID); err != nil {
		return err
	}
	if err := s.store.MemoryStoreCreate(r.Context(), m); err != nil {
		return err
	}
	s.emitWebhook(r.Context(), "memory_store.created", m.ID)
	return writeJSON(w, http.StatusOK, m)
}

func (s *Server) memoryStoreGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("memory_store_id")
	m, err := s.store.MemoryStoreGet(r.Context(), id)
	if err != nil {
		return lookup(err, "memory store", id)
	}
	return writeJSON(w, http.StatusOK, viewMemoryStore(m))
}

func (s *Server) memoryStoreUpdate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("memory_store_id")
	var req memoryStoreUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	now := s.now()
	m, err := s.store.MemoryStoreUpdate(r.Context(), id, func(m *apitype.MemoryStore) error {
		if m.ArchivedAt != nil {
			return invalid("", "memory store %s is archived and cannot be updated", id)
		}
		if req.Name.Set {
			if req.Name.Null {
				return invalid("name", "cannot be cleared")
			}
			if err := checkString("name", req.Name.Value, true, maxMemoryStoreName); err != nil {
				return err
			}
			m.Name = req.Name.Value
		}
		if req.Description.Set { // null and "" clear it
			if err := checkString("description", req.Description.Value, false, maxMemoryStoreDesc); err != nil {
				return err
			}
			m.Description = req.Description.Value
		}
		if req.Metadata != nil {
			md, err := patchMetadata("metadata", m.Metadata, req.Metadata)
			if err != nil {
				return err
			}
			m.Metadata = md
		}
		m.UpdatedAt = now
		return nil
	})
	if err != nil {
		return lookup(err, "memory store", id)
	}
	return writeJSON(w, http.StatusOK, viewMemoryStore(m))
}

func (s *Server) memoryStoreList(w http.ResponseWriter, r *http.Request) error {
	p, limit, c, err := listParams(newQuery(r.URL), defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	p.Desc = true
	data, next, _, err := listByCreated(p, limit, c, false,
		func(p *store.ListParams) ([]apitype.MemoryStore, error) {
			return s.store.MemoryStoreList(r.Context(), inWorkspace(r, p))
		},
		func(m *apitype.MemoryStore) (time.Time, string) { return m.CreatedAt, m.ID })
	if err != nil {
		return err
	}
	for i := range data {
		viewMemoryStore(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.MemoryStore]{Data: data, NextPage: next})
}

func (s *Server) memoryStoreDelete(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("memory_store_id")
	if err := s.store.MemoryStoreDelete(r.Context(), id); err != nil {
		return lookup(err, "memory store", id)
	}
	s.emitWebhook(r.Context(), "memory_store.deleted", id)
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "memory_store_deleted"})
}

func (s *Server) memoryStoreArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("memory_store_id")
	m, err := s.store.MemoryStoreArchive(r.Context(), &store.ArchiveParams{ID: id, At: s.now()})
	if err != nil {
		return lookup(err, "memory store", id)
	}
	s.emitWebhook(r.Context(), "memory_store.archived", id)
	return writeJSON(w, http.StatusOK, viewMemoryStore(m))
}

func (s *Server) memoryCreate(w http.ResponseWriter, r *http.Request) error {
	storeID := r.PathValue("memory_store_id")
	full, err := memoryView(newQuery(r.URL), false)
	if err != nil {
		return err
	}
	var req memoryCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Path == nil {
		return invalid("path", "required")
	}
	if err := checkMemoryPath("path", *req.Path); err != nil {
		return err
	}
	if !req.Content.Set {
		return invalid("content", "required (a string, possibly empty)")
	}
	if err := checkMemoryContent("content", req.Content.Value); err != nil {
		return err
	}
	res, err := s.store.MemoryWrite(r.Context(), &store.MemoryWriteParams{StoreID: storeID, Op: store.MemoryOpCreate,
		Path: req.Path, Content: &req.Content.Value, Actor: memoryActor(r), At: s.now(),
		NewMemoryID: apitype.NewID(apitype.PrefixMemory), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)})
	if err != nil {
		return s.memoryWriteErr(r, err, "memory store", storeID)
	}
	return writeJSON(w, http.StatusOK, viewMemory(res.Memory, full))
}

func (s *Server) memoryGet(w http.ResponseWriter, r *http.Request) error {
	storeID, id := r.PathValue("memory_store_id"), r.PathValue("memory_id")
	full, err := memoryView(newQuery(r.URL), true)
	if err != nil {
		return err
	}
	m, err := s.store.MemoryGet(r.Context(), storeID, id)
	if err != nil {
		return s.memoryWriteErr(r, err, "memory", id)
	}
	return writeJSON(w, http.StatusOK, viewMemory(m, full))
}

func (s *Server) memoryUpdate(w http.ResponseWriter, r *http.Request) error {
	storeID, id := r.PathValue("memory_store_id"), r.PathValue("memory_id")
	full, err := memoryView(newQuery(r.URL), false)
	if err != nil {
		return err
	}
	var req memoryUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	p := &store.MemoryWriteParams{StoreID: storeID, Op: store.MemoryOpUpdate, ID: id, Actor: memoryActor(r),
		At: s.now(), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)}
	if req.Path.Set {
		if req.Path.Null {
			return invalid("path", "cannot be null: omit it to keep the path")
		}
		if err := checkMemoryPath("path", req.Path.Value); err != nil {
			return err
		}
		p.Path = &req.Path.Value
	}
	if req.Content.Set { // null empties the memory
		if err := checkMemoryContent("content", req.Content.Value); err != nil {
			return err
		}
		p.Content = &req.Content.Value
	}
	if pc := req.Precondition; pc != nil {
		if pc.Type != "content_sha256" {
			return invalid("precondition.type", `must be "content_sha256"`)
		}
		if pc.ContentSHA256 != "" {
			if p.ExpectSHA256, err = checkSHA256("precondition.content_sha256", pc.ContentSHA256); err != nil {
				return err
			}
		}
	}
	res, err := s.store.MemoryWrite(r.Context(), p)
	if err != nil {
		return s.memoryWriteErr(r, err, "memory", id)
	}
	return writeJSON(w, http.StatusOK, viewMemory(res.Memory, full))
}

func (s *Server) memoryDelete(w http.ResponseWriter, r *http.Request) error {
	storeID, id := r.PathValue("memory_store_id"), r.PathValue("memory_id")
	p := &store.MemoryWriteParams{StoreID: storeID, Op: store.MemoryOpDelete, ID: id, Actor: memoryActor(r),
		At: s.now(), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)}
	if v := newQuery(r.URL).str("expected_content_sha256"); v != "" {
		var err error
		if p.ExpectSHA256, err = checkSHA256("expected_content_sha256", v); err != nil {
			return err
		}
	}
	if _, err := s.store.MemoryWrite(r.Context(), p); err != nil {
		return s.memoryWriteErr(r, err, "memory", id)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "memory_deleted"})
}

// memoryList lists a store's memories in path order. Its page token is the path of the page's last item (a
// memory's or a roll-up's): the list continues after it.
func (s *Server) memoryList(w http.ResponseWriter, r *http.Request) error {
	storeID := r.PathValue("memory_store_id")
	q := newQuery(r.URL)
	full, err := memoryView(q, false)
	if err != nil {
		return err
	}
	limit, err := memoryListLimit(q, full)
	if err != nil {
		return err
	}
	p := &store.MemoryListParams{StoreID: storeID, Prefix: q.str("path_prefix"), Limit: limit + 1, Content: full}
	if p.Prefix != "" {
		if err := apitype.ValidateMemoryPrefix(p.Prefix); err != nil {
			return invalid("path_prefix", "%v", err)
		}
	}
	if d := q.str("depth"); d != "" {
		if p.Depth, err = strconv.Atoi(d); err != nil || p.Depth < 0 || p.Depth > apitype.MaxMemoryPathSegments {
			return invalid("depth", "must be an integer between 0 (every memory below path_prefix) and %d",
				apitype.MaxMemoryPathSegments)
		}
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	if c != nil {
		if !strings.HasPrefix(c.ID, "/") || c.T != 0 {
			return invalid("page", "invalid page token")
		}
		p.After = c.ID
	}
	items, err := s.store.MemoryList(r.Context(), p)
	if err != nil {
		return lookup(err, "memory store", storeID)
	}
	items, more := trim(items, limit)
	data := make([]any, 0, len(items))
	for _, it := range items {
		if it.Memory != nil {
			data = append(data, viewMemory(it.Memory, full))
		} else {
			data = append(data, apitype.MemoryPrefix{Type: apitype.ObjectMemoryPrefix, Path: it.Prefix})
		}
	}
	var next *string
	if more && len(items) > 0 {
		last := items[len(items)-1]
		after := last.Prefix
		if last.Memory != nil {
			after = last.Memory.Path
		}
		next = cursor{ID: after}.encode()
	}
	return writeJSON(w, http.StatusOK, listPage[any]{Data: data, NextPage: next})
}

func (s *Server) memoryVersionGet(w http.ResponseWriter, r *http.Request) error {
	storeID, id := r.PathValue("memory_store_id"), r.PathValue("memory_version_id")
	full, err := memoryView(newQuery(r.URL), true)
	if err != nil {
		return err
	}
	v, err := s.store.MemoryVersionGet(r.Context(), storeID, id)
	if err != nil {
		return s.memoryWriteErr(r, err, "memory version", id)
	}
	return writeJSON(w, http.StatusOK, viewMemoryVersion(v, full))
}

// memoryVersionList lists a store's versions, newest first.
func (s *Server) memoryVersionList(w http.ResponseWriter, r *http.Request) error {
	storeID := r.PathValue("memory_store_id")
	q := newQuery(r.URL)
	full, err := memoryView(q, false)
	if err != nil {
		return err
	}
	limit, err := memoryListLimit(q, full)
	if err != nil {
		return err
	}
	p := &store.MemoryVersionListParams{StoreID: storeID, MemoryID: q.str("memory_id"), SessionID: q.str("session_id"),
		APIKeyID: q.str("api_key_id"), ServiceAccountID: q.str("service_account_id"),
		Operation: apitype.MemoryOperation(q.str("operation")), Limit: limit + 1, Content: full}
	if p.Operation != "" && !p.Operation.Valid() {
		return invalid("operation", `must be "created", "modified" or "deleted"`)
	}
	if p.CreatedFrom, err = q.time("created_at[gte]"); err != nil {
		return err
	}
	if p.CreatedTo, err = q.time("created_at[lte]"); err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	if c != nil {
		if c.ID == "" || c.T == 0 {
			return invalid("page", "invalid page token")
		}
		p.After = &store.Cursor{CreatedAt: time.UnixMicro(c.T).UTC(), ID: c.ID}
	}
	vs, err := s.store.MemoryVersionList(r.Context(), p)
	if err != nil {
		return lookup(err, "memory store", storeID)
	}
	vs, more := trim(vs, limit)
	if vs == nil {
		vs = []apitype.MemoryVersion{}
	}
	for i := range vs {
		viewMemoryVersion(&vs[i], full)
	}
	var next *string
	if more && len(vs) > 0 {
		last := vs[len(vs)-1]
		next = itemCursor(last.CreatedAt, last.ID, false)
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.MemoryVersion]{Data: vs, NextPage: next})
}

func (s *Server) memoryVersionRedact(w http.ResponseWriter, r *http.Request) error {
	storeID, id := r.PathValue("memory_store_id"), r.PathValue("memory_version_id")
	v, err := s.store.MemoryVersionRedact(r.Context(), &store.MemoryRedactParams{StoreID: storeID, ID: id,
		Actor: memoryActor(r), At: s.now()})
	if err != nil {
		return s.memoryWriteErr(r, err, "memory version", id)
	}
	return writeJSON(w, http.StatusOK, viewMemoryVersion(v, true))
}

// memoryOfSession lets a sessions token use a memory store only if its session has it as a memory_store
// resource, and write to it only if that resource is read_write (what the SDK's EnvironmentWorker syncs).
func memoryOfSession(write bool) func(s *Server, r *http.Request, wk *apitype.Work) error {
	return func(s *Server, r *http.Request, wk *apitype.Work) error {
		id := r.PathValue("memory_store_id")
		sess, err := s.store.SessionGet(r.Context(), wk.Data.ID)
		if err != nil {
			return lookup(err, "session", wk.Data.ID)
		}
		i := slices.IndexFunc(sess.Resources, func(res apitype.Resource) bool {
			return res.Type == apitype.ResourceMemoryStore && res.MemoryStoreID == id
		})
		switch {
		case i < 0:
			return errForbidden("this sessions token may use only the memory stores of its session, not %s", id)
		case write && sess.Resources[i].Access == apitype.AccessReadOnly:
			return errForbidden("memory store %s is attached to this session read_only: its memories cannot be written", id)
		}
		return nil
	}
}

// checkMemoryStore resolves a new session's memory_store resource: the store exists (404 otherwise) and is not
// archived; the resource snapshots its name and description and is mounted at the store's slug, which no other
// store of the session may share.
func (s *Server) checkMemoryStore(ctx context.Context, p string, res *apitype.Resource, existing []apitype.Resource) error {
	if res.Type != apitype.ResourceMemoryStore {
		return nil
	}
	m, err := s.store.MemoryStoreGet(ctx, res.MemoryStoreID)
	if err != nil {
		return lookup(err, "memory store", res.MemoryStoreID)
	}
	if m.ArchivedAt != nil {
		return invalid(path(p, "memory_store_id"), "memory store %s is archived and cannot be attached to a session", m.ID)
	}
	res.Name, res.Description = m.Name, m.Description
	res.MountPath = apitype.MemoryMountPath(m.Name, m.ID)
	for _, o := range existing {
		switch {
		case o.Type != apitype.ResourceMemoryStore:
		case o.MemoryStoreID == m.ID:
			return invalid(path(p, "memory_store_id"), "memory store %s is attached twice", m.ID)
		case o.MountPath == res.MountPath:
			return invalid(path(p, "memory_store_id"),
				"memory stores %s and %s would both be mounted at %s (their names have the same slug): rename one",
				o.MemoryStoreID, m.ID, res.MountPath)
		}
	}
	return nil
}
