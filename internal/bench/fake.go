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
	tr  *http.Transport // the model adapter's
	mu  sync.Mutex
	got map[string]fakemodel.Timing
	new chan struct{} // closed and replaced on each timing
	// calls are the answered requests of the multi-agent workload (first user message with a task marker).
	calls []modelCall
	// sizes are the body sizes of the history section's requests (historyMark), by marker.
	sizes map[string]int
}

// modelCall is one request of the multi-agent workload that the fake model answered.
type modelCall struct {
	// Task is the text of the request's first user message (a session's first message, or a thread's task);
	// Messages is how many messages the request had (1 for the first request of a session or thread).
	Task     string
	Messages int
	// Received and Done are when the fake model received the request and finished answering it.
	Received, Done time.Time
}

// startFake starts a fake model server of the run's per-token latency and jitter and this time to first
// token, and the model adapter (Config.Model) pointed at it.
func (b *benchRun) startFake(ttft time.Duration) (*fakeModel, error) {
	m := &fakeModel{got: map[string]fakemodel.Timing{}, new: make(chan struct{}), sizes: map[string]int{}}
	srv, err := fakemodel.Start(fakemodel.WithLatency(ttft, b.cfg.ModelPerToken, b.cfg.ModelJitter), fakemodel.WithObserver(m.observe))
	if err != nil {
		return nil, err
	}
	m.srv = srv
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 4096, 4096
	m.tr, m.mdl = tr, b.cfg.Model(srv.URL, &http.Client{Transport: tr})
	return m, nil
}

func (m *fakeModel) url() string { return m.srv.URL }
func (m *fakeModel) close()      { m.srv.Close() }

// forget drops the fake's record of requests.
func (m *fakeModel) forget() { m.srv.DropRequests() }

// closeIdle closes the model adapter's idle connections to the fake, and so the fake's ends of them.
func (m *fakeModel) closeIdle() { m.tr.CloseIdleConnections() }

func (m *fakeModel) observe(t fakemodel.Timing) {
	if task := firstUserText(t.Request); strings.Contains(task, taskMark) {
		m.mu.Lock()
		m.calls = append(m.calls, modelCall{Task: task, Messages: len(t.Request.Messages), Received: t.Received, Done: t.Done})
		m.mu.Unlock()
		return
	}
	marker := t.Request.LastUserText()
	if !strings.HasPrefix(marker, "bench ") {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.got[marker]; !ok {
		if strings.HasPrefix(marker, historyMark) {
			m.sizes[marker] = len(t.Request.Body)
		}
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

// requestBytes takes the body size of the history section's request whose last user text is marker (0 if none
// arrived).
func (m *fakeModel) requestBytes(marker string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.sizes[marker]
	delete(m.sizes, marker)
	return n
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

// taskMark begins the markers of the multi-agent workload's sessions and tasks ("<ma ...>"), and of the memory
// workload's sessions ("<ma mem ...>"): the fake model keeps their calls.
const taskMark = "<ma "

// firstUserText is the text of the request's first user message.
func firstUserText(r *fakemodel.Request) string {
	for _, msg := range r.Messages {
		if msg.Role != "user" {
			continue
		}
		var sb strings.Builder
		for _, b := range msg.Content {
			sb.WriteString(b.Text)
		}
		return sb.String()
	}
	return ""
}

// toolCall is one tool call of a scripted answer: the tool's name and its JSON input.
type toolCall struct{ name, input string }

// scriptCalls makes the answer to the request that has messages messages, of the session or thread whose first
// user message contains marker, the tool calls.
func (m *fakeModel) scriptCalls(marker string, messages int, calls ...toolCall) {
	turn := fakemodel.Turn{Match: func(r *fakemodel.Request) bool {
		return len(r.Messages) == messages && strings.Contains(firstUserText(r), marker)
	}}
	for _, c := range calls {
		turn.ToolUses = append(turn.ToolUses, fakemodel.ToolUse{Name: c.name, Input: c.input})
	}
	m.srv.Script(turn)
}

// takeCalls waits (until ctx is done) for the multi-agent workload's calls answered so far to satisfy complete,
// then returns them and forgets them and every request.
func (m *fakeModel) takeCalls(ctx context.Context, complete func([]modelCall) bool) ([]modelCall, error) {
	for {
		m.mu.Lock()
		if complete(m.calls) {
			out := m.calls
			m.calls = nil
			m.mu.Unlock()
			m.srv.DropRequests()
			return out, nil
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the fake model did not answer every call of the workload: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
