package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/workspace"
)

// memories is the workspace's memory stores (workspace.Memories) over the server's HTTP API, with the sessions
// token of the work item the worker holds for each session: it reads only the stores attached to a session
// the worker holds, and what it writes is a version whose actor is that session (the server makes a sessions
// token's writes session_actor ones, and refuses them in a store attached read_only).
//
// The API writes a memory by id, the workspace by path: a put looks the path up (the id it last saw there, else
// the path's directory) and updates the memory there, or creates one.
type memories struct {
	// held is the sessions the worker holds: their clients (sessions tokens) and memory stores.
	held *held
	mu   sync.Mutex
	// ids maps a store id and a memory path to the id of the memory last seen there.
	ids map[string]map[string]string
}

var _ workspace.Memories = (*memories)(nil)

func newMemories(h *held) *memories {
	return &memories{held: h, ids: map[string]map[string]string{}}
}

func (m *memories) remember(storeID, p, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := m.ids[storeID]
	if ids == nil {
		ids = map[string]string{}
		m.ids[storeID] = ids
	}
	if id == "" {
		delete(ids, p)
	} else {
		ids[p] = id
	}
}

func (m *memories) idAt(storeID, p string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids[storeID][p]
}

// fullPage is the largest page of a list with content (view=full).
const fullPage = 20

// ListMemories reads every memory of the store with its content, in path order, page by page; it stops with
// workspace.ErrMemoryStoreTooLarge past workspace.MaxMountedMemories memories or
// workspace.MaxMountedMemoryBytes of content.
func (m *memories) ListMemories(ctx context.Context, storeID string) ([]workspace.Memory, error) {
	c, err := m.held.store(storeID)
	if err != nil {
		return nil, err
	}
	var out workspace.Mounted
	ids := map[string]string{}
	p := &client.MemoryListParams{Full: true, Limit: fullPage}
	for {
		page, err := c.MemoryList(ctx, storeID, p)
		if err != nil {
			return nil, mapErr(err)
		}
		for _, mem := range page.Data {
			if mem.Type == apitype.ObjectMemoryPrefix || mem.ID == "" {
				continue
			}
			if err := out.Add(&mem); err != nil {
				return nil, err
			}
			ids[mem.Path] = mem.ID
		}
		if p.Page = page.Next(); p.Page == "" {
			break
		}
	}
	m.mu.Lock()
	m.ids[storeID] = ids
	m.mu.Unlock()
	return out.Memories, nil
}

// PutMemory writes content at path as the session: an update of the memory there, or a create.
func (m *memories) PutMemory(ctx context.Context, storeID, sessionID, p, content, expectSHA256 string) (workspace.Memory, error) {
	c, err := m.held.session(sessionID)
	if err != nil {
		return workspace.Memory{}, err
	}
	// A memory created or deleted at the path meanwhile sends the put round again (twice at most).
	for attempt := 0; ; attempt++ {
		id, err := m.lookup(ctx, c, storeID, p)
		if err != nil {
			return workspace.Memory{}, err
		}
		var mem *apitype.Memory
		if id == "" {
			if expectSHA256 != "" {
				return workspace.Memory{}, fmt.Errorf("%w: there is no memory at %s", workspace.ErrMemoryPrecondition, p)
			}
			mem, err = c.MemoryCreate(ctx, storeID, p, content)
		} else {
			mem, err = c.MemoryUpdate(ctx, storeID, id, &client.MemoryUpdateParams{Content: &content, ExpectSHA256: expectSHA256})
		}
		if err == nil {
			m.remember(storeID, mem.Path, mem.ID)
			return workspace.Memory{ID: mem.ID, Path: mem.Path, Content: content, SHA256: mem.ContentSHA256}, nil
		}
		raced := id == "" && typeOf(err) == string(apitype.ErrMemoryPathConflict) ||
			id != "" && client.IsNotFound(err) && !strings.Contains(messageOf(err), "memory store")
		if !raced || attempt >= 2 {
			return workspace.Memory{}, mapErr(err)
		}
		m.remember(storeID, p, "")
	}
}

// lookup returns the id of the memory at path p, "" if there is none: the id last seen there if it still is
// (GET), else the path's directory is listed (depth 1).
func (m *memories) lookup(ctx context.Context, c *client.Client, storeID, p string) (string, error) {
	if id := m.idAt(storeID, p); id != "" {
		mem, err := c.MemoryGet(ctx, storeID, id)
		switch {
		case err == nil && mem.Path == p:
			return id, nil
		case err != nil && !client.IsNotFound(err):
			return "", mapErr(err)
		}
		m.remember(storeID, p, "")
	}
	prefix := path.Dir(p)
	if prefix != "/" {
		prefix += "/"
	}
	lp := &client.MemoryListParams{PathPrefix: prefix, Depth: 1, Limit: 100}
	for {
		page, err := c.MemoryList(ctx, storeID, lp)
		if err != nil {
			return "", mapErr(err)
		}
		for _, mem := range page.Data {
			if mem.Type != apitype.ObjectMemoryPrefix && mem.Path == p {
				m.remember(storeID, p, mem.ID)
				return mem.ID, nil
			}
		}
		if lp.Page = page.Next(); lp.Page == "" {
			return "", nil
		}
	}
}

// DeleteMemory deletes memory id as the session if it still holds expectSHA256.
func (m *memories) DeleteMemory(ctx context.Context, storeID, sessionID, id, expectSHA256 string) error {
	c, err := m.held.session(sessionID)
	if err != nil {
		return err
	}
	if err := c.MemoryDelete(ctx, storeID, id, expectSHA256); err != nil {
		return mapErr(err)
	}
	m.mu.Lock()
	for p, mid := range m.ids[storeID] {
		if mid == id {
			delete(m.ids[storeID], p)
		}
	}
	m.mu.Unlock()
	return nil
}

func typeOf(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Type
	}
	return ""
}

func messageOf(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return ""
}

// mapErr gives the API's errors the workspace's meaning, keeping their text. The API tells an archived store
// by a 409 conflict_error whose message says so.
func mapErr(err error) error {
	var e *client.Error
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &e):
		return err
	case e.Status == http.StatusNotFound:
		return fmt.Errorf("%w (%w)", workspace.ErrMemoryNotFound, err)
	case e.Type == string(apitype.ErrMemoryPrecondition):
		return fmt.Errorf("%w (%w)", workspace.ErrMemoryPrecondition, err)
	case e.Status == http.StatusConflict && strings.Contains(e.Message, "is archived"):
		return fmt.Errorf("%w (%w)", workspace.ErrMemoryStoreArchived, err)
	}
	return err
}
