package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/corralhq/corral/internal/apitype"
)

// The memories of a memory store (/v1/memory_stores/{id}/memories). A work item's sessions token may call them
// for the stores attached to its session (writes refused on a read_only attachment); what it writes is a
// version whose actor is the session (session_actor).

// MemoryListParams lists a store's memories, in path order.
type MemoryListParams struct {
	// PathPrefix, if set, lists only the memories below it (it ends in "/").
	PathPrefix string
	// Depth rolls up the memories deeper than it below PathPrefix (items of type apitype.ObjectMemoryPrefix);
	// 0 lists every memory.
	Depth int
	// Full asks for the memories' content (view=full), which caps Limit at 20.
	Full bool
	// Limit is the page size (0: the server's default, 20).
	Limit int
	// Page is a token from a previous page's NextPage.
	Page string
}

// MemoryList returns a page of a store's memories. A roll-up (Depth) is an item whose Type is
// apitype.ObjectMemoryPrefix and whose only other field is Path.
func (c *Client) MemoryList(ctx context.Context, storeID string, p *MemoryListParams) (*Page[apitype.Memory], error) {
	q := url.Values{}
	if p != nil {
		if p.PathPrefix != "" {
			q.Set("path_prefix", p.PathPrefix)
		}
		if p.Depth > 0 {
			q.Set("depth", strconv.Itoa(p.Depth))
		}
		if p.Full {
			q.Set("view", "full")
		}
		if p.Limit > 0 {
			q.Set("limit", strconv.Itoa(p.Limit))
		}
		if p.Page != "" {
			q.Set("page", p.Page)
		}
	}
	return call[Page[apitype.Memory]](ctx, c, "GET", pathOf("/v1/memory_stores/", storeID, "/memories"), q, nil)
}

// MemoryGet returns a memory with its content.
func (c *Client) MemoryGet(ctx context.Context, storeID, id string) (*apitype.Memory, error) {
	return call[apitype.Memory](ctx, c, "GET", pathOf("/v1/memory_stores/", storeID, "/memories/", id), nil, nil)
}

// MemoryCreate creates a memory at path (a 409 of type apitype.ErrMemoryPathConflict if one is there) and
// returns it with its content.
func (c *Client) MemoryCreate(ctx context.Context, storeID, path, content string) (*apitype.Memory, error) {
	return call[apitype.Memory](ctx, c, "POST", pathOf("/v1/memory_stores/", storeID, "/memories"),
		url.Values{"view": {"full"}}, map[string]string{"path": path, "content": content})
}

// MemoryUpdateParams changes a memory: nil fields are kept.
type MemoryUpdateParams struct {
	Content *string
	Path    *string
	// ExpectSHA256, if set, is the content_sha256 the memory must still have (a 409 of type
	// apitype.ErrMemoryPrecondition otherwise).
	ExpectSHA256 string
}

// MemoryUpdate changes a memory's content or path (a rename keeps its id) and returns it with its content.
func (c *Client) MemoryUpdate(ctx context.Context, storeID, id string, p *MemoryUpdateParams) (*apitype.Memory, error) {
	body := map[string]any{}
	if p != nil {
		if p.Content != nil {
			body["content"] = *p.Content
		}
		if p.Path != nil {
			body["path"] = *p.Path
		}
		if p.ExpectSHA256 != "" {
			body["precondition"] = map[string]string{"type": "content_sha256", "content_sha256": p.ExpectSHA256}
		}
	}
	return call[apitype.Memory](ctx, c, "POST", pathOf("/v1/memory_stores/", storeID, "/memories/", id),
		url.Values{"view": {"full"}}, body)
}

// MemoryDelete deletes a memory; expectSHA256, if set, is the content_sha256 it must still have (a 409 of type
// apitype.ErrMemoryPrecondition otherwise).
func (c *Client) MemoryDelete(ctx context.Context, storeID, id, expectSHA256 string) error {
	var q url.Values
	if expectSHA256 != "" {
		q = url.Values{"expected_content_sha256": {expectSHA256}}
	}
	return c.do(ctx, "DELETE", pathOf("/v1/memory_stores/", storeID, "/memories/", id), q, nil, nil)
}
