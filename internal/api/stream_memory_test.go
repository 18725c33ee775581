package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// heapInuse returns runtime.MemStats.HeapInuse after a collection: what the process holds live.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// appendLog appends n agent.message events of size bytes of text each, and returns them.
func appendLog(t *testing.T, ctx context.Context, st store.Store, sessionID string, n, size int) []apitype.Event {
	t.Helper()
	var out []apitype.Event
	for i := 0; i < n; {
		var batch []apitype.NewEvent
		for ; i < n && len(batch) < 10; i++ {
			ev, err := apitype.MakeEvent(apitype.EventAgentMessage,
				agentMessage(fmt.Sprintf("%06d %s", i, strings.Repeat("x", size))))
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, ev)
		}
		evs, err := st.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID, Events: batch})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		out = append(out, evs...)
	}
	return out
}

// openDeafStream sends a stream request with Last-Event-ID: 0 (replay the whole log) on a raw connection, and
// reads nothing.
func openDeafStream(t *testing.T, srvURL, sessionID, key string) net.Conn {
	t.Helper()
	u, err := url.Parse(srvURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := fmt.Fprintf(c, "GET /v1/sessions/%s/events/stream HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Accept: text/event-stream\r\nLast-Event-ID: 0\r\n\r\n", sessionID, u.Host, key); err != nil {
		t.Fatal(err)
	}
	return c
}

// settledHeap samples heapInuse until it stops moving (or a few seconds pass) and returns the largest sample.
func settledHeap() uint64 {
	var peak uint64
	var last []uint64
	for range 40 {
		time.Sleep(150 * time.Millisecond)
		h := heapInuse()
		peak = max(peak, h)
		last = append(last, h)
		if n := len(last); n >= 5 {
			lo, hi := last[n-5], last[n-5]
			for _, v := range last[n-5:] {
				lo, hi = min(lo, v), max(hi, v)
			}
			if hi-lo < 1<<20 {
				break
			}
		}
	}
	return peak
}

// Streams whose clients never read hold a bounded amount of memory each, whatever the size of the log they
// replay: twenty deaf replays of a 20 MB log must not make the server hold the log twenty times. Not parallel:
// it measures the process's heap, so it runs before the parallel tests resume.
func TestStreamDeafClientsBoundedMemory(t *testing.T) {
	deafStreamsHoldLittle(t, newHarness(t))
}

// TestStreamDeafClientsBoundedMemoryPostgres is TestStreamDeafClientsBoundedMemory over PostgreSQL.
func TestStreamDeafClientsBoundedMemoryPostgres(t *testing.T) {
	st, err := postgres.Open(ctxT(t), pgtest.NewDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(newAPI(t, api.Config{Store: st, Keys: &api.KeyAuth{Static: testKey}}).Handler())
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(srv.URL),
		option.WithAPIKey(testKey), option.WithMaxRetries(0), option.WithHTTPClient(srv.Client()))
	deafStreamsHoldLittle(t, &harness{t: t, store: st, srv: srv, client: client})
}

// deafStreamsHoldLittle opens twenty streams that replay a 20 MiB log and read nothing, and asserts a bound
// on the heap they make the server hold.
func deafStreamsHoldLittle(t *testing.T, h *harness) {
	const (
		streams   = 20
		events    = 100
		eventSize = 200 << 10 // 100 x 200 KiB: a 20 MiB log
		// A blocked stream holds its page (at most 256 KiB plus one event) and the frame it is writing, about
		// 1 MiB here; one caught mid-read also holds the rows being decoded and the encoder's copy of an event.
		// Under load (race detector, every package in parallel) that peaks near 3.5 MiB; a stream that held the
		// log would hold 19.5 MiB. The bound sits between the two, and fails if streams hold the log again.
		bound = streams * 5 << 20
	)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	appendLog(t, ctx, h.store, id, events, eventSize)

	before := heapInuse()
	conns := make([]net.Conn, streams)
	for i := range conns {
		conns[i] = openDeafStream(t, h.srv.URL, id, testKey)
	}
	after := settledHeap()
	growth := int64(after) - int64(before)
	const mib = 1 << 20
	t.Logf("log %.1f MiB, %d deaf streams: heap in use %.1f MiB before, %.1f MiB after, growth %.1f MiB (%.2f MiB per stream)",
		float64(events*eventSize)/mib, streams, float64(before)/mib, float64(after)/mib, float64(growth)/mib,
		float64(growth)/streams/mib)
	// Every stream was served (a refused stream would hold nothing and prove nothing).
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: status %d, want 200", i, resp.StatusCode)
		}
	}
	if growth > bound {
		t.Fatalf("heap grew by %d MiB with %d deaf streams, want at most %d MiB", growth>>20, streams, bound>>20)
	}
}
