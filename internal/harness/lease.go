package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// renew renews the lease every LeaseTTL/3 until ctx is done. When the store says the lease is lost, or it
// cannot be renewed before it expires, it cancels the work with errLeaseLost.
func (b *Brain) renew(ctx context.Context, h *leaseHolder, cancel context.CancelCauseFunc) {
	t := time.NewTicker(b.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.renew(ctx, b.cfg.Store, b.cfg.LeaseTTL); err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, store.ErrLeaseLost) || time.Now().After(h.get().ExpiresAt) {
				cancel(errLeaseLost)
				return
			}
			b.cfg.Logger.Warn("lease renewal failed", "session", h.get().SessionID, "err", err)
		}
	}
}

// leaseHolder is the current lease of a session being worked, shared by the work and its renewal.
type leaseHolder struct {
	mu    sync.Mutex
	lease store.Lease
}

func (h *leaseHolder) get() *store.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.lease
	return &l
}

// renew extends the lease and keeps its WakeSeq, the wake-ups a release counts as handled: those the claim saw,
// which the brain's first look at the log (after the claim) covers. Taking the store's newer WakeSeq could mark a
// client event that arrived after the brain's last look as handled, and the session would never run again; left
// as is, a wake-up the brain did act on only costs one more claim that finds nothing to do.
func (h *leaseHolder) renew(ctx context.Context, s store.Store, ttl time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, err := s.LeaseRenew(ctx, &h.lease, ttl)
	if err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	l.WakeSeq = h.lease.WakeSeq
	h.lease = *l
	return nil
}
