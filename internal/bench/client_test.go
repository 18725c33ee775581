package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// connKey keys the count of requests a connection has carried in its requests' contexts.
type connKey struct{}

// TestSayReusesConnection: a session's first message goes out on a connection already open (the TTFT it starts
// measures no dial), while the session's stream, opened just before, holds a connection of its own.
func TestSayReusesConnection(t *testing.T) {
	var mu sync.Mutex
	var dialed []bool // per message sent: whether it was the first request of its connection
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		r.Context().Value(connKey{}).(*atomic.Int32).Add(1)
		fmt.Fprint(w, `{"type":"session","id":"sesn_1","status":"idle"}`)
	})
	mux.HandleFunc("GET /v1/sessions/{id}/events/stream", func(w http.ResponseWriter, r *http.Request) {
		r.Context().Value(connKey{}).(*atomic.Int32).Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("POST /v1/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		first := r.Context().Value(connKey{}).(*atomic.Int32).Add(1) == 1
		mu.Lock()
		dialed = append(dialed, first)
		mu.Unlock()
		fmt.Fprint(w, `{"data":[]}`)
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int32))
	}
	srv.Start()
	defer srv.Close()

	ctx := context.Background()
	c := NewClient(srv.URL, "key")
	defer c.CloseIdleConnections()
	for range 3 {
		id, err := c.CreateSession(ctx, "agent_1", "env_1")
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Open(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Say(ctx, id, "hi"); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 3 || dialed[0] || dialed[1] || dialed[2] {
		t.Errorf("first request of a new connection, per message: %v; want none (the session's create left one open)", dialed)
	}
}
