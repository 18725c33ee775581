package api

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/webhook"
)

// Webhook endpoints (beta webhooks-2026-10-07): the organization's URLs that receive signed events. The
// handlers here keep them; the dispatcher (internal/webhook) delivers the outbox's events to them.

// Webhook endpoint limits.
const (
	maxWebhookEndpoints    = 100
	defaultWebhookLimit    = 20
	maxWebhookLimit        = 100
	maxDeliveryLimit       = 100
	webhookSecretName      = "signing_secret"
	maxWebhookNameLen      = 256
	maxWebhookDescriptionN = 2048
)

type webhookCreateRequest struct {
	URL           *string  `json:"url"`
	EnabledEvents []string `json:"enabled_events"`
	Name          *string  `json:"name"`
	Description   *string  `json:"description"`
}

type webhookUpdateRequest struct {
	URL           *string  `json:"url"`
	EnabledEvents []string `json:"enabled_events"`
	Name          *string  `json:"name"`
	Description   *string  `json:"description"`
	State         *string  `json:"state"`
}

// webhookPage is the Page shape of the endpoints' list: data, has_more, first_id, last_id.
type webhookPage struct {
	Data    []apitype.WebhookEndpoint `json:"data"`
	HasMore bool                      `json:"has_more"`
	FirstID *string                   `json:"first_id"`
	LastID  *string                   `json:"last_id"`
}

// webhookDelivery is a delivery as GET .../deliveries shows it (Corral's own endpoint).
type webhookDelivery struct {
	Event         apitype.WebhookEvent `json:"event"`
	State         string               `json:"state"`
	Attempts      int                  `json:"attempts"`
	NextAttemptAt *time.Time           `json:"next_attempt_at"`
	LastStatus    *int                 `json:"last_status"`
	LastError     *string              `json:"last_error"`
	LastAttemptAt *time.Time           `json:"last_attempt_at"`
	CreatedAt     time.Time            `json:"created_at"`
}

func checkEnabledEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, invalid("enabled_events", "required: at least one event type")
	}
	out := make([]string, 0, len(events))
	for i, t := range events {
		if !apitype.KnownWebhookEventType(t) {
			return nil, invalid(index("enabled_events", i), "unknown event type %q (see GET /v1/organizations/webhooks docs: %s ...)", t, apitype.WebhookEventTypes[0])
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func checkWebhookURL(u string) error {
	if err := webhook.ValidateURL(u); err != nil {
		return invalid("url", "%v", err)
	}
	return nil
}

func checkWebhookText(req *webhookCreateRequest) error {
	if req.Name != nil {
		if err := checkString("name", *req.Name, false, maxWebhookNameLen); err != nil {
			return err
		}
	}
	if req.Description != nil {
		if err := checkString("description", *req.Description, false, maxWebhookDescriptionN); err != nil {
			return err
		}
	}
	return nil
}

// newSigningSecret makes an endpoint's signing secret and seals it for the endpoint.
func (s *Server) newSigningSecret(endpointID string) (string, *store.SealedSecret, error) {
	if s.sealer == nil {
		return "", nil, errNoSealer
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return "", nil, err
	}
	sealed, err := s.sealer.Seal(endpointID, webhookSecretName, []byte(secret))
	if err != nil {
		return "", nil, err
	}
	return secret, sealed, nil
}

func (s *Server) webhookCreate(w http.ResponseWriter, r *http.Request) error {
	var req webhookCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.URL == nil {
		return invalid("url", "required")
	}
	if err := checkWebhookURL(*req.URL); err != nil {
		return err
	}
	events, err := checkEnabledEvents(req.EnabledEvents)
	if err != nil {
		return err
	}
	if err := checkWebhookText(&req); err != nil {
		return err
	}
	existing, err := s.store.WebhookEndpointList(r.Context(), &store.ListParams{Limit: maxWebhookEndpoints + 1, Workspace: workspaceOf(r)})
	if err != nil {
		return err
	}
	if len(existing) >= maxWebhookEndpoints {
		return invalid("", "the organization has %d webhook endpoints, the most it may have: delete one first", len(existing))
	}
	now := s.now()
	e := apitype.WebhookEndpoint{Type: apitype.ObjectWebhookEndpoint, ID: apitype.NewID(apitype.PrefixWebhookEndpoint),
		URL: *req.URL, EnabledEvents: events, State: apitype.WebhookEnabled, CreatedAt: now, UpdatedAt: now}
	if req.Name != nil {
		e.Name = *req.Name
	}
	if req.Description != nil {
		e.Description = *req.Description
	}
	secret, sealed, err := s.newSigningSecret(e.ID)
	if err != nil {
		return err
	}
	if err := s.own(r.Context(), e.ID); err != nil {
		return err
	}
	if err := s.store.WebhookEndpointCreate(r.Context(), &store.WebhookEndpointRecord{Endpoint: e, Secret: *sealed}); err != nil {
		return err
	}
	e.SigningSecret = secret // shown once
	return writeJSON(w, http.StatusOK, &e)
}

func (s *Server) webhookGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("webhook_endpoint_id")
	rec, err := s.store.WebhookEndpointGet(r.Context(), id)
	if err != nil {
		return lookup(err, "webhook endpoint", id)
	}
	return writeJSON(w, http.StatusOK, viewWebhook(rec))
}

func viewWebhook(rec *store.WebhookEndpointRecord) *apitype.WebhookEndpoint {
	e := rec.Endpoint
	e.SigningSecret = ""
	return &e
}

func (s *Server) webhookUpdate(w http.ResponseWriter, r *http.Request) error {
	var req webhookUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	id := r.PathValue("webhook_endpoint_id")
	if req.URL != nil {
		if err := checkWebhookURL(*req.URL); err != nil {
			return err
		}
	}
	var events []string
	if req.EnabledEvents != nil {
		var err error
		if events, err = checkEnabledEvents(req.EnabledEvents); err != nil {
			return err
		}
	}
	if err := checkWebhookText(&webhookCreateRequest{Name: req.Name, Description: req.Description}); err != nil {
		return err
	}
	if req.State != nil && *req.State != string(apitype.WebhookEnabled) && *req.State != string(apitype.WebhookDisabled) {
		return invalid("state", `must be "enabled" or "disabled"`)
	}
	now := s.now()
	rec, err := s.store.WebhookEndpointUpdate(r.Context(), id, func(rec *store.WebhookEndpointRecord) error {
		e := &rec.Endpoint
		if req.URL != nil {
			e.URL = *req.URL
		}
		if events != nil {
			e.EnabledEvents = events
		}
		if req.Name != nil {
			e.Name = *req.Name
		}
		if req.Description != nil {
			e.Description = *req.Description
		}
		if req.State != nil {
			// Enabling an endpoint the server disabled clears the reason; its held deliveries resume.
			e.State, e.DisabledReason = apitype.WebhookState(*req.State), ""
		}
		e.UpdatedAt = now
		return nil
	})
	if err != nil {
		return lookup(err, "webhook endpoint", id)
	}
	return writeJSON(w, http.StatusOK, viewWebhook(rec))
}

func (s *Server) webhookDelete(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("webhook_endpoint_id")
	if err := s.store.WebhookEndpointDelete(r.Context(), id); err != nil {
		return lookup(err, "webhook endpoint", id)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "webhook_endpoint_deleted"})
}

// webhookRegenerate replaces an endpoint's signing secret: deliveries signed from now on use the new one.
func (s *Server) webhookRegenerate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("webhook_endpoint_id")
	secret, sealed, err := s.newSigningSecret(id)
	if err != nil {
		return err
	}
	now := s.now()
	if _, err := s.store.WebhookEndpointUpdate(r.Context(), id, func(rec *store.WebhookEndpointRecord) error {
		rec.Secret, rec.Endpoint.UpdatedAt = *sealed, now
		return nil
	}); err != nil {
		return lookup(err, "webhook endpoint", id)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"signing_secret": secret})
}

