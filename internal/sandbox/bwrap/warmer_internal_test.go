package bwrap

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWarmerRetries: a start that cannot be made is logged and tried again after a growing pause, while take
// finds none ready (the sandboxes start cold); close stops the retries at once, even in a pause.
func TestWarmerRetries(t *testing.T) {
	logs, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var calls atomic.Int32
	tries := make(chan time.Time, 3)
	w := newWarmer(1, func() (*warmStart, error) {
		calls.Add(1)
		select {
		case tries <- time.Now():
		default:
		}
		return nil, errors.New("no cgroups here")
	}, slog.New(slog.NewTextHandler(logs, nil)))
	var at [3]time.Time
	for i := range at {
		select {
		case at[i] = <-tries:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d tries in 10s, want a third after pauses of 100 and 200 ms", i)
		}
	}
	if s := w.take(); s != nil {
		t.Error("take returned a start none could make")
	}
	// The pauses grow: 100 ms, then 200 ms (at least; the machine may be slower, never faster).
	if first, second := at[1].Sub(at[0]), at[2].Sub(at[1]); first < 100*time.Millisecond || second < 200*time.Millisecond {
		t.Errorf("pauses between tries %v and %v, want at least 100ms and 200ms", first, second)
	}
	closed := make(chan struct{})
	go func() { w.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not stop a warmer in its pause")
	}
	n := calls.Load()
	time.Sleep(500 * time.Millisecond)
	if calls.Load() != n {
		t.Errorf("the warmer tried again after close (%d tries, then %d)", n, calls.Load())
	}
	log, _ := os.ReadFile(logs.Name())
	if got := strings.Count(string(log), "a start kept ready could not be made"); got < 3 || !strings.Contains(string(log), "no cgroups here") {
		t.Errorf("the log has %d warnings of a failed start, want one per try with its error:\n%s", got, log)
	}
}

// TestWriteCloseFitsPipe: bwrap's arguments are written to a pipe before anything reads it; more than a pipe
// holds by default (64 KiB) must not wait for a reader, and reach it whole.
func TestWriteCloseFitsPipe(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := []byte(strings.Repeat("--bind\x00/a/mount/source\x00/a/mount/target\x00", 8000)) // 320 KB
	written := make(chan error, 1)
	go func() { written <- writeClose(w, want) }()
	select {
	case err := <-written:
		if err != nil {
			t.Fatalf("writeClose: %v", err)
		}
	case <-time.After(10 * time.Second):
		r.Close() // unblocks the write
		t.Fatalf("writeClose of %d bytes waited for a reader", len(want))
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(want))
	}
}
