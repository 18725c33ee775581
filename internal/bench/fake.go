package bench

// This file is the benchmark's only use of the fake model API server.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/fakemodel"
)

// fakeModel is the scripted model server with per-marker timings, and the model adapter pointed at it.
type fakeModel struct {
	srv *fakemodel.Server
	mdl model.Model
	mu  sync.Mutex
	got map[string]fakemodel.Timing
	new chan struct{} // closed and replaced on each timing
}

// startFake starts a fake model server of the run's per-token latency and jitter and this time to first
// token, and the model adapter (Config.Model) pointed at it.
func (b *benchRun) startFake(ttft time.Duration) (*fakeModel, error) {
	m := &fakeModel{got: map[string]fakemodel.Timing{}, new: make(chan struct{})}
	srv, err := fakemodel.Start(fakemodel.WithLatency(ttft, b.cfg.ModelPerToken, b.cfg.ModelJitter), fakemodel.WithObserver(m.observe))
	if err != nil {
		return nil, err
	}
	m.srv = srv
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 4096, 4096
	m.mdl = b.cfg.Model(srv.URL, &http.Client{Transport: tr})
	return m, nil
}

func (m *fakeModel) url() string { return m.srv.URL }
func (m *fakeModel) close()      { m.srv.Close() }

// forget drops the fake's record of requests.
func (m *fakeModel) forget() { m.srv.DropRequests() }

func (m *fakeModel) observe(t fakemodel.Timing) {
	marker := t.Request.LastUserText()
	if !strings.HasPrefix(marker, "bench ") {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.got[marker]; !ok {
		t.Request = nil
		m.got[marker] = t
		close(m.new)
		m.new = make(chan struct{})
	}
}

func (m *fakeModel) ScriptTool(marker, command string) {
	m.srv.Script(fakemodel.Turn{
		ToolUses: []fakemodel.ToolUse{{Name: "bash", Input: fmt.Sprintf(`{"command":%q}`, command)}},
		Match:    func(r *fakemodel.Request) bool { return r.LastUserText() == marker },
	})
}

// scriptHeld makes the answer to the request whose last user text is marker wait until hold is closed.
func (m *fakeModel) scriptHeld(marker string, hold <-chan struct{}) {
	m.srv.Script(fakemodel.Turn{Text: "held", Hold: hold, Match: func(r *fakemodel.Request) bool { return r.LastUserText() == marker }})
}

func (m *fakeModel) ModelTime(ctx context.Context, marker string) (received, done time.Time, err error) {
	for {
		m.mu.Lock()
		t, ok := m.got[marker]
		ch := m.new
		if ok {
			delete(m.got, marker)
		}
		m.mu.Unlock()
		if ok {
			return t.Received, t.Done, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Time{}, time.Time{}, fmt.Errorf("the fake model never answered %q", marker)
		}
	}
}

// waitRequest waits until the fake model received a request whose last user text is marker.
func (m *fakeModel) waitRequest(ctx context.Context, marker string) error {
	seen := 0
	for {
		reqs := m.srv.Requests()
		for _, r := range reqs[seen:] {
			if r.LastUserText() == marker {
				return nil
			}
		}
		seen = len(reqs)
		select {
		case <-ctx.Done():
			return fmt.Errorf("the model call of the failover session never arrived: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
