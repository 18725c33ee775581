package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// deadlineRecorder is a ResponseWriter that records the write deadline in force at each write.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	deadline time.Time
	atWrites []time.Time
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.deadline = t
	return nil
}

func (d *deadlineRecorder) Write(b []byte) (int, error) {
	d.atWrites = append(d.atWrites, d.deadline)
	return d.ResponseRecorder.Write(b)
}

func (d *deadlineRecorder) WriteString(s string) (int, error) { return d.Write([]byte(s)) }

// Every frame and comment is written under a deadline of its own, so that a client that stops reading cannot
// hold a stream's handler forever.
func TestSSEWritesHaveDeadlines(t *testing.T) {
	t.Parallel()
	w := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	sse := &sseWriter{w: w, rc: http.NewResponseController(w)}
	start := time.Now()
	if err := sse.frame("sevt_1", "agent.message", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := sse.comment("ping"); err != nil {
		t.Fatal(err)
	}
	if len(w.atWrites) != 2 {
		t.Fatalf("%d writes, want 2", len(w.atWrites))
	}
	for i, d := range w.atWrites {
		if d.Before(start) || d.After(time.Now().Add(sseWriteTimeout)) {
			t.Errorf("write %d under deadline %v, want within %v of %v", i, d, sseWriteTimeout, start)
		}
	}
}
