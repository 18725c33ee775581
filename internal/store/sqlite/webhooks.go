package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var webhookEndpoints = &table[store.WebhookEndpointRecord]{
	what: "webhook endpoint", name: "webhook_endpoints", alias: "w",
	sel:  `SELECT w.doc FROM webhook_endpoints w`,
	scan: scanDoc[store.WebhookEndpointRecord]("webhook endpoint", nil),
	put: func(w *wtx, e, _ *store.WebhookEndpointRecord) error {
		doc, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = w.exec(`UPDATE webhook_endpoints SET state = ?, doc = ? WHERE id = ?`,
			string(e.Endpoint.State), doc, e.Endpoint.ID)
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
		scan: func(row scanner) (*store.WebhookDelivery, error) { return scanDelivery(row, false) },
	}
	webhookDue = &table[store.WebhookDelivery]{
		what: "webhook delivery", name: "webhook_deliveries", alias: "d",
		sel: `SELECT ` + deliveryColumns + `, w.doc FROM webhook_deliveries d
			JOIN webhook_events e ON e.id = d.event_id JOIN webhook_endpoints w ON w.id = d.endpoint_id`,
		scan: func(row scanner) (*store.WebhookDelivery, error) { return scanDelivery(row, true) },
	}
)

// The statements of the outbox's work, each a range search of an index of its own (TestWebhookPlans).
const (
	// unfannedSQL selects the events that have not fanned out, oldest first.
	// An event's workspace is the one its data names, or else (the events a log's append records name the
	// default one) the owner of its vault or its object.
	unfannedSQL = `SELECT e.id, e.type, e.created_at, CASE
			WHEN json_extract(CAST(e.doc AS TEXT), '$.data.workspace_id') <> '` + apitype.DefaultWorkspaceID + `'
			THEN json_extract(CAST(e.doc AS TEXT), '$.data.workspace_id')
			ELSE coalesce((SELECT o.workspace_id FROM owners o WHERE o.id = coalesce(
				json_extract(CAST(e.doc AS TEXT), '$.data.vault_id'), json_extract(CAST(e.doc AS TEXT), '$.data.id'))),
				'` + apitype.DefaultWorkspaceID + `') END
		FROM webhook_events e WHERE e.fanned_out_at IS NULL ORDER BY e.created_at, e.id LIMIT ?`
	// anyEndpointEnabledSQL says whether any endpoint is enabled (the outbox records events only then).
	anyEndpointEnabledSQL = `SELECT EXISTS (SELECT 1 FROM webhook_endpoints WHERE state = 'enabled')`
	// enabledEndpointsSQL selects the enabled endpoints with their workspaces.
	enabledEndpointsSQL = `SELECT w.doc, coalesce((SELECT o.workspace_id FROM owners o WHERE o.id = w.id),
		'` + apitype.DefaultWorkspaceID + `') FROM webhook_endpoints w WHERE w.state = 'enabled'`
	// pruneDeliveriesSQL deletes the final deliveries last attempted before a time.
	pruneDeliveriesSQL = `DELETE FROM webhook_deliveries WHERE state <> 'pending' AND last_attempt_at < ?`
	// pruneEventsSQL deletes the events fanned out before a time that no delivery shows.
	pruneEventsSQL = `DELETE FROM webhook_events WHERE fanned_out_at < ?
		AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = webhook_events.id)`
)

// dueSQL selects the pending deliveries due at a time to enabled endpoints, except those of skip endpoints
// (each a placeholder), soonest first.
func dueSQL(skip int) string {
	not := ""
	if skip > 0 {
		not = ` AND d.endpoint_id NOT IN (` + placeholders(skip) + `)`
	}
	return webhookDue.sel + `
	WHERE d.state = 'pending' AND d.next_attempt_at <= ? AND w.state = 'enabled'` + not + `
	ORDER BY d.next_attempt_at, d.event_id, d.endpoint_id LIMIT ?`
}

