package storetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Environment of the crash child: the DSN of its database and the sessions it appends to.
const (
	crashDSNEnv      = "CORRAL_STORETEST_CRASH_DSN"
	crashSessionsEnv = "CORRAL_STORETEST_CRASH_SESSIONS"
)

const (
	crashWritersPerSession = 3
	crashAcksWanted        = 400 // events the parent reads acknowledged before it kills the child
	crashChildLifetime     = 60 * time.Second
)

// crashPayload is the data of every event the child appends: which writer, and its n-th event.
type crashPayload struct {
	Writer int `json:"writer"`
	N      int `json:"n"`
}

// RunCrashChild runs the durability test's child when this process is one (CORRAL_STORETEST_CRASH_DSN is set) and
// then returns true; the caller (TestMain) must return without running the tests. Otherwise it returns false.
//
// The child appends to the given sessions from several goroutines, single events and batches, and writes one line
// per acknowledged event to stdout: "ack <session> <seq> <id> <writer> <n>". It runs until it is killed.
func RunCrashChild(h Harness) bool {
	dsn := os.Getenv(crashDSNEnv)
	if dsn == "" {
		return false
	}
	if err := runCrashChild(h, dsn, strings.Split(os.Getenv(crashSessionsEnv), ",")); err != nil {
		fmt.Fprintf(os.Stderr, "crash child: %v\n", err)
		os.Exit(1)
	}
	return true
}

func runCrashChild(h Harness, dsn string, sessionIDs []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), crashChildLifetime)
	defer cancel()
	s, err := h.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()

	var out sync.Mutex
	errs := make(chan error, len(sessionIDs)*crashWritersPerSession)
	var wg sync.WaitGroup
	for _, id := range sessionIDs {
		for w := range crashWritersPerSession {
			wg.Go(func() {
				n := 0
				for i := 0; ctx.Err() == nil; i++ {
					size := 1
					if i%3 == 2 {
						size = 1 + i%7
					}
					batch := make([]apitype.NewEvent, size)
					for k := range batch {
						data, _ := json.Marshal(crashPayload{Writer: w, N: n + k})
						batch[k] = apitype.NewEvent{Type: apitype.EventAgentMessage, Data: data, Processed: true}
					}
					events, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Events: batch})
					if ctx.Err() != nil {
						return
					}
					if err != nil {
						errs <- err
						return
					}
					var line bytes.Buffer
					for k, e := range events {
						fmt.Fprintf(&line, "ack %s %d %s %d %d\n", id, e.Seq, e.ID, w, n+k)
					}
					n += len(events)
					out.Lock()
					_, err = os.Stdout.Write(line.Bytes())
					out.Unlock()
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

type crashAck struct {
	seq    int64
	id     string
	writer int
	n      int
}

// testDurability kills a child process that appends events and checks that every event it saw acknowledged
// survived, in order, without duplicates or gaps.
func testDurability(t *testing.T, h Harness) {
	dsn := h.NewDSN(t)
	s, err := h.Open(ctxBg, dsn)
	must(t, err, "open")
	var ids []string
	for range 2 {
		ids = append(ids, createSession(t, s).ID)
	}
	must(t, s.Close(), "close")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashDSNEnv+"="+dsn, crashSessionsEnv+"="+strings.Join(ids, ","))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err, "child stdout")
	must(t, cmd.Start(), "start child")
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	acks := map[string][]crashAck{}
	total := 0
	sc := bufio.NewScanner(stdout)
	parse := func(line string) {
		f := strings.Fields(line)
		if len(f) != 6 || f[0] != "ack" {
			t.Fatalf("child wrote %q", line)
		}
		seq, err1 := strconv.ParseInt(f[2], 10, 64)
		writer, err2 := strconv.Atoi(f[4])
		n, err3 := strconv.Atoi(f[5])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("child wrote %q", line)
		}
		acks[f[1]] = append(acks[f[1]], crashAck{seq: seq, id: f[3], writer: writer, n: n})
		total++
	}
	deadline := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for total < crashAcksWanted && sc.Scan() {
		parse(sc.Text())
	}
	if total < crashAcksWanted {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		killed = true
		t.Fatalf("child stopped after %d acknowledgements (does TestMain call storetest.RunCrashChild?): %s",
			total, stderr.String())
	}
	must(t, cmd.Process.Kill(), "kill child") // SIGKILL, mid-stream
	// Lines already in the pipe were acknowledged before the kill: they count too.
	for sc.Scan() {
		parse(sc.Text())
	}
	_ = cmd.Wait()
	killed = true
	t.Logf("child killed after %d acknowledged events", total)

	s, err = h.Open(ctxBg, dsn)
	must(t, err, "reopen after the crash")
	defer func() { must(t, s.Close(), "close") }()
	for _, id := range ids {
		events := allEvents(t, s, id)
		checkContiguous(t, events)
		// Every writer's events are in the log in the order it appended them, each once.
		next := map[int]int{}
		for _, e := range events {
			var p crashPayload
			must(t, json.Unmarshal(e.Data, &p), "decode payload")
			if p.N != next[p.Writer] {
				t.Fatalf("session %s seq %d: writer %d's event %d, want its event %d (lost, doubled or reordered)",
					id, e.Seq, p.Writer, p.N, next[p.Writer])
			}
			next[p.Writer]++
		}
		for _, a := range acks[id] {
			if a.seq < 1 || a.seq > int64(len(events)) {
				t.Fatalf("session %s: acknowledged seq %d lost (log has %d events)", id, a.seq, len(events))
			}
			e := events[a.seq-1]
			var p crashPayload
			must(t, json.Unmarshal(e.Data, &p), "decode payload")
			if e.ID != a.id || p.Writer != a.writer || p.N != a.n {
				t.Fatalf("session %s seq %d: stored %s (writer %d, n %d), acknowledged %s (writer %d, n %d)",
					id, a.seq, e.ID, p.Writer, p.N, a.id, a.writer, a.n)
			}
		}
	}
}
