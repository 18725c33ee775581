package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
)

// keyIDs accepts every key as an organization admin key whose id is the key itself.
type keyIDs struct{}

func (keyIDs) Authenticate(_ context.Context, key string) (*apitype.APIKey, error) {
	return &apitype.APIKey{ID: key}, nil
}

// getStream opens a stream with key; the caller closes the body.
func getStream(t *testing.T, ctx context.Context, srv *httptest.Server, sessionID, key string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/sessions/"+sessionID+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// wantStreamRefused asserts resp is a 429 rate_limit_error in the error envelope.
func wantStreamRefused(t *testing.T, resp *http.Response, what string) {
	t.Helper()
	defer resp.Body.Close()
	var env envelope
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatalf("%s: decode body: %v", what, err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || env.Type != "error" || env.Error.Type != apitype.ErrRateLimit ||
		!strings.HasPrefix(env.RequestID, apitype.PrefixRequest) || resp.Header.Get("retry-after") == "" {
		t.Fatalf("%s: %d %+v (retry-after %q), want 429 rate_limit_error with a request id and retry-after",
			what, resp.StatusCode, env, resp.Header.Get("retry-after"))
	}
}

// The server caps the streams open at once, per API key and overall, with 429 in the error envelope beyond the
// caps; a closed stream frees its slot.
func TestStreamConcurrencyCaps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	srv := httptest.NewServer(newAPI(t, api.Config{Store: h.store, Keys: keyIDs{}, MaxStreams: 2, MaxStreamsPerKey: 1}).Handler())
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })

	actx, cancelA := context.WithCancel(ctx)
	a := getStream(t, actx, srv, id, "key-a")
	if a.StatusCode != http.StatusOK {
		t.Fatalf("first stream of key-a: %d", a.StatusCode)
	}
	wantStreamRefused(t, getStream(t, ctx, srv, id, "key-a"), "second stream of key-a")
	b := getStream(t, ctx, srv, id, "key-b")
	defer b.Body.Close()
	if b.StatusCode != http.StatusOK {
		t.Fatalf("first stream of key-b: %d", b.StatusCode)
	}
	wantStreamRefused(t, getStream(t, ctx, srv, id, "key-c"), "third stream on a server capped at two")

	// Closing key-a's stream gives its slot back (once its handler has noticed).
	cancelA()
	_ = a.Body.Close()
	for {
		resp := getStream(t, ctx, srv, id, "key-a")
		if resp.StatusCode == http.StatusOK {
			_ = resp.Body.Close()
			break
		}
		wantStreamRefused(t, resp, "key-a while its closed stream is winding down")
		if ctx.Err() != nil {
			t.Fatal("the closed stream's slot was never released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sseIDs returns the ids of the complete events in an SSE body (a frame cut off by a disconnection is not an
// event: SSE dispatches an event at its blank line).
func sseIDs(body string) []string {
	var ids []string
	frames := strings.Split(body, "\n\n")
	for _, f := range frames[:len(frames)-1] { // the last piece is not terminated
		for line := range strings.SplitSeq(f, "\n") {
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				ids = append(ids, v)
			}
		}
	}
	return ids
}

// A stream whose client stops reading is closed once a write has been blocked for StreamWriteTimeout, and
// the client resuming with the Last-Event-ID of the last event it got misses nothing.
func TestStreamDeafClientClosedThenResumes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	logged := appendLog(t, ctx, h.store, id, 100, 200<<10) // 20 MiB: more than the sockets buffer
	srv := httptest.NewServer(newAPI(t, api.Config{Store: h.store, Keys: keyIDs{}, MaxStreamsPerKey: 1,
		StreamWriteTimeout: 200 * time.Millisecond}).Handler())
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })

	deaf := openDeafStream(t, srv.URL, id, "key")
	_ = deaf.SetReadDeadline(time.Now().Add(30 * time.Second)) // fail, never hang
	// The stream is served (its headers come at once) before anything else competes for the key's only slot;
	// then the client reads nothing more.
	resp, err := http.ReadResponse(bufio.NewReader(deaf), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("deaf stream: status %d, want 200", resp.StatusCode)
	}
	// The deaf stream holds the key's only slot until the server closes it.
	for {
		resp := getStream(t, ctx, srv, id, "key")
		if resp.StatusCode == http.StatusOK {
			_ = resp.Body.Close()
			break
		}
		wantStreamRefused(t, resp, "a second stream while the deaf one is open")
		if ctx.Err() != nil {
			t.Fatal("the deaf stream was never closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What reached the deaf client before the close, up to the cut.
	got, err := io.ReadAll(resp.Body)
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("deaf stream read %d bytes and ended with %v, want a cut (unexpected EOF)", len(got), err)
	}
	first := sseIDs(string(got))
	if len(first) == 0 || len(first) >= len(logged) {
		t.Fatalf("deaf stream got %d of %d events before it was closed, want some but not all", len(first), len(logged))
	}

	// Resume after the last complete event; read until the end of the log.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := getStream(t, rctx, srv, id, "key", "Last-Event-ID", first[len(first)-1])
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("resume: %d", r.StatusCode)
	}
	all := first
	rd := bufio.NewReaderSize(r.Body, 1<<20)
	for len(all) < len(logged) {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("resumed stream after %d events: %v", len(all), err)
		}
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "id: "); ok {
			all = append(all, v)
		}
	}
	var want []string
	for _, ev := range logged {
		want = append(want, ev.ID)
	}
	if !slices.Equal(all, want) {
		t.Fatalf("closed then resumed stream: %d events, want the %d of the log in order, each once", len(all), len(want))
	}
}
