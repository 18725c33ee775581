package worker

import (
	"errors"
	"fmt"
	"sync"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/sandbox"
)

// held is the sessions whose work items the worker holds, each with its item's client (its sessions token) and
// what of the session the workspace's ports may reach with it: the memory stores and files of its resources, its
// agent's skills. The ports over the API (memories, files) find their credential here; a session, store, file or
// skill of no held item has none.
type held struct {
	mu sync.Mutex
	m  map[string]heldSession
}

type heldSession struct {
	c      *client.Client
	stores map[string]bool
	files  map[string]bool
	skills map[string]bool
}

func newHeld() *held { return &held{m: map[string]heldSession{}} }

// hold makes what the session's recipe names (memory stores, files, skills) reachable with tc (the session's
// work item's sessions token) until the returned release is called.
func (h *held) hold(sessionID string, tc *client.Client, r *sandbox.Recipe) (release func()) {
	hs := heldSession{c: tc, stores: map[string]bool{}, files: map[string]bool{}, skills: map[string]bool{}}
	for _, res := range r.Resources {
		switch res.Type {
		case apitype.ResourceMemoryStore:
			hs.stores[res.MemoryStoreID] = true
		case apitype.ResourceFile:
			hs.files[res.FileID] = true
		}
	}
	for _, ref := range r.Skills {
		hs.skills[ref.SkillID] = true
	}
	h.mu.Lock()
	h.m[sessionID] = hs
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if cur, ok := h.m[sessionID]; ok && cur.c == tc {
			delete(h.m, sessionID)
		}
	}
}

// errNotHeld is the error of a call for a session (or a store, file or skill) of no work item the worker holds:
// it has no credential for it. A collection that fails with it is done again at the next turn's end, under the
// next item of the session the worker holds.
var errNotHeld = errors.New("the worker holds no work item of a session with this resource")

// session is the client of a held session.
func (h *held) session(sessionID string) (*client.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs, ok := h.m[sessionID]
	if !ok {
		return nil, fmt.Errorf("session %s: %w", sessionID, errNotHeld)
	}
	return hs.c, nil
}

// find is the client of a held session that has what (a memory store, a file, a skill) of id.
func (h *held) find(what, id string, has func(*heldSession) map[string]bool) (*client.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, hs := range h.m {
		if has(&hs)[id] {
			return hs.c, nil
		}
	}
	return nil, fmt.Errorf("%s %s: %w", what, id, errNotHeld)
}

func (h *held) store(id string) (*client.Client, error) {
	return h.find("memory store", id, func(hs *heldSession) map[string]bool { return hs.stores })
}

func (h *held) file(id string) (*client.Client, error) {
	return h.find("file", id, func(hs *heldSession) map[string]bool { return hs.files })
}

func (h *held) skill(id string) (*client.Client, error) {
	return h.find("skill", id, func(hs *heldSession) map[string]bool { return hs.skills })
}
