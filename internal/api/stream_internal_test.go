package api

import (
	"testing"
)

// A stream's pages follow the sizes of the events: full pages of small events grow the page to streamBatch,
// a page over streamPageBytes shrinks the next to what fits, and a page never asks for fewer than one event.
func TestStreamPagerSizesPagesByBytes(t *testing.T) {
	t.Parallel()
	p := &streamPager{limit: streamFirstPage}
	for range 20 {
		p.read(p.limit, (p.limit)*(100))
	}
	if p.limit != streamBatch {
		t.Fatalf("after full pages of small events the page is %d events, want %d", p.limit, streamBatch)
	}
	p.read(p.limit/2, (p.limit/2)*(100)) // a short page: the end of the log, no reason to change
	if p.limit != streamBatch {
		t.Fatalf("after a short page the page is %d events, want %d", p.limit, streamBatch)
	}
	p.read(p.limit, (p.limit)*(10<<10)) // 500 x 10 KiB: 5 MiB read, over the budget
	if got := p.limit * (10<<10 + streamEventOverhead); got > streamPageBytes {
		t.Fatalf("after a page of 10 KiB events the next page asks for %d events (%d bytes), want at most %d bytes",
			p.limit, got, streamPageBytes)
	}
	for range 5 {
		p.read(p.limit, (p.limit)*(8<<20)) // events larger than the budget on their own
	}
	if p.limit != 1 {
		t.Fatalf("after pages of 8 MiB events the page is %d events, want 1", p.limit)
	}
	for range 20 {
		p.read(p.limit, (p.limit)*(100))
	}
	if p.limit != streamBatch {
		t.Fatalf("back to small events the page is %d events, want %d again", p.limit, streamBatch)
	}
}

// A stream slot is given back once, however often its release is called.
func TestStreamSlotsReleaseOnce(t *testing.T) {
	t.Parallel()
	l := newStreamSlots(2, 2)
	release, err := l.acquire("k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire("k"); err != nil {
		t.Fatal(err)
	}
	release()
	release()
	if n := l.open(); n != 1 {
		t.Fatalf("%d streams open after releasing one of two twice, want 1", n)
	}
	if _, err := l.acquire("other"); err != nil {
		t.Fatalf("a freed slot was not reusable: %v", err)
	}
	if _, err := l.acquire("other"); err == nil {
		t.Fatal("a third stream was admitted on a server capped at two")
	}
}
