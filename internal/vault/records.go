package vault

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/corralhq/corral/internal/store"
)

// RecordStore holds the records whose documents keep sealed secrets besides the secret tables: deployments
// (their repositories' tokens), webhook endpoints (their signing secrets) and tunnels (their tokens). Rotate
// rewraps them too.
type RecordStore interface {
	DeploymentList(ctx context.Context, p *store.DeploymentListParams) ([]store.DeploymentRecord, error)
	DeploymentUpdate(ctx context.Context, id string, fn func(*store.DeploymentRecord) error) (*store.DeploymentRecord, error)
	WebhookEndpointList(ctx context.Context, p *store.ListParams) ([]store.WebhookEndpointRecord, error)
	WebhookEndpointUpdate(ctx context.Context, id string, fn func(*store.WebhookEndpointRecord) error) (*store.WebhookEndpointRecord, error)
	TunnelList(ctx context.Context, p *store.ListParams) ([]store.TunnelRecord, error)
	TunnelUpdate(ctx context.Context, id string, fn func(*store.TunnelRecord) error) (*store.TunnelRecord, error)
}

// rotateRecords rewraps the secrets kept in records (RecordStore) that are not under the primary key, each
// record in one update that rewraps what it holds then (a secret replaced meanwhile is rewrapped as it is).
// It returns how many secrets it rewrapped, and how many records still hold one under another key.
func rotateRecords(ctx context.Context, st RecordStore, v *Vault) (rewrapped, left int, err error) {
	stale := func(s *store.SealedSecret) bool { return s.KeyID != "" && s.KeyID != v.primary.id }
	rewrap := func(s *store.SealedSecret) error {
		if !stale(s) {
			return nil
		}
		nw, err := v.Rewrap(s)
		if err != nil {
			return fmt.Errorf("vault: rotate %s/%s: %w", s.CredentialID, s.Name, err)
		}
		*s = *nw
		rewrapped++
		return nil
	}
	p := &store.DeploymentListParams{ListParams: store.ListParams{Limit: rotatePage, IncludeArchived: true}}
	for {
		page, err := st.DeploymentList(ctx, p)
		if err != nil {
			return rewrapped, left, fmt.Errorf("vault: rotate: list deployments: %w", err)
		}
		for i := range page {
			if !slices.ContainsFunc(page[i].Tokens, func(s store.SealedSecret) bool { return stale(&s) }) {
				continue
			}
			if _, err := st.DeploymentUpdate(ctx, page[i].Deployment.ID, func(r *store.DeploymentRecord) error {
				for j := range r.Tokens {
					if err := rewrap(&r.Tokens[j]); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return rewrapped, left + 1, err
			}
		}
		if len(page) < rotatePage {
			break
		}
		last := page[len(page)-1].Deployment
		p.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	eps, err := st.WebhookEndpointList(ctx, &store.ListParams{})
	if err != nil {
		return rewrapped, left, fmt.Errorf("vault: rotate: list webhook endpoints: %w", err)
	}
	for i := range eps {
		if !stale(&eps[i].Secret) {
			continue
		}
		if _, err := st.WebhookEndpointUpdate(ctx, eps[i].Endpoint.ID, func(r *store.WebhookEndpointRecord) error {
			return rewrap(&r.Secret)
		}); err != nil {
			return rewrapped, left + 1, err
		}
	}
	err = eachTunnel(ctx, st, func(t *store.TunnelRecord) error {
		if !stale(&t.Token) {
			return nil
		}
		_, err := st.TunnelUpdate(ctx, t.ID, func(r *store.TunnelRecord) error { return rewrap(&r.Token) })
		if err != nil {
			left++
		}
		return err
	})
	return rewrapped, left, err
}

// eachTunnel calls fn for every tunnel, archived ones included (an archived tunnel's token is kept sealed).
func eachTunnel(ctx context.Context, st RecordStore, fn func(*store.TunnelRecord) error) error {
	p := &store.ListParams{Limit: rotatePage, IncludeArchived: true}
	for {
		page, err := st.TunnelList(ctx, p)
		if err != nil {
			return fmt.Errorf("vault: list tunnels: %w", err)
		}
		for i := range page {
			if err := fn(&page[i]); err != nil {
				return err
			}
		}
		if len(page) < rotatePage {
			return nil
		}
		last := page[len(page)-1]
		p.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// recordOrphan returns a secret kept in a record that is wrapped under none of the vault's keys, or nil.
func recordOrphan(ctx context.Context, st RecordStore, v *Vault) (*store.SealedSecret, error) {
	orphan := func(s *store.SealedSecret) bool { _, ok := v.keys[s.KeyID]; return s.KeyID != "" && !ok }
	p := &store.DeploymentListParams{ListParams: store.ListParams{Limit: rotatePage, IncludeArchived: true}}
	for {
		page, err := st.DeploymentList(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("vault: read deployments: %w", err)
		}
		for i := range page {
			for j := range page[i].Tokens {
				if orphan(&page[i].Tokens[j]) {
					return &page[i].Tokens[j], nil
				}
			}
		}
		if len(page) < rotatePage {
			break
		}
		last := page[len(page)-1].Deployment
		p.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	eps, err := st.WebhookEndpointList(ctx, &store.ListParams{})
	if err != nil {
		return nil, fmt.Errorf("vault: read webhook endpoints: %w", err)
	}
	for i := range eps {
		if orphan(&eps[i].Secret) {
			return &eps[i].Secret, nil
		}
	}
	var found *store.SealedSecret
	errFound := errors.New("found")
	err = eachTunnel(ctx, st, func(t *store.TunnelRecord) error {
		if orphan(&t.Token) {
			found = &t.Token
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return nil, err
	}
	return found, nil
}
