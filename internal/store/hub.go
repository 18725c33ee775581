package store

import "sync"

// Hub delivers in-process wake-ups: per-session "new events" signals and a global "a session may be runnable"
// signal. Adapters use it for appends made through their own Store value; the postgres adapter also feeds it
// from LISTEN/NOTIFY so that appends in other processes wake local readers. Signals are coalesced: a
// subscriber's channel holds at most one pending value, and readers re-read from their own position.
//
// It also fans out stream previews (PublishPreview, SubscribePreviews): those are not coalesced but buffered,
// and dropped for a subscriber whose buffer is full.
type Hub struct {
	mu       sync.Mutex
	sessions map[string]*sessionSubs
	runnable map[chan struct{}]struct{}
	previews map[string]map[chan []byte]struct{}
}

// PreviewBuffer is how many previews a subscriber's channel holds before new ones are dropped.
const PreviewBuffer = 256

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{
		sessions: map[string]*sessionSubs{},
		runnable: map[chan struct{}]struct{}{},
		previews: map[string]map[chan []byte]struct{}{},
	}
}

// SubscribePreviews returns a channel that receives the previews PublishPreview delivers for the session, and a
// function that ends the subscription. Receivers must not modify the payloads: subscribers share them.
func (h *Hub) SubscribePreviews(sessionID string) (<-chan []byte, func()) {
	ch := make(chan []byte, PreviewBuffer)
	h.mu.Lock()
	subs := h.previews[sessionID]
	if subs == nil {
		subs = map[chan []byte]struct{}{}
		h.previews[sessionID] = subs
	}
	subs[ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if subs := h.previews[sessionID]; subs != nil {
				delete(subs, ch)
				if len(subs) == 0 {
					delete(h.previews, sessionID)
				}
			}
		})
	}
}

// HasPreviewSubscribers reports whether the session has preview subscribers in this hub.
func (h *Hub) HasPreviewSubscribers(sessionID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.previews[sessionID]) > 0
}

// PublishPreview hands a copy of payload to every preview subscriber of the session without blocking: a
// subscriber whose buffer is full misses it.
func (h *Hub) PublishPreview(sessionID string, payload []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	subs := h.previews[sessionID]
	if len(subs) == 0 {
		return
	}
	p := append([]byte(nil), payload...)
	for ch := range subs {
		select {
		case ch <- p:
		default:
		}
	}
}

// sessionSubs are a session's subscribers and the count of its wake-ups while it has any.
type sessionSubs struct {
	chans map[chan struct{}]struct{}
	wakes uint64
}

// Subscribe returns a channel woken by NotifySession(sessionID), and a function that ends the subscription.
func (h *Hub) Subscribe(sessionID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	subs := h.sessions[sessionID]
	if subs == nil {
		subs = &sessionSubs{chans: map[chan struct{}]struct{}{}}
		h.sessions[sessionID] = subs
	}
	subs.chans[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if subs := h.sessions[sessionID]; subs != nil {
			delete(subs.chans, ch)
			if len(subs.chans) == 0 {
				delete(h.sessions, sessionID)
			}
		}
	}
}

// NotifySession wakes every subscriber of the session.
func (h *Hub) NotifySession(sessionID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if subs := h.sessions[sessionID]; subs != nil {
		subs.wakes++
		for ch := range subs.chans {
			signal(ch)
		}
	}
}

// Wakes counts the session's wake-ups since it last had no subscriber (0 without one). A subscriber that reads
// the log after Wakes returned n sees every event whose wake-up it counted: NotifySession follows the commit.
func (h *Hub) Wakes(sessionID string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if subs := h.sessions[sessionID]; subs != nil {
		return subs.wakes
	}
	return 0
}

// WaitRunnable returns a channel woken by NotifyRunnable, and a function that ends the subscription.
func (h *Hub) WaitRunnable() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.runnable[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.runnable, ch)
		h.mu.Unlock()
	}
}

// NotifyRunnable wakes every runnable waiter.
func (h *Hub) NotifyRunnable() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.runnable {
		signal(ch)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