// WebhookEndpointCreate stores a new endpoint, without the signing secret shown once (its record keeps it
// sealed).
func (s *Store) WebhookEndpointCreate(ctx context.Context, e *store.WebhookEndpointRecord) error {
	rec := *e
	rec.Endpoint.SigningSecret = ""
	doc, err := json.Marshal(&rec)
	if err != nil {
		return writeErr(err, "create webhook endpoint %s", e.Endpoint.ID)
	}
	return webhookEndpoints.create(ctx, s, e.Endpoint.ID, `INSERT INTO webhook_endpoints (id, created_at, state, doc)
		VALUES (?, ?, ?, ?)`, e.Endpoint.ID, micros(e.Endpoint.CreatedAt), string(e.Endpoint.State), doc)
}

// WebhookEndpointGet returns an endpoint.
func (s *Store) WebhookEndpointGet(ctx context.Context, id string) (*store.WebhookEndpointRecord, error) {
	return webhookEndpoints.get(ctx, s, id, "w.id = ?", id)
}

// WebhookEndpointUpdate applies fn to the endpoint and stores the result, atomically.
func (s *Store) WebhookEndpointUpdate(ctx context.Context, id string,
	fn func(*store.WebhookEndpointRecord) error) (*store.WebhookEndpointRecord, error) {
	return webhookEndpoints.update(ctx, s, id, fn, store.KeepWebhookEndpoint)
}

// WebhookEndpointList lists endpoints.
func (s *Store) WebhookEndpointList(ctx context.Context, p *store.ListParams) ([]store.WebhookEndpointRecord, error) {
	return webhookEndpoints.list(ctx, s, &filter{}, p)
}

// WebhookEndpointDelete deletes an endpoint and, by cascade, its deliveries.
func (s *Store) WebhookEndpointDelete(ctx context.Context, id string) error {
	return webhookEndpoints.delete(ctx, s, id, "id = ?", id)
}

// WebhookEventAppend records events in the outbox, skipping those recorded already.
func (s *Store) WebhookEventAppend(ctx context.Context, events []apitype.WebhookEvent) error {
	if len(events) == 0 {
		return nil
	}
	err := s.write(ctx, func(w *wtx) error { return insertWebhookEvents(w, events) }, nil)
	return writeErr(err, "append %d webhook events", len(events))
}

// insertWebhookEvents records events in w's transaction (EventAppend's and SessionCreate's too); an event whose
// id is recorded is skipped. Nothing is recorded while no endpoint is enabled: a fan-out would deliver the events
// to no one (an endpoint gets the events of the time it is enabled), and a turn's appends write fewer pages.
func insertWebhookEvents(w *wtx, events []apitype.WebhookEvent) error {
	if len(events) == 0 {
		return nil
	}
	var enabled bool
	if err := w.queryRow(anyEndpointEnabledSQL).Scan(&enabled); err != nil || !enabled {
		return err
	}
	for i := range events {
		ev := &events[i]
		doc, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if _, err := w.exec(`INSERT OR IGNORE INTO webhook_events (id, type, created_at, doc) VALUES (?, ?, ?, ?)`,
			ev.ID, ev.Data.Type, micros(ev.CreatedAt), doc); err != nil {
			return err
		}
	}
	return nil
}

