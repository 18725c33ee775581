package bench

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// LogResult is the log's throughput through the API and its fan-out to subscribers.
type LogResult struct {
	// AppendsPerSec: user events appended per second by Writers concurrent clients, each POSTing to its own
	// session, one event per request, for the run's duration (no brain: nothing answers).
	AppendsPerSec float64
	Writers       int
	AppendLatency Dist // one POST round trip (the event durably appended)
	// CommitsPerSec and WritesPerCommit: the store's group commits during the appends, and the writes each held
	// on average (the appends and any other write); 0 when the store does not report its commits.
	CommitsPerSec, WritesPerCommit float64
	// Delivery: from just before a client POSTs an event to when each of Subscribers streams of the session
	// reads it.
	Delivery Dist
	// Ack: the POST's own round trip in the fan-out (the event durably appended), the part of Delivery that
	// is not the streams'.
	Ack         Dist
	Subscribers int
	Events      int
	// Curve is the fan-out at each number of subscribers (Delivery and Ack are its level of Subscribers).
	Curve []FanoutLevel
}

// FanoutLevel is the fan-out of one session's events to a number of subscribers.
type FanoutLevel struct {
	Subscribers   int
	Delivery, Ack Dist
}

// commitCounter is a store.CommitObserver that counts group commits and the writes in them.
type commitCounter struct{ commits, writes atomic.Int64 }

func (c *commitCounter) GroupCommit(n int) {
	c.commits.Add(1)
	c.writes.Add(int64(n))
}

// RunAppends measures appends per second through the API; st, if not nil, is the server's store, whose group
// commits during the run are counted when it reports them.
func RunAppends(ctx context.Context, c *Client, st store.Store, agentID, envID string, writers int, d time.Duration) (LogResult, error) {
	res := LogResult{Writers: writers}
	ids := make([]string, writers)
	for i := range ids {
		id, err := c.CreateSession(ctx, agentID, envID)
		if err != nil {
			return res, err
		}
		ids[i] = id
	}
	var counted commitCounter
	if co, ok := st.(store.CommitsObserved); ok {
		co.ObserveCommits(&counted)
		defer co.ObserveCommits(nil)
	}
	var n atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			var mine []time.Duration
			for i := 0; time.Now().Before(deadline); i++ {
				t := time.Now()
				if err := c.Say(ctx, id, fmt.Sprintf("append %d", i)); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t))
				n.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	elapsed := time.Since(start).Seconds()
	res.AppendsPerSec = float64(n.Load()) / elapsed
	res.AppendLatency = Summarize(lat)
	if commits := counted.commits.Load(); commits > 0 {
		res.CommitsPerSec, res.WritesPerCommit = float64(commits)/elapsed, float64(counted.writes.Load())/float64(commits)
	}
	return res, nil
}

// RunFanout opens subscribers streams on one session, then sends events one at a time, gap apart, and
// measures when each subscriber reads each of them (delivery), and each POST's round trip (ack).
func RunFanout(ctx context.Context, c *Client, agentID, envID string, subscribers, events int, gap time.Duration) (delivery, ack Dist, err error) {
	id, err := c.CreateSession(ctx, agentID, envID)
	if err != nil {
		return Dist{}, Dist{}, err
	}
	streams := make([]*Stream, subscribers)
	for i := range streams {
		if streams[i], err = c.Open(ctx, id); err != nil {
			for _, s := range streams[:i] {
				s.Close()
			}
			return Dist{}, Dist{}, err
		}
	}
	sent := make([]time.Time, events)
	var sentMu sync.RWMutex
	markers := make([][]byte, events)
	for i := range markers {
		markers[i] = fmt.Appendf(nil, "fanout-%06d", i)
	}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Go(func() {
			defer s.Close()
			seen := 0
			for seen < events {
				ev, err := s.Next()
				if err != nil {
					return
				}
				for i, m := range markers {
					if bytes.Contains(ev.Content, m) {
						sentMu.RLock()
						d := ev.At.Sub(sent[i])
						sentMu.RUnlock()
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
						seen++
						break
					}
				}
			}
		})
	}
	acks := make([]time.Duration, 0, events)
	for i := range events {
		sentMu.Lock()
		sent[i] = time.Now()
		sentMu.Unlock()
		if err := c.Say(ctx, id, string(markers[i])); err != nil {
			for _, s := range streams {
				s.Close()
			}
			wg.Wait()
			return Dist{}, Dist{}, err
		}
		sentMu.RLock()
		acks = append(acks, time.Since(sent[i]))
		sentMu.RUnlock()
		time.Sleep(gap)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		for _, s := range streams {
			s.Close()
		}
		<-done
	}
	if want := subscribers * events; len(lat) < want {
		return Summarize(lat), Summarize(acks), fmt.Errorf("fan-out: %d of %d deliveries arrived", len(lat), want)
	}
	return Summarize(lat), Summarize(acks), nil
}

// commitNote says how the store grouped the appends into commits ("" when it did not report them).
func commitNote(r LogResult) string {
	if r.CommitsPerSec == 0 {
		return ""
	}
	return fmt.Sprintf("; %.0f group commits/s of %.1f writes on average", r.CommitsPerSec, r.WritesPerCommit)
}
