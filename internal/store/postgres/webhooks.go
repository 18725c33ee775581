package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var webhookEndpoints = &table[store.WebhookEndpointRecord]{
	what: "webhook endpoint", name: "webhook_endpoints", alias: "w",
	sel:  `SELECT w.doc FROM webhook_endpoints w`,
	scan: scanDoc[store.WebhookEndpointRecord]("webhook endpoint", nil),
	put: func(ctx context.Context, tx pgx.Tx, e, _ *store.WebhookEndpointRecord) error {
		doc, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_endpoints SET state = $2, doc = $3 WHERE id = $1`,
			e.Endpoint.ID, string(e.Endpoint.State), doc)
		return err
	},
}

// deliveryColumns are the columns scanDelivery reads, of webhook_deliveries d joined with webhook_events e.
const deliveryColumns = `e.doc, d.endpoint_id, d.state, d.attempts, d.next_attempt_at, d.last_status, d.last_error,
	d.last_attempt_at, d.created_at`

// webhookDeliveries lists an endpoint's deliveries; webhookDue the deliveries due, with their endpoint.
var (
	webhookDeliveries = &table[store.WebhookDelivery]{
		what: "webhook delivery", name: "webhook_deliveries", alias: "d",
		sel:  `SELECT ` + deliveryColumns + ` FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id`,
		scan: func(row pgx.Row) (*store.WebhookDelivery, error) { return scanDelivery(row, false) },
	}
	webhookDue = &table[store.WebhookDelivery]{
		what: "webhook delivery", name: "webhook_deliveries", alias: "d",
		sel: `SELECT ` + deliveryColumns + `, w.doc FROM webhook_deliveries d
			JOIN webhook_events e ON e.id = d.event_id JOIN webhook_endpoints w ON w.id = d.endpoint_id`,
		scan: func(row pgx.Row) (*store.WebhookDelivery, error) { return scanDelivery(row, true) },
	}
)

// WebhookEndpointCreate stores a new endpoint, without the signing secret shown once (its record keeps it
// sealed).
func (s *Store) WebhookEndpointCreate(ctx context.Context, e *store.WebhookEndpointRecord) error {
	rec := *e
	rec.Endpoint.SigningSecret = ""
	doc, err := json.Marshal(&rec)
	if err != nil {
		return fmt.Errorf("webhook endpoint create: encode: %w", err)
	}
	return webhookEndpoints.create(ctx, s, `INSERT INTO webhook_endpoints (id, created_at, state, doc)
		VALUES ($1, $2, $3, $4)`, e.Endpoint.ID, e.Endpoint.CreatedAt, string(e.Endpoint.State), doc)
}

// WebhookEndpointGet returns an endpoint.
func (s *Store) WebhookEndpointGet(ctx context.Context, id string) (*store.WebhookEndpointRecord, error) {
	return webhookEndpoints.get(ctx, s, "w.id = $1", id)
}

// WebhookEndpointUpdate applies fn to the endpoint under a row lock and stores the result.
func (s *Store) WebhookEndpointUpdate(ctx context.Context, id string,
	fn func(*store.WebhookEndpointRecord) error) (*store.WebhookEndpointRecord, error) {
	return webhookEndpoints.update(ctx, s, id, fn, store.KeepWebhookEndpoint)
}

// WebhookEndpointList lists endpoints.
func (s *Store) WebhookEndpointList(ctx context.Context, p *store.ListParams) ([]store.WebhookEndpointRecord, error) {
	return webhookEndpoints.list(ctx, s, webhookEndpoints.query(), p)
}

// WebhookEndpointDelete deletes an endpoint and, by cascade, its deliveries.
func (s *Store) WebhookEndpointDelete(ctx context.Context, id string) error {
	return webhookEndpoints.delete(ctx, s, "id = $1", id)
}

// WebhookEventAppend records events in the outbox, skipping those recorded already.
func (s *Store) WebhookEventAppend(ctx context.Context, events []apitype.WebhookEvent) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	return s.dbErr("webhook event append", insertWebhookEvents(ctx, s.pool, events))
}

// anyEndpointEnabled is the condition under which the outbox records events: some endpoint is enabled. A
// fan-out would deliver the events of a time no endpoint was enabled to no one, and a turn's appends write less.
const anyEndpointEnabled = `EXISTS (SELECT 1 FROM webhook_endpoints WHERE state = 'enabled')`

// insertWebhookEvents records events through q (SessionCreate's transaction too); an event whose id is recorded
// is skipped, and nothing is recorded while no endpoint is enabled (anyEndpointEnabled).
func insertWebhookEvents(ctx context.Context, q querier, events []apitype.WebhookEvent) error {
	var a webhookArgs
	a.add(0, events)
	_, err := q.Exec(ctx, `INSERT INTO webhook_events (id, type, created_at, doc)
		SELECT w.id, w.type, w.created, w.doc::json
		FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[]) AS w (id, type, created, doc)
		WHERE `+anyEndpointEnabled+`
		ON CONFLICT (id) DO NOTHING`, a.ids, a.types, a.created, a.docs)
	return err
}

// webhookArgs gathers webhook events as arrays: insertWebhookEvents's, and those of the webhooks step of an
// append (webhooksCTE), with the index of the request that tells each.
type webhookArgs struct {
	idx              []int32
	ids, types, docs []string
	created          []time.Time
}

// add adds the events of request i.
func (a *webhookArgs) add(i int32, events []apitype.WebhookEvent) {
	for j := range events {
		ev := &events[j]
		doc, _ := json.Marshal(ev) // a WebhookEvent always encodes.
		a.idx = append(a.idx, i)
		a.ids = append(a.ids, ev.ID)
		a.types = append(a.types, string(ev.Data.Type))
		a.created = append(a.created, ev.CreatedAt)
		a.docs = append(a.docs, string(doc))
	}
}

// args are the webhooks step's arguments, in webhooksCTE's order.
func (a *webhookArgs) args() []any { return []any{a.idx, a.ids, a.types, a.created, a.docs} }

// WebhookFanOut turns up to limit events that have not fanned out into deliveries, in one transaction. It
// claims the events with FOR UPDATE SKIP LOCKED, so that concurrent fan-outs take different events (one that
// finds an event fanned out meanwhile skips it: the row no longer matches once its lock is released), and the
// primary key of the deliveries keeps each (event, endpoint) once whatever happens.
func (s *Store) WebhookFanOut(ctx context.Context, limit int) (int, error) {
	return txResult(ctx, s, "webhook fan out", func(tx pgx.Tx) (int, error) {
		now := apitype.Now()
		// An event's workspace is the one its data names, or else (the events a log's append records name the
		// default one) the owner of its vault or its object.
		rows, err := tx.Query(ctx, `SELECT e.id, e.type, e.created_at, CASE
				WHEN e.doc->'data'->>'workspace_id' <> $2 THEN e.doc->'data'->>'workspace_id'
				ELSE coalesce((SELECT o.workspace_id FROM owners o
					WHERE o.id = coalesce(e.doc->'data'->>'vault_id', e.doc->'data'->>'id')), $2) END
			FROM webhook_events e WHERE e.fanned_out_at IS NULL
			ORDER BY e.created_at, e.id LIMIT $1 FOR UPDATE SKIP LOCKED`, limitOrAll(limit), apitype.DefaultWorkspaceID)
		if err != nil {
			return 0, err
		}
		var (
			ids, types, wss []string
			created         []time.Time
		)
		var id, typ, ws string
		var at time.Time
		if _, err := pgx.ForEachRow(rows, []any{&id, &typ, &at, &ws}, func() error {
			ids, types, created, wss = append(ids, id), append(types, typ), append(created, at), append(wss, ws)
			return nil
		}); err != nil || len(ids) == 0 {
			return 0, err
		}
		// FOR KEY SHARE: an endpoint being deleted is waited for, then left out, instead of failing the
		// deliveries' foreign key.
		endpoints, err := webhookEndpoints.all(ctx, tx, webhookEndpoints.sel+` WHERE w.state = 'enabled' FOR KEY SHARE`)
		if err != nil {
			return 0, err
		}
		epIDs := make([]string, len(endpoints))
		for j := range endpoints {
			epIDs[j] = endpoints[j].Endpoint.ID
		}
		owned := map[string]string{} // the endpoints with an owner recorded; the others are the default workspace's
		rows, err = tx.Query(ctx, `SELECT id, workspace_id FROM owners WHERE id = ANY($1)`, epIDs)
		if err != nil {
			return 0, err
		}
		var ownedID, ownedWS string
		if _, err := pgx.ForEachRow(rows, []any{&ownedID, &ownedWS}, func() error {
			owned[ownedID] = ownedWS
			return nil
		}); err != nil {
			return 0, err
		}
		epWS := make([]string, len(endpoints))
		for j, id := range epIDs {
			epWS[j] = cmp.Or(owned[id], apitype.DefaultWorkspaceID)
		}
		var (
			evs, eps []string
			due      []time.Time
		)
		for i := range ids {
			for j := range endpoints {
				ep := &endpoints[j].Endpoint
				if ep.CreatedAt.Truncate(time.Microsecond).After(created[i]) || !ep.Subscribed(apitype.WebhookEventType(types[i])) ||
					epWS[j] != wss[i] {
					continue
				}
				evs, eps, due = append(evs, ids[i]), append(eps, ep.ID), append(due, created[i])
			}
		}
		if len(evs) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, state, next_attempt_at,
					created_at)
				SELECT x.event_id, x.endpoint_id, 'pending', x.at, x.at FROM unnest($1::text[], $2::text[], $3::timestamptz[])
					AS x (event_id, endpoint_id, at)
				ON CONFLICT DO NOTHING`, evs, eps, due); err != nil {
				return 0, err
			}
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_events e SET fanned_out_at = $2,
				doc = jsonb_set(e.doc::jsonb, '{data,workspace_id}', to_jsonb(x.ws))::json
			FROM unnest($1::text[], $3::text[]) AS x (id, ws) WHERE e.id = x.id`, ids, now, wss)
		return len(ids), err
	})
}

// WebhookClaimDue claims the pending deliveries due at p.Now to enabled endpoints, soonest first: their
// next_attempt_at becomes p.Until in the same transaction (none with a zero Until). Concurrent claims take
// different rows (FOR UPDATE OF d SKIP LOCKED).
func (s *Store) WebhookClaimDue(ctx context.Context, p *store.WebhookClaimParams) ([]store.WebhookDelivery, error) {
	return txResult(ctx, s, "webhook claim due", func(tx pgx.Tx) ([]store.WebhookDelivery, error) {
		due, err := webhookDue.all(ctx, tx, webhookDue.sel+`
			WHERE d.state = 'pending' AND d.next_attempt_at <= $1 AND w.state = 'enabled'
				AND NOT (d.endpoint_id = ANY($3::text[]))
			ORDER BY d.next_attempt_at, d.event_id, d.endpoint_id LIMIT $2 FOR UPDATE OF d SKIP LOCKED`,
			p.Now, limitOrAll(p.Limit), append([]string{}, p.Skip...))
		if err != nil || p.Until.IsZero() || len(due) == 0 {
			return due, err
		}
		evs, eps := make([]string, len(due)), make([]string, len(due))
		for i := range due {
			evs[i], eps[i] = due[i].Event.ID, due[i].EndpointID
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_deliveries d SET next_attempt_at = $3
			FROM unnest($1::text[], $2::text[]) AS x (event_id, endpoint_id)
			WHERE d.event_id = x.event_id AND d.endpoint_id = x.endpoint_id`, evs, eps, p.Until)
		return due, err
	})
}

