// Package memstore adapts the store's memory stores (store.MemoryStore) to what a session's workspace needs of
// them (workspace.Memories): a store's memories read whole for its mount, and the agent's changes written back
// as versions whose actor is the session.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/workspace"
)

// Memories is workspace.Memories over a store.MemoryStore.
type Memories struct {
	Store store.MemoryStore
	// Now is the clock of the versions written; default time.Now.
	Now func() time.Time
}

var _ workspace.Memories = (*Memories)(nil)

// New returns the workspace's memories over s.
func New(s store.MemoryStore) *Memories { return &Memories{Store: s} }

const page = 500

// ListMemories reads every memory of the store with its content, in path order, page by page; it stops with
// workspace.ErrMemoryStoreTooLarge past workspace.MaxMountedMemories memories or
// workspace.MaxMountedMemoryBytes of content.
func (m *Memories) ListMemories(ctx context.Context, storeID string) ([]workspace.Memory, error) {
	var out workspace.Mounted
	after := ""
	for {
		items, err := m.Store.MemoryList(ctx, &store.MemoryListParams{StoreID: storeID, Limit: page, After: after, Content: true})
		if err != nil {
			return nil, mapErr(err)
		}
		for _, it := range items { // Depth 0: memories only
			after = it.Memory.Path
			if err := out.Add(it.Memory); err != nil {
				return nil, err
			}
		}
		if len(items) < page {
			return out.Memories, nil
		}
	}
}

// PutMemory writes content at path as the session's session_actor (store.MemoryOpPut).
func (m *Memories) PutMemory(ctx context.Context, storeID, sessionID, path, content, expectSHA256 string) (workspace.Memory, error) {
	res, err := m.Store.MemoryWrite(ctx, &store.MemoryWriteParams{
		StoreID: storeID, Op: store.MemoryOpPut, Path: &path, Content: &content, ExpectSHA256: expectSHA256,
		Actor: actor(sessionID), At: m.now(),
		NewMemoryID: apitype.NewID(apitype.PrefixMemory), NewVersionID: apitype.NewID(apitype.PrefixMemVersion),
	})
	if err != nil {
		return workspace.Memory{}, mapErr(err)
	}
	out := workspace.Memory{Path: path, Content: content, SHA256: apitype.ContentSHA256(content)}
	if res.Memory != nil {
		out.ID, out.Path, out.SHA256 = res.Memory.ID, res.Memory.Path, res.Memory.ContentSHA256
	}
	return out, nil
}

// DeleteMemory deletes memory id as the session's session_actor if it still holds expectSHA256.
func (m *Memories) DeleteMemory(ctx context.Context, storeID, sessionID, id, expectSHA256 string) error {
	_, err := m.Store.MemoryWrite(ctx, &store.MemoryWriteParams{
		StoreID: storeID, Op: store.MemoryOpDelete, ID: id, ExpectSHA256: expectSHA256,
		Actor: actor(sessionID), At: m.now(), NewVersionID: apitype.NewID(apitype.PrefixMemVersion),
	})
	return mapErr(err)
}

func (m *Memories) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now().UTC()
}

func actor(sessionID string) apitype.Actor {
	return apitype.Actor{Type: apitype.ActorSession, SessionID: sessionID}
}

// mapErr gives the store's errors the workspace's meaning, keeping their text.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrMemoryPrecondition):
		return fmt.Errorf("%w (%w)", workspace.ErrMemoryPrecondition, err)
	case errors.Is(err, store.ErrMemoryStoreArchived):
		return fmt.Errorf("%w (%w)", workspace.ErrMemoryStoreArchived, err)
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w (%w)", workspace.ErrMemoryNotFound, err)
	}
	return err
}
