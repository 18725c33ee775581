package client

import (
	"context"

	"github.com/corralhq/corral/internal/apitype"
)

// WebhookCreateParams registers a webhook endpoint.
type WebhookCreateParams struct {
	URL           string   `json:"url"`
	EnabledEvents []string `json:"enabled_events"`
	Name          string   `json:"name,omitempty"`
}

// WebhookCreate registers a webhook endpoint of the organization; its SigningSecret is shown this once.
func (c *Client) WebhookCreate(ctx context.Context, p *WebhookCreateParams) (*apitype.WebhookEndpoint, error) {
	return call[apitype.WebhookEndpoint](ctx, c, "POST", "/v1/organizations/webhooks", nil, p)
}