// webhookList lists the endpoints, oldest first (order desc: newest first), paged as a Page: limit, and
// after_id or before_id.
func (s *Server) webhookList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	limit, err := q.limit(defaultWebhookLimit, maxWebhookLimit)
	if err != nil {
		return err
	}
	desc, err := q.desc(false)
	if err != nil {
		return err
	}
	recs, err := s.store.WebhookEndpointList(r.Context(), &store.ListParams{Limit: maxWebhookEndpoints + 1, Desc: desc, Workspace: workspaceOf(r)})
	if err != nil {
		return err
	}
	all := make([]apitype.WebhookEndpoint, len(recs))
	for i := range recs {
		all[i] = *viewWebhook(&recs[i])
	}
	lo, hi, hasMore, err := idPage(q, len(all), limit, func(id string) int {
		return slices.IndexFunc(all, func(e apitype.WebhookEndpoint) bool { return e.ID == id })
	})
	if err != nil {
		return err
	}
	page := webhookPage{Data: all[lo:hi], HasMore: hasMore}
	if n := len(page.Data); n > 0 {
		page.FirstID, page.LastID = &page.Data[0].ID, &page.Data[n-1].ID
	}
	return writeJSON(w, http.StatusOK, page)
}

// idPage is the window [lo, hi) of an n-item list that a Page request (limit, after_id or before_id) asks for,
// and whether more items lie beyond it in the direction of paging. find is an id's index (-1: none).
func idPage(q query, n, limit int, find func(id string) int) (lo, hi int, more bool, err error) {
	after, before := q.str("after_id"), q.str("before_id")
	switch {
	case after != "" && before != "":
		return 0, 0, false, invalid("", "after_id and before_id cannot be given together")
	case after != "":
		i := find(after)
		if i < 0 {
			return 0, 0, false, invalid("after_id", "no such item %q", after)
		}
		lo, hi = i+1, min(i+1+limit, n)
		return lo, hi, hi < n, nil
	case before != "":
		i := find(before)
		if i < 0 {
			return 0, 0, false, invalid("before_id", "no such item %q", before)
		}
		lo, hi = max(i-limit, 0), i
		return lo, hi, lo > 0, nil
	}
	hi = min(limit, n)
	return 0, hi, hi < n, nil
}

// webhookDeliveryList lists an endpoint's deliveries, newest first (Corral's own endpoint, for the console and
// for operators: what was sent, and how it went).
func (s *Server) webhookDeliveryList(w http.ResponseWriter, r *http.Request) error {
	id, ctx := r.PathValue("webhook_endpoint_id"), r.Context()
	if _, err := s.store.WebhookEndpointGet(ctx, id); err != nil {
		return lookup(err, "webhook endpoint", id)
	}
	q := newQuery(r.URL)
	limit, err := q.limit(defaultWebhookLimit, maxDeliveryLimit)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	p := &store.WebhookDeliveryListParams{EndpointID: id, Limit: limit + 1}
	if c != nil {
		if c.ID == "" || c.T == 0 {
			return invalid("page", "invalid page token")
		}
		p.Before = &store.Cursor{CreatedAt: time.UnixMicro(c.T).UTC(), ID: c.ID}
	}
	ds, err := s.store.WebhookDeliveryList(ctx, p)
	if err != nil {
		return err
	}
	ds, more := trim(ds, limit)
	out := make([]webhookDelivery, len(ds))
	for i := range ds {
		out[i] = viewDelivery(&ds[i])
	}
	var next *string
	if more {
		last := &ds[len(ds)-1]
		next = itemCursor(last.CreatedAt, last.Event.ID, false)
	}
	return writeJSON(w, http.StatusOK, listPage[webhookDelivery]{Data: out, NextPage: next})
}

func viewDelivery(d *store.WebhookDelivery) webhookDelivery {
	v := webhookDelivery{Event: d.Event, State: d.State, Attempts: d.Attempts, LastAttemptAt: d.LastAttemptAt,
		CreatedAt: d.CreatedAt}
	if d.State == store.DeliveryPending {
		v.NextAttemptAt = &d.NextAttemptAt
	}
	if d.LastAttemptAt != nil {
		st, msg := d.LastStatus, d.LastError
		v.LastStatus, v.LastError = &st, &msg
	}
	return v
}

// OpenWebhookSecret opens an endpoint's sealed signing secret, for the dispatcher.
func (s *Server) OpenWebhookSecret(_ context.Context, sealed *store.SealedSecret) (string, error) {
	if s.sealer == nil {
		return "", errNoSealer
	}
	b, err := s.sealer.Open(sealed)
	return string(b), err
}
