package harness_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
)

// startGate holds a brain's appends of a span.model_request_start in the store until gate says.
type startGate struct {
	store.Store
	gate func(ctx context.Context) error
}

func (s *startGate) EventAppend(ctx context.Context, p *store.EventAppendParams) ([]apitype.Event, error) {
	if slices.ContainsFunc(p.Events, func(e apitype.NewEvent) bool { return e.Type == start }) {
		if err := s.gate(ctx); err != nil {
			return nil, err
		}
	}
	return s.Store.EventAppend(ctx, p)
}

// A model request goes out while its span.model_request_start is appended, not after: the store here commits
// the start only once the model has the request (a brain that waited for the append first would wait
// forever). The log is as before: the answer after its start, closing it.
func TestRequestSentBesideItsStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{Text: "hello"})
	cfg := f.config()
	cfg.Store = &startGate{Store: f.store, gate: func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := f.srv.WaitRequests(ctx, 1); err != nil {
			return fmt.Errorf("the model has no request while its start is appended: %w", err)
		}
		return nil
	}}
	f.start(cfg)
	id := f.session()
	f.say(id, "hi")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, agentMsg, end, usage, idle)
	if span := decode[apitype.SpanModelRequestEnd](t, evs[4]); span.IsError || span.ModelRequestStartID != evs[2].ID {
		t.Errorf("span end %+v, want it to close %s", span, evs[2].ID)
	}
	if evs[0].ProcessedAt == nil {
		t.Error("the message the request picked up is not marked processed")
	}
}

// cancelWatch records whether the context of a model call was cancelled before the call returned.
type cancelWatch struct {
	model.Model
	cancelled atomic.Int32
}

func (m *cancelWatch) Call(ctx context.Context, req *model.Request, onDelta func(model.Delta)) (*model.Response, error) {
	resp, err := m.Model.Call(ctx, req, onDelta)
	if ctx.Err() != nil {
		m.cancelled.Add(1)
	}
	return resp, err
}

// When the start of a request in flight cannot be appended (here: the lease is lost), the request is cancelled
// and nothing of it reaches the log; the session is worked again once the lease is free, and answered once.
func TestRequestCancelledWhenItsStartFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(
		modeltest.Turn{Text: "never appended", Hold: hold},
		modeltest.Turn{Text: "answered"},
	)
	var refused atomic.Bool
	cfg := f.config()
	cfg.LeaseTTL = 500 * time.Millisecond
	cfg.Store = &startGate{Store: f.store, gate: func(ctx context.Context) error {
		if refused.Load() {
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := f.srv.WaitRequests(ctx, 1); err != nil {
			return err
		}
		refused.Store(true)
		return store.ErrLeaseLost
	}}
	watch := &cancelWatch{Model: f.model}
	cfg.Model = watch
	f.start(cfg)
	id := f.session()
	f.say(id, "hi")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, agentMsg, end, usage, idle)
	if msg := decode[apitype.AgentMessage](t, evs[3]); msg.Content[0].Text != "answered" {
		t.Errorf("agent.message = %+v, want the second request's answer", msg)
	}
	if n := len(f.srv.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
	if n := watch.cancelled.Load(); n != 1 {
		t.Errorf("%d model calls cancelled, want 1 (the held one, when its start failed)", n)
	}
}
