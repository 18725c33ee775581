package sqlite_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/store/storetest"
)

var harness = storetest.Harness{
	NewDSN: func(t testing.TB) string {
		return "sqlite://" + filepath.Join(t.TempDir(), "corral.db")
	},
	Open: func(ctx context.Context, dsn string) (store.Store, error) {
		return sqlite.Open(ctx, dsn)
	},
}

func TestMain(m *testing.M) {
	if storetest.RunCrashChild(harness) {
		return
	}
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) { storetest.Run(t, harness) }

func BenchmarkStore(b *testing.B) { storetest.Bench(b, harness) }

func TestOpenDSN(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		dsn string
		ok  bool
	}{
		{"sqlite://" + filepath.Join(dir, "a.db"), true},
		{filepath.Join(dir, "b.db"), true},
		{"sqlite://" + filepath.Join(dir, "sub", "dir", "c.db"), true}, // creates the directory
		{"sqlite://", false},
		{"sqlite://:memory:", false},
		{"file:" + filepath.Join(dir, "d.db"), false},
		{filepath.Join(dir, "e.db") + "?_journal_mode=DELETE", false},
	} {
		s, err := sqlite.Open(context.Background(), tc.dsn)
		if (err == nil) != tc.ok {
			t.Fatalf("Open(%q): error %v, want ok=%v", tc.dsn, err, tc.ok)
		}
		if err == nil {
			if err := s.Close(); err != nil {
				t.Fatalf("close %q: %v", tc.dsn, err)
			}
		}
	}
}

// TestReopen checks that the data survives a close and that migrations apply once.
func TestReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := harness.NewDSN(t)
	s, err := sqlite.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	sess := &apitype.Session{ID: apitype.NewID(apitype.PrefixSession), CreatedAt: apitype.Now()}
	if _, _, err := s.SessionCreate(ctx, &store.SessionCreateParams{
		Session: sess, InitialEvents: []apitype.NewEvent{{Type: apitype.EventUserMessage, Data: []byte(`{}`)}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	events, err := s.EventList(ctx, &store.EventListParams{SessionID: sess.ID, Limit: 10})
	if err != nil || len(events) != 1 {
		t.Fatalf("after reopen: %d events, error %v; want 1", len(events), err)
	}
}

// TestEventIDs checks the shape of event ids (that of apitype.NewID) and that they sort in append order.
func TestEventIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, harness.NewDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess := &apitype.Session{ID: apitype.NewID(apitype.PrefixSession), CreatedAt: apitype.Now()}
	if _, _, err := s.SessionCreate(ctx, &store.SessionCreateParams{Session: sess}); err != nil {
		t.Fatal(err)
	}
	var prev string
	for range 20 {
		events, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{
			{Type: apitype.EventAgentMessage}, {Type: apitype.EventAgentMessage},
		}})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if len(e.ID) != len(apitype.NewID(apitype.PrefixEvent)) || !strings.HasPrefix(e.ID, "sevt_011C") {
				t.Fatalf("event id %q: not shaped like apitype.NewID", e.ID)
			}
			if e.ID <= prev {
				t.Fatalf("event id %q sorts before the previous one, %q", e.ID, prev)
			}
			prev = e.ID
		}
	}
}