// WebhookAttempt records an attempt at a delivery, fenced by its number, and disables the endpoint if asked.
func (s *Store) WebhookAttempt(ctx context.Context, p *store.WebhookAttemptParams) error {
	var next *time.Time
	switch p.State {
	case store.DeliveryPending:
		next = &p.NextAttemptAt
	case store.DeliveryDelivered, store.DeliveryFailed:
	default:
		return fmt.Errorf("webhook attempt: unknown state %q", p.State)
	}
	return s.dbErr("webhook attempt", s.inTx(ctx, func(tx pgx.Tx) error {
		// The endpoint to disable is locked first, before its delivery, in the order of a delete (the endpoint,
		// then its deliveries by cascade), so that the two cannot deadlock.
		var ep *store.WebhookEndpointRecord
		if p.DisableReason != "" {
			var err error
			ep, err = webhookEndpoints.read(ctx, tx, " FOR NO KEY UPDATE", "w.id = $1", p.EndpointID)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET state = $3, attempts = $4,
				next_attempt_at = COALESCE($5, next_attempt_at), last_status = $6, last_error = $7, last_attempt_at = $8
			WHERE event_id = $1 AND endpoint_id = $2 AND attempts = $9 AND state = 'pending'`,
			p.EventID, p.EndpointID, p.State, p.Attempt, next, p.Status, p.Error, p.At, p.Attempt-1)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("attempt %d is not the next one of a pending delivery: %w", p.Attempt, store.ErrConflict)
		}
		if ep == nil || ep.Endpoint.State != apitype.WebhookEnabled {
			return nil // a disabled endpoint is left as it is
		}
		next := *ep
		next.Endpoint.State, next.Endpoint.DisabledReason, next.Endpoint.UpdatedAt = apitype.WebhookDisabled,
			p.DisableReason, p.At
		return webhookEndpoints.put(ctx, tx, &next, ep)
	}))
}

// WebhookDeliveryList lists an endpoint's deliveries, newest first.
func (s *Store) WebhookDeliveryList(ctx context.Context, p *store.WebhookDeliveryListParams) ([]store.WebhookDelivery, error) {
	q := webhookDeliveries.query()
	fmt.Fprintf(&q.sql, " AND d.endpoint_id = %s", q.arg(p.EndpointID))
	if p.Before != nil {
		fmt.Fprintf(&q.sql, " AND (d.created_at, d.event_id) < (%s, %s)", q.arg(p.Before.CreatedAt), q.arg(p.Before.ID))
	}
	fmt.Fprintf(&q.sql, " ORDER BY d.created_at DESC, d.event_id DESC LIMIT %s", q.arg(limitOrAll(p.Limit)))
	return webhookDeliveries.rows(ctx, s, "webhook delivery list", q.sql.String(), q.args...)
}

// WebhookPrune deletes the final deliveries last attempted before before, then the events fanned out before
// before that have no delivery left: an event stays as long as a delivery shows it.
func (s *Store) WebhookPrune(ctx context.Context, before time.Time) (int, error) {
	return txResult(ctx, s, "webhook prune", func(tx pgx.Tx) (int, error) {
		deliveries, err := tx.Exec(ctx, `DELETE FROM webhook_deliveries WHERE state <> 'pending' AND last_attempt_at < $1`,
			before)
		if err != nil {
			return 0, err
		}
		events, err := tx.Exec(ctx, `DELETE FROM webhook_events e WHERE e.fanned_out_at < $1
			AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id)`, before)
		if err != nil {
			return 0, err
		}
		return int(deliveries.RowsAffected() + events.RowsAffected()), nil
	})
}

// scanDelivery reads deliveryColumns and, withEndpoint, the endpoint's document (its URL and sealed secret).
func scanDelivery(row pgx.Row, withEndpoint bool) (*store.WebhookDelivery, error) {
	var (
		d               store.WebhookDelivery
		event, endpoint []byte
	)
	dest := []any{&event, &d.EndpointID, &d.State, &d.Attempts, &d.NextAttemptAt, &d.LastStatus, &d.LastError,
		&d.LastAttemptAt, &d.CreatedAt}
	if withEndpoint {
		dest = append(dest, &endpoint)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(event, &d.Event); err != nil {
		return nil, fmt.Errorf("decode webhook event: %w", err)
	}
	d.NextAttemptAt, d.CreatedAt, d.LastAttemptAt = d.NextAttemptAt.UTC(), d.CreatedAt.UTC(), utc(d.LastAttemptAt)
	if withEndpoint {
		ep, err := decodeDoc[store.WebhookEndpointRecord]("webhook endpoint", endpoint)
		if err != nil {
			return nil, err
		}
		d.URL, d.Secret = ep.Endpoint.URL, ep.Secret
	}
	return &d, nil
}

// limitOrAll is a LIMIT argument for a caller's limit: <= 0 means none (LIMIT NULL).
func limitOrAll(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}