// WebhookFanOut turns up to limit events that have not fanned out into deliveries, in one transaction of the
// writer (which runs alone: no other fan-out can take the same events).
func (s *Store) WebhookFanOut(ctx context.Context, limit int) (int, error) {
	return writeResult(ctx, s, func(w *wtx) (int, error) {
		now := apitype.Now()
		type pending struct {
			id, typ, ws string
			created     int64
		}
		rows, err := w.query(unfannedSQL, limitArg(limit))
		if err != nil {
			return 0, err
		}
		var events []pending
		for rows.Next() {
			var e pending
			if err := rows.Scan(&e.id, &e.typ, &e.created, &e.ws); err != nil {
				rows.Close()
				return 0, err
			}
			events = append(events, e)
		}
		if err := rows.Close(); err != nil {
			return 0, err
		}
		if err := rows.Err(); err != nil || len(events) == 0 {
			return 0, err
		}
		rows, err = w.query(enabledEndpointsSQL)
		if err != nil {
			return 0, err
		}
		type endpoint struct {
			store.WebhookEndpointRecord
			ws string
		}
		endpoints, err := collect(rows, func(row scanner) (*endpoint, error) {
			var doc []byte
			var e endpoint
			if err := row.Scan(&doc, &e.ws); err != nil {
				return nil, err
			}
			rec, err := decodeDoc[store.WebhookEndpointRecord]("webhook endpoint", doc)
			if err != nil {
				return nil, err
			}
			e.WebhookEndpointRecord = *rec
			return &e, nil
		})
		if err != nil {
			return 0, err
		}
		at := micros(now)
		for _, ev := range events {
			for i := range endpoints {
				ep := &endpoints[i].Endpoint
				if micros(ep.CreatedAt) > ev.created || !ep.Subscribed(apitype.WebhookEventType(ev.typ)) ||
					endpoints[i].ws != ev.ws {
					continue
				}
				if _, err := w.exec(`INSERT OR IGNORE INTO webhook_deliveries
					(event_id, endpoint_id, state, next_attempt_at, created_at) VALUES (?, ?, 'pending', ?, ?)`,
					ev.id, ep.ID, ev.created, ev.created); err != nil {
					return 0, err
				}
			}
			if _, err := w.exec(`UPDATE webhook_events SET fanned_out_at = ?,
					doc = json_set(CAST(doc AS TEXT), '$.data.workspace_id', ?) WHERE id = ?`, at, ev.ws, ev.id); err != nil {
				return 0, err
			}
		}
		return len(events), nil
	}, "fan out webhook events")
}

// WebhookClaimDue claims the pending deliveries due at p.Now to enabled endpoints, soonest first: their
// next_attempt_at becomes p.Until in the same transaction (none with a zero Until).
func (s *Store) WebhookClaimDue(ctx context.Context, p *store.WebhookClaimParams) ([]store.WebhookDelivery, error) {
	args := []any{micros(p.Now)}
	for _, id := range p.Skip {
		args = append(args, id)
	}
	args = append(args, limitArg(p.Limit))
	query := dueSQL(len(p.Skip))
	if p.Until.IsZero() {
		return webhookDue.rows(ctx, s, "list webhook deliveries due", query, args...)
	}
	return writeResult(ctx, s, func(w *wtx) ([]store.WebhookDelivery, error) {
		rows, err := w.query(query, args...)
		if err != nil {
			return nil, err
		}
		due, err := collect(rows, webhookDue.scan)
		if err != nil {
			return nil, err
		}
		for i := range due {
			if _, err := w.exec(`UPDATE webhook_deliveries SET next_attempt_at = ? WHERE event_id = ? AND endpoint_id = ?`,
				micros(p.Until), due[i].Event.ID, due[i].EndpointID); err != nil {
				return nil, err
			}
		}
		return due, nil
	}, "claim webhook deliveries due")
}

