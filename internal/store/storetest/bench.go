package storetest

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Bench runs the store benchmarks as sub-benchmarks of b:
//
//	Append/sessions=1/writers=1     one appender, one session: the latency of a durable append
//	Append/sessions=1/writers=16    16 goroutines appending to one session
//	Append/sessions=64/writers=64   64 goroutines, each appending to its own session
//	SessionCreate/writers=32        32 goroutines creating sessions with their first message, as the API does
//	EventList/100k/after            100 events after the middle of a 100,000-event log
//	EventList/100k/before-desc      the 100 events before the middle, newest first
//	Resources/create-get-update     a vault created, read and updated: the document-table path
//	Resources/list                  a page of 100 of 1,000 vaults
//
// Appends are one event each and report appends/s, creates report creates/s; reads report ns/op.
func Bench(b *testing.B, h Harness) {
	b.Run("Append", func(b *testing.B) {
		for _, tc := range []struct {
			name          string
			sessions, per int
		}{
			{"sessions=1/writers=1", 1, 1},
			{"sessions=1/writers=16", 1, 16},
			{"sessions=64/writers=64", 64, 1},
		} {
			b.Run(tc.name, func(b *testing.B) { benchAppend(b, h, tc.sessions, tc.per) })
		}
	})
	b.Run("SessionCreate/writers=32", func(b *testing.B) { benchSessionCreate(b, h, 32) })
	b.Run("Resources", func(b *testing.B) { benchResources(b, h) })
	b.Run("EventList", func(b *testing.B) {
		s := h.open(b)
		sess := createSession(b, s)
		const total, batch = 100_000, 2_000
		events := make([]apitype.NewEvent, batch)
		for i := range events {
			events[i] = agentMessage(strings.Repeat("x", 200))
		}
		for range total / batch {
			appendEvents(b, s, sess.ID, events...)
		}
		for _, tc := range []struct {
			name  string
			p     store.EventListParams
			first int64
		}{
			{"100k/after", store.EventListParams{AfterSeq: total / 2, Limit: 100}, total/2 + 1},
			{"100k/before-desc", store.EventListParams{BeforeSeq: total/2 + 1, Desc: true, Limit: 100}, total / 2},
		} {
			b.Run(tc.name, func(b *testing.B) {
				p := tc.p
				p.SessionID = sess.ID
				b.ReportAllocs()
				for b.Loop() {
					got, err := s.EventList(ctxBg, &p)
					if err != nil {
						b.Fatal(err)
					}
					if len(got) != 100 || got[0].Seq != tc.first {
						b.Fatalf("got %d events from seq %d, want 100 from %d", len(got), got[0].Seq, tc.first)
					}
				}
			})
		}
	})
}

// benchResources measures the document-table path every resource takes (vaults stand for them all).
func benchResources(b *testing.B, h Harness) {
	s := h.open(b)
	base := time.Now().UTC().Truncate(time.Second)
	b.Run("create-get-update", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v := newVault(base)
			if err := s.VaultCreate(ctxBg, v); err != nil {
				b.Fatal(err)
			}
			if _, err := s.VaultGet(ctxBg, v.ID); err != nil {
				b.Fatal(err)
			}
			if _, err := s.VaultUpdate(ctxBg, v.ID, func(v *apitype.Vault) error {
				v.DisplayName = "renamed"
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		s := h.open(b)
		for i := range 1000 {
			if err := s.VaultCreate(ctxBg, newVault(base.Add(time.Duration(i)*time.Millisecond))); err != nil {
				b.Fatal(err)
			}
		}
		p := &store.ListParams{Limit: 100, After: &store.Cursor{CreatedAt: base.Add(500 * time.Millisecond)}}
		b.ReportAllocs()
		for b.Loop() {
			got, err := s.VaultList(ctxBg, p)
			if err != nil {
				b.Fatal(err)
			}
			if len(got) != 100 {
				b.Fatalf("got %d vaults, want 100", len(got))
			}
		}
	})
}

// benchAppend appends b.N single events from sessions*per goroutines (per goroutines per session).
func benchAppend(b *testing.B, h Harness, sessions, per int) {
	s := h.open(b)
	ev := agentMessage(strings.Repeat("x", 200))
	params := make([]*store.EventAppendParams, 0, sessions*per)
	for range sessions {
		id := createSession(b, s).ID
		for range per {
			params = append(params, &store.EventAppendParams{SessionID: id, Events: []apitype.NewEvent{ev}})
		}
	}
	benchConcurrent(b, len(params), "appends/s", func(g int) error {
		_, err := s.EventAppend(ctxBg, params[g])
		return err
	})
}

// benchSessionCreate creates b.N sessions, each with a first user.message, from writers goroutines. The session
// carries an agent like the API's (a system prompt, the built-in toolset, a custom tool), so that its document
// is of a real one's size.
func benchSessionCreate(b *testing.B, h Harness, writers int) {
	s := h.open(b)
	msg := userMessage("hello")
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)
	benchConcurrent(b, writers, "creates/s", func(int) error {
		in := newSession("agent_x", 1, apitype.Now())
		in.Agent.System = strings.Repeat("You are a careful engineer. ", 20)
		in.Agent.Model = apitype.ModelConfig{ID: "claude-sonnet-4-6"}
		in.Agent.Tools = []apitype.Tool{{Type: apitype.ToolTypeAgentToolset, Configs: []apitype.ToolConfig{}},
			{Type: apitype.ToolTypeCustom, Name: "weather", Description: "The weather in a city.", InputSchema: schema}}
		_, _, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: in, InitialEvents: []apitype.NewEvent{msg}})
		return err
	})
}

// benchConcurrent runs op b.N times in all from n goroutines (op(g) in goroutine g) and reports the rate as unit.
func benchConcurrent(b *testing.B, n int, unit string, op func(g int) error) {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range n {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(g); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
}
