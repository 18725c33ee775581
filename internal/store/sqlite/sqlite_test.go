package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestFollowedSessionReadsMatchDatabase: while a session has a subscriber, EventList after a sequence number is
// served from memory; it must return exactly what the database holds, processed marks included, in every scope,
// across more events than memory keeps, and a deleted session must still read as not found.
func TestFollowedSessionReadsMatchDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "corral.db")
	s, err := sqlite.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sqlite.Open(ctx, dsn) // no subscribers: every read goes to the database
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	now := apitype.Now()
	sess := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), Status: apitype.StatusIdle, CreatedAt: now, UpdatedAt: now}
	msg := func(typ apitype.EventType, text string) apitype.NewEvent {
		e, err := apitype.MakeEvent(typ, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock(text)}})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if _, _, err := s.SessionCreate(ctx, &store.SessionCreateParams{Session: sess, InitialEvents: []apitype.NewEvent{msg(apitype.EventUserMessage, "0")}}); err != nil {
		t.Fatal(err)
	}
	_, unsubscribe := s.Subscribe(sess.ID)
	defer unsubscribe()

	compare := func(stage string) {
		t.Helper()
		for after := int64(0); after <= 100; after++ {
			for i, limit := range []int{1, 7, 200, 3, 5} {
				p := &store.EventListParams{SessionID: sess.ID, AfterSeq: after, Limit: limit}
				if limit == 7 {
					p.Types = []apitype.EventType{apitype.EventUserMessage}
				}
				// The scopes of a multi-agent session's threads.
				p.Scope = []store.EventScope{store.ScopeSession, store.ScopeAll, store.ScopeSession, store.ScopeThread, store.ScopeThread}[i]
				if i == 4 {
					p.Thread = "sthr_a"
				}
				got, err := s.EventList(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				want, err := db.EventList(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%s: after %d limit %d: %d events, database %d", stage, after, limit, len(got), len(want))
				}
				for i := range got {
					g, w := got[i], want[i]
					if g.ID != w.ID || g.Seq != w.Seq || g.Type != w.Type || !g.CreatedAt.Equal(w.CreatedAt) ||
						g.Thread != w.Thread || g.CrossPost != w.CrossPost ||
						string(g.Data) != string(w.Data) || (g.ProcessedAt == nil) != (w.ProcessedAt == nil) ||
						(g.ProcessedAt != nil && !g.ProcessedAt.Equal(*w.ProcessedAt)) {
						t.Fatalf("%s: after %d: event %+v, database %+v", stage, after, g, w)
					}
				}
			}
		}
	}
	for i := 1; i <= 90; i++ {
		typ := apitype.EventAgentMessage
		if i%3 == 0 {
			typ = apitype.EventUserMessage
		}
		e := msg(typ, strings.Repeat("x", i))
		if i%4 == 1 { // a child thread's, one in two cross-posted
			e.Thread, e.CrossPost = "sthr_a", i%8 == 1
		}
		p := &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{e}}
		if i%10 == 0 {
			p.MarkProcessed = []int64{int64(i - 1)} // a user message appended just before
		}
		if _, err := s.EventAppend(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	compare("after appends")
	if err := s.EventMarkProcessed(ctx, &store.EventMarkProcessedParams{SessionID: sess.ID, Seqs: []int64{1, 60, 84, 90}, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	compare("after marking processed")

	if err := s.SessionDelete(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EventList(ctx, &store.EventListParams{SessionID: sess.ID, AfterSeq: 89, Limit: 10}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("events of a deleted, followed session: %v, want ErrNotFound", err)
	}
}
