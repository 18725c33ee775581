package harness_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
)

// backwardReads wraps a store and counts the reads of a log from its end: a brain reading a tail from the log
// (loadTail) makes them, one taking up a tail it kept (refresh) does not.
type backwardReads struct {
	store.Store
	n atomic.Int64
}

func (s *backwardReads) EventList(ctx context.Context, p *store.EventListParams) ([]apitype.Event, error) {
	if p.Desc {
		s.n.Add(1)
	}
	return s.Store.EventList(ctx, p)
}

// fillTurns appends n earlier talk-only turns to a session's log, every event processed, as a brain writes them.
func (f *fixture) fillTurns(sessionID string, n int, label string) {
	f.t.Helper()
	var evs []apitype.NewEvent
	for i := range n {
		for _, e := range []struct {
			typ     apitype.EventType
			payload any
		}{
			{userMsg, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock(fmt.Sprintf("%s question %d", label, i))}}},
			{running, nil},
			{start, nil},
			{agentMsg, apitype.AgentMessage{Content: []apitype.ContentBlock{apitype.TextBlock(fmt.Sprintf("%s answer %d", label, i))}}},
			{end, apitype.SpanModelRequestEnd{}},
			{idle, apitype.SessionIdle{StopReason: apitype.StopReason{Type: apitype.StopEndTurn}}},
		} {
			ev, err := apitype.MakeEvent(e.typ, e.payload)
			if err != nil {
				f.t.Fatal(err)
			}
			ev.Processed = true
			evs = append(evs, ev)
		}
	}
	if _, err := f.store.EventAppend(context.Background(), &store.EventAppendParams{SessionID: sessionID, Events: evs}); err != nil {
		f.t.Fatal(err)
	}
}

// texts flattens a model request's conversation to "role: text" lines.
func texts(req modeltest.Request) []string {
	var out []string
	for _, m := range req.Messages {
		for _, b := range m.Content {
			out = append(out, m.Role+": "+b.Text)
		}
	}
	return out
}

// TestKeptTail: a brain takes up the tail of a long session it worked last instead of reading the log again, and
// the model sees exactly what a brain reading the log sees: what another writer appended in between, and a
// compaction another brain made (after which the brain reads the log again).
func TestKeptTail(t *testing.T) {
	t.Parallel()
	kept, keptReads := keptTailTurns(t, true)
	read, readReads := keptTailTurns(t, false)
	for i := range kept {
		if !slices.Equal(kept[i], read[i]) {
			t.Errorf("request %d with the kept tail:\n%q\nread from the log:\n%q", i+1, kept[i], read[i])
		}
	}
	// Turn 1 reads the log (nothing is kept yet), turns 2 and 3 take up the kept tail, turn 4 finds another
	// brain's compaction in what follows it and reads the log again.
	for i, want := range []bool{true, false, false, true} {
		if got := keptReads[i] > 0; got != want {
			t.Errorf("turn %d with tails kept: %d reads of the log from its end", i+1, keptReads[i])
		}
		if readReads[i] == 0 {
			t.Errorf("turn %d without tails kept did not read the log from its end", i+1)
		}
	}
	if want := append(slices.Clone(kept[0]), "assistant: reply one", "user: two"); !slices.Equal(kept[1], want) {
		t.Errorf("second request:\n got %q\nwant %q", kept[1], want)
	}
	if want := append(slices.Clone(kept[1]), "assistant: reply two", "user: elsewhere question 0", "assistant: elsewhere answer 0",
		"user: three"); !slices.Equal(kept[2], want) {
		t.Errorf("third request:\n got %q\nwant %q", kept[2], want)
	}
	last := kept[3]
	if !strings.Contains(last[0], "SUMMARY-FROM-ELSEWHERE") || last[len(last)-1] != "user: four" ||
		slices.ContainsFunc(last, func(s string) bool {
			return strings.Contains(s, "old question") || strings.Contains(s, "old answer") || strings.Contains(s, "elsewhere question")
		}) {
		t.Errorf("request after the compaction: %q", last)
	}
}

// keptTailTurns runs four turns of a session whose log holds 60 earlier turns (more than a page of the log), with
// or without tails kept, and returns the texts of the four model requests and how many times each turn read the
// log from its end. Between turns 2 and 3 another writer appends a turn; between turns 3 and 4, a compaction.
func keptTailTurns(t *testing.T, keep bool) (requests [][]string, reads []int64) {
	f := newFixture(t)
	counted := &backwardReads{Store: f.store}
	cfg := f.config()
	cfg.Store = counted
	if !keep {
		cfg.TailCacheBytes = -1
	}
	f.start(cfg)
	id := f.session()
	f.fillTurns(id, 60, "old")
	f.srv.Script(modeltest.Turn{Text: "reply one"}, modeltest.Turn{Text: "reply two"}, modeltest.Turn{Text: "reply three"},
		modeltest.Turn{Text: "reply four"})
	for i, text := range []string{"one", "two", "three", "four"} {
		switch i {
		case 2:
			f.fillTurns(id, 1, "elsewhere")
		case 3:
			evs := f.events(id)
			q := slices.IndexFunc(evs, func(e apitype.Event) bool { return strings.Contains(string(e.Data), "elsewhere question 0") })
			ev, err := apitype.MakeEvent(compacted, apitype.ContextCompacted{Summary: "SUMMARY-FROM-ELSEWHERE", UpToSeq: evs[q].Seq})
			if err != nil {
				t.Fatal(err)
			}
			ev.Processed = true
			if _, err := f.store.EventAppend(context.Background(), &store.EventAppendParams{SessionID: id, Events: []apitype.NewEvent{ev}}); err != nil {
				t.Fatal(err)
			}
		}
		before := counted.n.Load()
		f.say(id, text)
		f.waitIdle(id, 61+i+min(i/2, 1))
		reads = append(reads, counted.n.Load()-before)
	}
	for _, req := range f.srv.Requests() {
		requests = append(requests, texts(req))
	}
	if len(requests) != 4 {
		t.Fatalf("%d model requests, want 4", len(requests))
	}
	return requests, reads
}

// TestKeptTailBound: the kept tails are bounded in bytes; a tail too large for the bound is read from the log.
func TestKeptTailBound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reads := &backwardReads{Store: f.store}
	cfg := f.config()
	cfg.Store, cfg.TailCacheBytes = reads, 4096 // far less than 200 events
	f.start(cfg)
	id := f.session()
	f.fillTurns(id, 60, "old")
	f.srv.Script(modeltest.Turn{Text: "a"}, modeltest.Turn{Text: "b"})
	f.say(id, "one")
	f.waitIdle(id, 61)
	before := reads.n.Load()
	f.say(id, "two")
	f.waitIdle(id, 62)
	if reads.n.Load() == before {
		t.Error("a tail larger than TailCacheBytes was kept")
	}
	if _, err := harness.New(harness.Config{Store: f.store, Model: f.model, TailCacheBytes: -1}); err != nil {
		t.Errorf("TailCacheBytes -1 (keep none): %v", err)
	}
}
