package harness

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/store"
)

// TestPreviewerIDs: text blocks in a row share a message with dense indices; any other block (streamed or
// not: a gap in the indices) starts a new message; empty text blocks take no index; a thinking block gets its
// own id. The deltas are published in order and coalesced.
func TestPreviewerIDs(t *testing.T) {
	var mu sync.Mutex
	var got []apitype.Preview
	first := make(chan struct{}, 1)
	p := newPreviewer(context.Background(), time.Hour, closed(), func(_ context.Context, b []byte) error {
		var pv apitype.Preview
		if err := json.Unmarshal(b, &pv); err != nil {
			t.Error(err)
		}
		mu.Lock()
		got = append(got, pv)
		mu.Unlock()
		select {
		case first <- struct{}{}:
		default:
		}
		return nil
	}, nil)
	// The first block's start is published at once; the publisher then waits out its interval (an hour), so
	// everything after it is pending together until finish, whatever the goroutines' timing.
	p.onDelta(model.Delta{Index: 0, Type: model.BlockThinking, Started: true})
	<-first
	deltas := []model.Delta{
		{Index: 0, Type: model.BlockThinking, Text: "hmm"},
		{Index: 1, Type: model.BlockText, Started: true},
		{Index: 1, Type: model.BlockText, Text: "a"},
		{Index: 1, Type: model.BlockText, Text: "b"},
		{Index: 2, Type: model.BlockText, Started: true}, // empty: takes no index
		{Index: 3, Type: model.BlockText, Started: true},
		{Index: 3, Type: model.BlockText, Text: "c"},
		// 4: a tool_use, which does not stream
		{Index: 5, Type: model.BlockText, Started: true},
		{Index: 5, Type: model.BlockText, Text: "d"},
	}
	for _, d := range deltas {
		p.onDelta(d)
	}
	ids := p.finish(true)
	if ids[0] == "" || ids[1] == "" || ids[0] == ids[1] || ids[3] != ids[1] || ids[5] == "" || ids[5] == ids[1] {
		t.Fatalf("ids %v", ids)
	}
	if _, ok := ids[2]; ok {
		t.Errorf("the empty text block has id %s", ids[2])
	}
	var frames []string
	for _, pv := range got {
		if pv.Type == apitype.EventStart {
			frames = append(frames, "start "+string(pv.Event.Type)+" "+pv.Event.ID)
		} else {
			frames = append(frames, "delta "+pv.EventID+" "+string(rune('0'+pv.Delta.Index))+" "+pv.Delta.Content.Text)
		}
	}
	want := []string{
		"start agent.thinking " + ids[0],
		"start agent.message " + ids[1],
		"delta " + ids[1] + " 0 ab",
		"delta " + ids[1] + " 1 c",
		"start agent.message " + ids[5],
		"delta " + ids[5] + " 0 d",
	}
	if strings.Join(frames, "\n") != strings.Join(want, "\n") {
		t.Errorf("previews:\n%s\nwant:\n%s", strings.Join(frames, "\n"), strings.Join(want, "\n"))
	}

	// An unfinished answer publishes nothing more: what is pending is dropped, and later deltas are ignored.
	published := make(chan string, 10)
	p = newPreviewer(context.Background(), time.Hour, closed(), func(_ context.Context, b []byte) error {
		published <- string(b)
		return nil
	}, nil)
	p.onDelta(model.Delta{Index: 0, Type: model.BlockText, Text: "first"})
	<-published // the start
	<-published // the delta; the publisher now waits out its interval
	p.onDelta(model.Delta{Index: 0, Type: model.BlockText, Text: "pending"})
	p.finish(false)
	p.onDelta(model.Delta{Index: 0, Type: model.BlockText, Text: "late"})
	p.finish(true)
	if len(published) != 0 {
		t.Errorf("published %s after an unfinished answer", <-published)
	}
}

// TestEncodePreviewSplits: a delta too big for one payload goes as several with the same index, split between
// characters.
func TestEncodePreviewSplits(t *testing.T) {
	text := strings.Repeat("héllo <wörld> \"quoted\" ", 2000)
	payloads := encodePreview(apitype.PreviewTextDelta("sevt_x", 2, text))
	if len(payloads) < 2 {
		t.Fatalf("%d payloads", len(payloads))
	}
	var sb strings.Builder
	for _, b := range payloads {
		if len(b) > store.PreviewMaxBytes {
			t.Fatalf("payload of %d bytes", len(b))
		}
		var pv apitype.Preview
		if err := json.Unmarshal(b, &pv); err != nil || pv.Delta.Index != 2 || pv.EventID != "sevt_x" {
			t.Fatalf("payload %s: %v", b[:100], err)
		}
		sb.WriteString(pv.Delta.Content.Text)
	}
	if sb.String() != text {
		t.Error("split deltas do not add up to the text")
	}
}

// closed is a ready channel already closed: the request's start is in the log.
func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestPreviewerWaitsForReady: nothing is published before ready is closed (the request's start, which goes out
// beside the request, is in the log); what was recorded meanwhile is published once it is, in order. A previewer
// finished unfinished before then publishes nothing.
func TestPreviewerWaitsForReady(t *testing.T) {
	published := make(chan apitype.Preview, 10)
	publish := func(_ context.Context, b []byte) error {
		var pv apitype.Preview
		if err := json.Unmarshal(b, &pv); err != nil {
			t.Error(err)
		}
		published <- pv
		return nil
	}
	ready := make(chan struct{})
	p := newPreviewer(context.Background(), time.Millisecond, ready, publish, nil)
	p.onDelta(model.Delta{Index: 0, Type: model.BlockText, Text: "before the start is durable"})
	select {
	case pv := <-published:
		t.Fatalf("published %+v before ready", pv)
	case <-time.After(50 * time.Millisecond):
	}
	close(ready)
	if pv := <-published; pv.Type != apitype.EventStart {
		t.Errorf("first preview after ready %+v, want the message's start", pv)
	}
	if pv := <-published; pv.Type != apitype.EventDelta || pv.Delta.Content.Text != "before the start is durable" {
		t.Errorf("second preview after ready %+v, want the delta recorded before", pv)
	}
	p.finish(true)

	never := newPreviewer(context.Background(), time.Millisecond, make(chan struct{}), publish, nil)
	never.onDelta(model.Delta{Index: 0, Type: model.BlockText, Text: "the start failed"})
	never.finish(false)
	if len(published) != 0 {
		t.Errorf("a previewer whose start never became durable published %d previews", len(published))
	}
}
