package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/corralhq/corral/internal/apitype"
)

// WithKey returns a client of the same server that authenticates with another credential: an environment key,
// or the sessions token of a work item.
func (c *Client) WithKey(key string) *Client {
	cp := *c
	cp.key = key
	return &cp
}

// Key is the credential the client authenticates with.
func (c *Client) Key() string { return c.key }

// WorkPollParams polls an environment's work queue.
type WorkPollParams struct {
	BlockMS  int    // 1..999: how long the server waits for an item; 0 does not wait
	WorkerID string // sent as Anthropic-Worker-ID
}

// WorkPoll claims the oldest deliverable work item of a self-hosted environment (with an environment key). It
// returns nil when there is none. The item's Secret carries its sessions token
// (apitype.SessionsTokenFromSecret).
func (c *Client) WorkPoll(ctx context.Context, environmentID string, p *WorkPollParams) (*apitype.Work, error) {
	q := url.Values{}
	h := http.Header{}
	if p != nil {
		if p.BlockMS > 0 {
			q.Set("block_ms", fmt.Sprint(p.BlockMS))
		}
		if p.WorkerID != "" {
			h.Set("Anthropic-Worker-ID", p.WorkerID)
		}
	}
	resp, err := c.request(ctx, "GET", pathOf("/v1/environments/", environmentID, "/work/poll"), q, nil, h)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var w *apitype.Work
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		return nil, fmt.Errorf("decode work poll: %w", err)
	}
	return w, nil
}

// WorkAck confirms a polled item (queued to starting).
func (c *Client) WorkAck(ctx context.Context, environmentID, workID string) (*apitype.Work, error) {
	return call[apitype.Work](ctx, c, "POST", pathOf("/v1/environments/", environmentID, "/work/", workID, "/ack"), nil, nil)
}

// WorkHeartbeat extends the lease on an item; expected is the last_heartbeat of the previous heartbeat
// (apitype.NoHeartbeat for the first). A stale expectation is a 412 *Error whose Details hold the current state.
func (c *Client) WorkHeartbeat(ctx context.Context, environmentID, workID, expected string, ttlSeconds int) (*apitype.WorkHeartbeat, error) {
	q := url.Values{"expected_last_heartbeat": {expected}}
	if ttlSeconds > 0 {
		q.Set("desired_ttl_seconds", fmt.Sprint(ttlSeconds))
	}
	return call[apitype.WorkHeartbeat](ctx, c, "POST", pathOf("/v1/environments/", environmentID, "/work/", workID, "/heartbeat"), q, nil)
}

// WorkStop stops an item (force: at once, without a graceful shutdown). A stopped item is a 409.
func (c *Client) WorkStop(ctx context.Context, environmentID, workID string, force bool) (*apitype.Work, error) {
	return call[apitype.Work](ctx, c, "POST", pathOf("/v1/environments/", environmentID, "/work/", workID, "/stop"), nil,
		map[string]bool{"force": force})
}

// EnvironmentKeyCreate mints a key for a self-hosted environment's workers; its Key is shown only here.
func (c *Client) EnvironmentKeyCreate(ctx context.Context, environmentID, name string) (*apitype.EnvironmentKey, error) {
	return call[apitype.EnvironmentKey](ctx, c, "POST", pathOf("/v1/environments/", environmentID, "/keys"), nil,
		map[string]string{"name": name})
}

// EnvironmentKeyList lists an environment's keys (never their secrets).
func (c *Client) EnvironmentKeyList(ctx context.Context, environmentID string) (*Page[apitype.EnvironmentKey], error) {
	return call[Page[apitype.EnvironmentKey]](ctx, c, "GET", pathOf("/v1/environments/", environmentID, "/keys"), nil, nil)
}

// EnvironmentKeyRevoke revokes a key: it stops working at once.
func (c *Client) EnvironmentKeyRevoke(ctx context.Context, environmentID, keyID string) error {
	return c.do(ctx, "DELETE", pathOf("/v1/environments/", environmentID, "/keys/", keyID), nil, nil, nil)
}
