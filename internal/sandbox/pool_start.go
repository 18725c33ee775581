package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// start admits the sandbox with the pool's Quota, if any (the admission ends with the sandbox), and starts it.
func (p *Pool) start(ctx context.Context, r *Recipe, host *HostDirs, caps Capabilities) (Sandbox, error) {
	if p.cfg.Quota == nil {
		return p.startAdmitted(ctx, r, host, caps)
	}
	done, err := p.cfg.Quota.Admit(ctx, r.SessionID)
	if err != nil {
		return nil, err
	}
	sb, err := p.startAdmitted(ctx, r, host, caps)
	if err != nil {
		done()
		return nil, err
	}
	return &admittedSandbox{Sandbox: sb, done: sync.OnceFunc(done)}, nil
}

// startAdmitted builds the sandbox's egress, acquires its image as a host directory (host.RootFS) if the
// Provider takes one (RootFSHostDir, or RootFSNone, which refuses it), or its reference (host.Image) if the
// Provider pulls it (RootFSImageRef) and the Images are ImageRefs, and provisions the sandbox. A directory is
// released with the sandbox.
func (p *Pool) startAdmitted(ctx context.Context, r *Recipe, host *HostDirs, caps Capabilities) (Sandbox, error) {
	var err error
	if p.cfg.Egress != nil {
		if r.Egress, err = p.cfg.Egress.Egress(ctx, r); err != nil {
			return nil, fmt.Errorf("egress: %w", err)
		}
	}
	var release func()
	if refs, ok := p.cfg.Images.(ImageRefs); ok && caps.RootFS == RootFSImageRef {
		if host.Image, err = refs.Ref(ctx, &r.Environment); err != nil {
			return nil, err
		}
	} else if p.cfg.Images != nil && caps.RootFS != RootFSImageRef {
		if host.RootFS, release, err = p.cfg.Images.Acquire(ctx, &r.Environment); err != nil {
			return nil, err
		}
	}
	sb, err := p.provisionInTurn(ctx, r, host)
	switch {
	case release != nil && err != nil:
		release()
	case release != nil:
		sb = &imageSandbox{Sandbox: sb, release: sync.OnceFunc(release)}
	}
	return sb, err
}

// StartTurn is how long a start counts against PoolConfig.MaxStarting: a start still running then goes on
// uncounted.
const StartTurn = 5 * time.Second

// provisionInTurn has the Provider provision the sandbox once fewer than MaxStarting others are starting (those
// started within startTurn).
func (p *Pool) provisionInTurn(ctx context.Context, r *Recipe, host *HostDirs) (Sandbox, error) {
	if p.starting != nil {
		select {
		case p.starting <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for its turn to start (%d sandboxes start at once): %w", cap(p.starting), context.Cause(ctx))
		}
		// The token goes back once: by the timer, or here if the timer had not fired.
		t := time.AfterFunc(p.startTurn, func() { <-p.starting })
		defer func() {
			if t.Stop() {
				<-p.starting
			}
		}()
	}
	return p.cfg.Provider.Provision(ctx, r, *host)
}