// WebhookAttempt records an attempt at a delivery, fenced by its number, and disables the endpoint if asked.
func (s *Store) WebhookAttempt(ctx context.Context, p *store.WebhookAttemptParams) error {
	var next any
	switch p.State {
	case store.DeliveryPending:
		next = micros(p.NextAttemptAt)
	case store.DeliveryDelivered, store.DeliveryFailed:
	default:
		return fmt.Errorf("sqlite: webhook attempt %s/%s: unknown state %q", p.EventID, p.EndpointID, p.State)
	}
	err := s.write(ctx, func(w *wtx) error {
		n, err := w.execN(`UPDATE webhook_deliveries SET state = ?, attempts = ?,
				next_attempt_at = coalesce(?, next_attempt_at), last_status = ?, last_error = ?, last_attempt_at = ?
			WHERE event_id = ? AND endpoint_id = ? AND attempts = ? AND state = 'pending'`,
			p.State, p.Attempt, next, p.Status, p.Error, micros(p.At), p.EventID, p.EndpointID, p.Attempt-1)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("attempt %d is not the next one of a pending delivery: %w", p.Attempt, store.ErrConflict)
		}
		if p.DisableReason == "" {
			return nil
		}
		return disableEndpoint(w, p.EndpointID, p.DisableReason, p.At)
	}, nil)
	return writeErr(err, "webhook attempt %s/%s", p.EventID, p.EndpointID)
}

// disableEndpoint disables an enabled endpoint with the reason; one disabled already is left as it is.
func disableEndpoint(w *wtx, id, reason string, at time.Time) error {
	cur, err := webhookEndpoints.read(w, "w.id = ?", id)
	if err != nil || cur.Endpoint.State != apitype.WebhookEnabled {
		return err
	}
	next := *cur
	next.Endpoint.State, next.Endpoint.DisabledReason, next.Endpoint.UpdatedAt = apitype.WebhookDisabled, reason, at
	return webhookEndpoints.put(w, &next, cur)
}

// WebhookDeliveryList lists an endpoint's deliveries, newest first.
func (s *Store) WebhookDeliveryList(ctx context.Context, p *store.WebhookDeliveryListParams) ([]store.WebhookDelivery, error) {
	f := &filter{}
	f.add("d.endpoint_id = ?", p.EndpointID)
	if p.Before != nil {
		f.add("(d.created_at, d.event_id) < (?, ?)", micros(p.Before.CreatedAt), p.Before.ID)
	}
	return webhookDeliveries.rows(ctx, s, "list webhook deliveries of "+p.EndpointID, webhookDeliveries.sel+f.where()+
		` ORDER BY d.created_at DESC, d.event_id DESC LIMIT ?`, append(f.args, limitArg(p.Limit))...)
}

// WebhookPrune deletes the final deliveries last attempted before before, then the events fanned out before
// before that have no delivery left: an event stays as long as a delivery shows it.
func (s *Store) WebhookPrune(ctx context.Context, before time.Time) (int, error) {
	return writeResult(ctx, s, func(w *wtx) (int, error) {
		t := micros(before)
		deliveries, err := w.execN(pruneDeliveriesSQL, t)
		if err != nil {
			return 0, err
		}
		events, err := w.execN(pruneEventsSQL, t)
		return int(deliveries + events), err
	}, "prune webhooks before %s", before)
}

// scanDelivery reads deliveryColumns and, withEndpoint, the endpoint's document (its URL and sealed secret).
func scanDelivery(row scanner, withEndpoint bool) (*store.WebhookDelivery, error) {
	var (
		d               store.WebhookDelivery
		event, endpoint []byte
		next, created   int64
		lastAttempt     sql.NullInt64
	)
	dest := []any{&event, &d.EndpointID, &d.State, &d.Attempts, &next, &d.LastStatus, &d.LastError, &lastAttempt,
		&created}
	if withEndpoint {
		dest = append(dest, &endpoint)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(event, &d.Event); err != nil {
		return nil, fmt.Errorf("decode webhook event: %w", err)
	}
	d.NextAttemptAt, d.CreatedAt, d.LastAttemptAt = fromMicros(next), fromMicros(created), timePtr(lastAttempt)
	if withEndpoint {
		ep, err := decodeDoc[store.WebhookEndpointRecord]("webhook endpoint", endpoint)
		if err != nil {
			return nil, err
		}
		d.URL, d.Secret = ep.Endpoint.URL, ep.Secret
	}
	return &d, nil
}
