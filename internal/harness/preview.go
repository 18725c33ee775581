package harness

import (
	"context"
	"encoding/json"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/store"
)

// previewPublishTimeout bounds one preview publication: previews are best effort, and a slow store must not
// hold the answer back for long.
const previewPublishTimeout = 2 * time.Second

// previewer publishes the stream previews of one model answer while it streams: an event_start for each
// thinking block and for each agent.message the answer will append (a run of text blocks, as appendResponse
// groups them), and event_deltas with the text. It names those events before they exist; appendResponse
// appends them under the same ids (ids). Deltas are coalesced: the store sees at most one publication round per
// interval.
//
// onDelta runs on the model call's goroutine and only records; a goroutine of the previewer publishes, once
// ready is closed: the request's span.model_request_start, which goes out beside the request, is in the log
// (a client must not see an answer of a request the log does not show, nor append before its start). finish
// stops it: after a complete answer it publishes what is left first, so every preview precedes the append of
// the answer; after a failed or interrupted one it publishes nothing more.
type previewer struct {
	publish  func(ctx context.Context, payload []byte) error
	ctx      context.Context
	interval time.Duration
	onError  func(error)
	ready    <-chan struct{}

	mu      sync.Mutex
	pending []apitype.Preview
	// ids maps the answer's content block indices to the ids of their events: a thinking block's
	// agent.thinking, a text block's agent.message (shared by the blocks of one run of text).
	ids map[int]string
	// The block that started last; a text block right after a text block continues its message.
	lastIndex int
	lastType  string
	started   map[int]bool
	// The current text run: its message id (set by its first text), how many content elements it has, and
	// the content index of each of its blocks that has text.
	msgID    string
	msgLen   int
	position map[int]int

	kick chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func newPreviewer(ctx context.Context, interval time.Duration, ready <-chan struct{}, publish func(context.Context, []byte) error,
	onError func(error)) *previewer {
	p := &previewer{
		publish: publish, ctx: ctx, interval: interval, onError: onError, ready: ready,
		ids: map[int]string{}, started: map[int]bool{}, position: map[int]int{}, lastIndex: -2,
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	p.wg.Go(p.run)
	return p
}

// onDelta records a streamed fragment.
func (p *previewer) onDelta(d model.Delta) {
	if d.Type != model.BlockText && d.Type != model.BlockThinking {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started[d.Index] {
		p.startBlock(d.Index, d.Type)
	}
	if d.Type != model.BlockText || d.Text == "" {
		return
	}
	if p.msgID == "" {
		p.msgID = apitype.NewID(apitype.PrefixEvent)
		p.add(apitype.PreviewStartOf(apitype.EventAgentMessage, p.msgID))
	}
	pos, ok := p.position[d.Index]
	if !ok {
		pos = p.msgLen
		p.msgLen++
		p.position[d.Index] = pos
		p.ids[d.Index] = p.msgID
	}
	if n := len(p.pending); n > 0 {
		if last := &p.pending[n-1]; last.Type == apitype.EventDelta && last.EventID == p.msgID && last.Delta.Index == pos {
			last.Delta.Content.Text += d.Text
			return
		}
	}
	p.add(apitype.PreviewTextDelta(p.msgID, pos, d.Text))
}

// startBlock records the start of a content block. A text block that does not directly follow a text block
// begins a new message (appendResponse ends a message at any other block, even one that does not stream).
func (p *previewer) startBlock(index int, typ string) {
	p.started[index] = true
	if typ == model.BlockThinking {
		id := apitype.NewID(apitype.PrefixEvent)
		p.ids[index] = id
		p.add(apitype.PreviewStartOf(apitype.EventAgentThinking, id))
	} else if p.lastType != model.BlockText || index != p.lastIndex+1 {
		p.msgID, p.msgLen = "", 0
	}
	p.lastIndex, p.lastType = index, typ
}

// add queues a preview and wakes the publisher. Callers hold mu.
func (p *previewer) add(pv apitype.Preview) {
	p.pending = append(p.pending, pv)
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run publishes what is pending whenever there is some, at most once per interval, from when ready is closed.
func (p *previewer) run() {
	select {
	case <-p.ready:
	case <-p.stop:
		return
	}
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		}
		p.flush()
		t := time.NewTimer(p.interval)
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// flush publishes the pending previews in order.
func (p *previewer) flush() {
	p.mu.Lock()
	batch := p.pending
	p.pending = nil
	p.mu.Unlock()
	for _, pv := range batch {
		for _, payload := range encodePreview(pv) {
			if p.ctx.Err() != nil {
				return
			}
			ctx, cancel := context.WithTimeout(p.ctx, previewPublishTimeout)
			err := p.publish(ctx, payload)
			cancel()
			if err != nil && p.onError != nil {
				p.onError(err)
			}
		}
	}
}

// finish stops the previewer and returns the ids it gave the answer's events, by content block index. With
// complete set it first publishes what is pending; otherwise it drops it. It is idempotent.
func (p *previewer) finish(complete bool) map[int]string {
	if p == nil {
		return nil
	}
	p.once.Do(func() {
		close(p.stop)
		p.wg.Wait()
		if complete {
			p.flush()
		}
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids
}

// encodePreview encodes a preview as one payload, or, for a text delta too big for one, as several deltas
// with the same index, each within store.PreviewMaxBytes.
func encodePreview(pv apitype.Preview) [][]byte {
	b, err := json.Marshal(pv)
	if err != nil {
		return nil
	}
	if len(b) <= store.PreviewMaxBytes {
		return [][]byte{b}
	}
	if pv.Type != apitype.EventDelta || pv.Delta == nil {
		return nil
	}
	text := pv.Delta.Content.Text
	cut := len(text) / 2
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	if cut == 0 {
		return nil
	}
	first, second := pv, pv
	first.Delta, second.Delta = new(*pv.Delta), new(*pv.Delta)
	first.Delta.Content.Text, second.Delta.Content.Text = text[:cut], text[cut:]
	return append(encodePreview(first), encodePreview(second)...)
}

// newPreviewer starts the previewer of one model call of the session. It publishes under the run's context,
// not the call's: the call's ends with the answer, before the last previews are published. It publishes once
// ready is closed.
func (r *run) newPreviewer(ready <-chan struct{}) *previewer {
	sessionID := r.sess.ID
	failed := false
	return newPreviewer(r.ctx, r.b.cfg.PreviewInterval, ready,
		func(ctx context.Context, payload []byte) error {
			return r.b.cfg.Store.PreviewPublish(ctx, sessionID, payload)
		},
		func(err error) {
			if !failed { // once per call: previews are best effort
				failed = true
				r.b.cfg.Logger.Debug("publishing a stream preview failed", "session", sessionID, "err", err)
			}
		})
}
