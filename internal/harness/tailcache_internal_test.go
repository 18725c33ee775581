package harness

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// longTail is a tail of n final events, each with data of size bytes.
func longTail(n, size int) *tail {
	at := time.Now()
	tl := &tail{}
	for i := range n {
		tl.events = append(tl.events, apitype.Event{ID: "sevt_x", Type: apitype.EventAgentMessage, Seq: int64(i + 1), ProcessedAt: &at,
			Data: make([]byte, size)})
	}
	tl.lastSeq = int64(n)
	return tl
}

func TestTailCacheKeeps(t *testing.T) {
	a := tailKey{"sesn_a", ""}

	c := newTailCache(1 << 20)
	short := longTail(eventPage, 10)
	c.keep(a, short)
	if c.take(a) != nil {
		t.Error("a tail of one page was kept")
	}
	pendingTail := longTail(eventPage+1, 10)
	pendingTail.events[3].ProcessedAt = nil
	c.keep(a, pendingTail)
	if c.take(a) != nil {
		t.Error("a tail with an event not yet processed was kept")
	}
	c.keep(a, longTail(eventPage+1, 10))
	if n, size := c.len(); n != 1 || size <= 0 {
		t.Errorf("after one keep: %d tails, %d bytes", n, size)
	}
	if c.take(a) == nil || c.take(a) != nil {
		t.Error("a kept tail is taken once")
	}
	if n, size := c.len(); n != 0 || size != 0 {
		t.Errorf("after the take: %d tails, %d bytes", n, size)
	}

	none := newTailCache(-1)
	none.keep(a, longTail(eventPage+1, 10))
	if none.take(a) != nil {
		t.Error("a cache bounded at -1 kept a tail")
	}
}

func TestTailCacheBound(t *testing.T) {
	one := tailSize(longTail(eventPage+1, 1000))
	c := newTailCache(2*one + one/2) // room for two
	keys := []tailKey{{"sesn_1", ""}, {"sesn_2", ""}, {"sesn_3", ""}}
	for _, k := range keys {
		c.keep(k, longTail(eventPage+1, 1000))
	}
	if n, size := c.len(); n != 2 || size != 2*one {
		t.Errorf("%d tails, %d bytes; want 2, %d", n, size, 2*one)
	}
	if c.take(keys[0]) != nil {
		t.Error("the least recently kept tail was not the one dropped")
	}
	if c.take(keys[1]) == nil || c.take(keys[2]) == nil {
		t.Error("a recent tail was dropped")
	}
	// Keeping a key again replaces its tail and counts its size once.
	c.keep(keys[0], longTail(eventPage+1, 1000))
	c.keep(keys[0], longTail(eventPage+1, 1000))
	if n, size := c.len(); n != 1 || size != one {
		t.Errorf("a key kept twice: %d tails, %d bytes", n, size)
	}
	// A tail larger than the whole bound is not kept, and drops nothing.
	c.keep(keys[1], longTail(3*eventPage, 1000))
	if n, _ := c.len(); n != 1 || c.take(keys[1]) != nil {
		t.Error("a tail larger than the bound was kept")
	}
}

func TestTailCacheSkipsCarriedURLs(t *testing.T) {
	c := newTailCache(1 << 20)
	k := tailKey{"sesn_a", ""}
	tl := longTail(eventPage+1, 10)
	tl.carriedURLs = []sourceURL{{url: "https://example.com/"}}
	c.keep(k, tl)
	if c.take(k) != nil {
		t.Error("a tail carrying URLs a compaction replaced was kept (a tail read from the log has none)")
	}
	var none *tailCache
	none.keep(k, longTail(eventPage+1, 10))
	if none.take(k) != nil {
		t.Error("a nil cache gave a tail")
	}
}

// TestCompactedTailIsReadTail: the tail a run cuts with its own compaction (compactTo) is the tail a brain reads
// from the log afterwards, the status before it included: what a kept tail relies on. The compaction falls in
// the middle of a turn, so the turn's running status is before the tail and its idle after.
func TestCompactedTailIsReadTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, _ := storeWithSession(t, "first question")
	cfg := Config{Store: st}
	cfg.setDefaults()
	b := &Brain{cfg: cfg, tails: newTailCache(-1)}
	appendEvents := func(evs ...apitype.NewEvent) []apitype.Event {
		t.Helper()
		for i := range evs {
			evs[i].Processed = true
		}
		out, err := st.EventAppend(ctx, &store.EventAppendParams{SessionID: sess.ID, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	text := func(s string) []apitype.ContentBlock { return []apitype.ContentBlock{apitype.TextBlock(s)} }
	appendEvents(mustEvent(apitype.EventSessionStatusRunning, nil), mustEvent(apitype.EventAgentMessage, apitype.AgentMessage{Content: text("first answer")}),
		mustEvent(apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}}),
		mustEvent(apitype.EventUserMessage, apitype.UserMessage{Content: text("second question")}), mustEvent(apitype.EventSessionStatusRunning, nil))
	mid := appendEvents(mustEvent(apitype.EventAgentMessage, apitype.AgentMessage{Content: text("second answer, part one")}))

	// The run: its tail read mid-turn, then its compaction appended and cut, then the turn's end.
	cut := &thread{run: &run{b: b, ctx: ctx, sess: sess}}
	if err := cut.loadTail(); err != nil {
		t.Fatal(err)
	}
	compaction := mustEvent(apitype.EventAgentContextCompacted, apitype.ContextCompacted{Summary: "S", UpToSeq: mid[0].Seq})
	cut.tail.events = append(cut.tail.events, appendEvents(compaction)...)
	cut.tail.lastSeq = cut.tail.events[len(cut.tail.events)-1].Seq
	cut.tail.compactTo("S", mid[0].Seq)
	appendEvents(mustEvent(apitype.EventAgentMessage, apitype.AgentMessage{Content: text("second answer, part two")}),
		mustEvent(apitype.EventSessionStatusIdle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}}))
	if err := cut.refresh(); err != nil {
		t.Fatal(err)
	}

	read := &thread{run: &run{b: b, ctx: ctx, sess: sess}}
	if err := read.loadTail(); err != nil {
		t.Fatal(err)
	}
	seqs := func(tl *tail) []int64 {
		var out []int64
		for _, e := range tl.events {
			out = append(out, e.Seq)
		}
		return out
	}
	c, r := cut.tail, read.tail
	if !slices.Equal(seqs(c), seqs(r)) || c.summary != r.summary || c.upToSeq != r.upToSeq || c.lastSeq != r.lastSeq {
		t.Errorf("cut tail %v (summary %q up to %d, last %d); read tail %v (summary %q up to %d, last %d)",
			seqs(c), c.summary, c.upToSeq, c.lastSeq, seqs(r), r.summary, r.upToSeq, r.lastSeq)
	}
	if c.priorStatus != apitype.EventSessionStatusRunning || r.priorStatus != c.priorStatus {
		t.Errorf("the status before the tail: cut %q, read %q; want %q", c.priorStatus, r.priorStatus, apitype.EventSessionStatusRunning)
	}
}
