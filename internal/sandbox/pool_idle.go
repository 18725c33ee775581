package sandbox

import (
	"context"
	"time"
)

// The reaping of idle sandboxes: by age (reap, idle), and on demand when a write needs room (reclaimIdle,
// evictIdle).

// evictIdle removes and returns the session, other than except, that has held volumes without a call in flight
// the longest; nil if there is none. Like idle, it marks it removed at once.
func (p *Pool) evictIdle(except *session) *idleSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *session
	var bestID string
	for id, s := range p.sessions {
		if s == except || !s.mu.TryLock() {
			continue // provisioning: busy
		}
		if s.inflight == 0 && s.detach != nil && (best == nil || s.lastUsed.Before(best.lastUsed)) {
			best, bestID = s, id
		}
		s.mu.Unlock()
	}
	if best == nil {
		return nil
	}
	if !best.mu.TryLock() { // never wait for a session's lock under p.mu: its holder may be waiting for p.mu
		return nil
	}
	if best.inflight > 0 { // a call took it meanwhile
		best.mu.Unlock()
		return nil
	}
	best.removed = true
	best.mu.Unlock()
	delete(p.sessions, bestID)
	return &idleSession{id: bestID, s: best}
}

// reclaimIdle reaps the sandbox idle the longest, giving its volumes' room to a write the reserve refused
// (Reclaimer: the Files API's uploads and collected outputs), and reports whether there was one. Only one
// reclaim runs at a time: the collection of the reaped session's outputs writes files too, and a refusal there
// reaps no other session (nor does a concurrent write's: it fails as before).
func (p *Pool) reclaimIdle() bool {
	if !p.reclaiming.CompareAndSwap(false, true) {
		return false
	}
	defer p.reclaiming.Store(false)
	idle := p.evictIdle(nil)
	if idle == nil {
		return false
	}
	p.closeIdle(idle, "reaping an idle sandbox: a file write needs its volumes' room")
	return true
}

// idleSession is a session the pool took out of its map to close.
type idleSession struct {
	id string
	s  *session
}

// closeIdle collects the outputs of a session taken out of the pool, and closes its sandbox and volumes.
func (p *Pool) closeIdle(i *idleSession, why string) {
	p.cfg.Logger.Info(why, "session", i.id)
	p.collect(i.s.last())
	if err := i.s.close(); err != nil {
		p.cfg.Logger.Warn("closing idle sandbox", "session", i.id, "err", err)
	}
}

// reap closes the sandboxes that have been idle for IdleTimeout, and forgets their sessions.
func (p *Pool) reap(ctx context.Context) {
	t := time.NewTicker(max(p.cfg.IdleTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, s := range p.idle(now) {
				sb, r, host := s.last()
				p.collect(sb, r, host)
				if err := s.close(); err != nil {
					id := ""
					if r != nil {
						id = r.SessionID
					}
					p.cfg.Logger.Warn("closing idle sandbox", "session", id, "err", err)
				}
			}
		}
	}
}

// idle removes and returns the sessions with no call in flight and no use for IdleTimeout. They are marked
// removed at once: a call that took the slot before may not acquire the sandbox about to be closed.
func (p *Pool) idle(now time.Time) []*session {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*session
	for id, s := range p.sessions {
		if !s.mu.TryLock() {
			continue // provisioning: busy, not idle
		}
		idle := s.inflight == 0 && now.Sub(s.lastUsed) >= p.cfg.IdleTimeout
		if idle {
			s.removed = true
		}
		s.mu.Unlock()
		if idle {
			delete(p.sessions, id)
			out = append(out, s)
			p.cfg.Logger.Info("reaping idle sandbox", "session", id)
		}
	}
	return out
}
