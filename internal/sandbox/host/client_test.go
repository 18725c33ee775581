package host

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
)

// fakeAgent is the agent's end of a Client's pipes: the test reads the requests and writes what it likes.
type fakeAgent struct {
	c   *Client
	req *json.Decoder
	out *io.PipeWriter
	in  *io.PipeReader
}

func newFakeAgent(t *testing.T) *fakeAgent {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	f := &fakeAgent{c: NewClient(inW, outR), req: json.NewDecoder(inR), out: outW, in: inR}
	t.Cleanup(func() {
		outW.CloseWithError(errors.New("test over"))
		inR.CloseWithError(errors.New("test over"))
		<-f.c.Done()
	})
	return f
}

// call runs a call in the background; the fake agent answers it.
func (f *fakeAgent) call(outputCap int) (<-chan error, <-chan sandbox.Result, uint64) {
	errc := make(chan error, 1)
	resc := make(chan sandbox.Result, 1)
	go func() {
		res, err := f.c.Call(context.Background(), "", "bash", json.RawMessage(`{"command":"true"}`), time.Minute, outputCap, time.Minute)
		resc <- res
		errc <- err
	}()
	var req agent.Request
	if err := f.req.Decode(&req); err != nil {
		panic(err)
	}
	return errc, resc, req.ID
}

// TestClientBoundsMessages: a compromised agent that sends a 300 MiB line makes the call fail with
// ErrSandboxDead, and the host never buffers more than a bounded amount of it.
func TestClientBoundsMessages(t *testing.T) {
	f := newFakeAgent(t)
	errc, _, id := f.call(agent.DefaultOutputCap)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	written := make(chan int64, 1)
	go func() {
		n, _ := fmt.Fprintf(f.out, `{"id":%d,"content":[{"type":"text","text":"`, id)
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		total := int64(n)
		for range 300 {
			n, err := f.out.Write(chunk)
			total += int64(n)
			if err != nil {
				break
			}
		}
		if _, err := f.out.Write([]byte(`"}]}` + "\n")); err == nil {
			total += 5
		}
		written <- total
	}()
	var err error
	select {
	case err = <-errc:
	case <-time.After(2 * time.Minute):
		t.Fatal("the call did not end")
	}
	runtime.ReadMemStats(&after)
	f.out.CloseWithError(errors.New("reader gone")) // unblocks the writer if the client stopped reading
	t.Logf("the agent wrote %d bytes; the host allocated %d bytes meanwhile", <-written, after.TotalAlloc-before.TotalAlloc)
	if !errors.Is(err, sandbox.ErrSandboxDead) || !strings.Contains(err.Error(), "byte limit") {
		t.Errorf("err = %v, want ErrSandboxDead naming the message size limit", err)
	}
	// TotalAlloc only grows: it bounds the peak of what the host held.
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Errorf("the host allocated %d MiB for one forged message", d>>20)
	}
	// Later calls fail at once: the sandbox is not trusted any more.
	if _, err := f.c.Call(context.Background(), "", "ping", nil, time.Second, 0, time.Second); !errors.Is(err, sandbox.ErrSandboxDead) {
		t.Errorf("the next call: %v, want ErrSandboxDead", err)
	}
}

// TestClientEnforcesOutputCap: a response whose text is larger than the call's output cap allows (a forged
// result) fails the call with ErrSandboxDead; one at the cap, with the agent's notes, passes.
func TestClientEnforcesOutputCap(t *testing.T) {
	t.Parallel()
	f := newFakeAgent(t)
	const outCap = 1000
	answer := func(id uint64, text string) {
		t.Helper()
		b, _ := json.Marshal(agent.Response{ID: id, Content: []apitype.ContentBlock{{Type: apitype.ContentText, Text: text}}})
		if _, err := f.out.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	errc, resc, id := f.call(outCap)
	ok := "[output truncated: the first 123456 bytes were dropped]\n" + strings.Repeat("é", outCap/2) + "\nexit code: 1"
	answer(id, ok)
	if err := <-errc; err != nil {
		t.Fatalf("a response within the cap: %v", err)
	}
	if got := (<-resc).Text(); got != ok {
		t.Errorf("a response within the cap: %q", got)
	}
	// Binary output: every byte of it invalid UTF-8, each arriving as U+FFFD.
	errc, resc, id = f.call(outCap)
	answer(id, strings.Repeat("\xff", outCap))
	if err := <-errc; err != nil {
		t.Fatalf("a binary response within the cap: %v", err)
	}
	if got := (<-resc).Text(); got != strings.Repeat("\uFFFD", outCap) {
		t.Errorf("a binary response within the cap: %d bytes", len(got))
	}
	errc, _, id = f.call(outCap)
	answer(id, strings.Repeat("x", 100*outCap))
	if err := <-errc; !errors.Is(err, sandbox.ErrSandboxDead) || !strings.Contains(err.Error(), "output cap") {
		t.Errorf("a response over the cap: %v, want ErrSandboxDead naming the output cap", err)
	}
}

// TestClientShell: a call's shell travels in the request's "shell" field, which a call to the default shell
// leaves out (the lines of a single-thread session are unchanged).
func TestClientShell(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := NewClient(inW, outR)
	defer func() {
		outW.Close()
		inR.Close()
		<-c.Done()
	}()
	lines := bufio.NewReader(inR)
	for _, shell := range []string{"sthr_01abc", ""} {
		done := make(chan error, 1)
		go func() {
			_, err := c.Call(context.Background(), shell, "bash", json.RawMessage(`{"command":"pwd"}`), time.Minute, 0, time.Minute)
			done <- err
		}()
		line, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var req agent.Request
		if err := json.Unmarshal(line, &req); err != nil {
			t.Fatal(err)
		}
		if req.Shell != shell || req.Tool != "bash" {
			t.Errorf("request %s: shell %q, want %q", line, req.Shell, shell)
		}
		if hasField := bytes.Contains(line, []byte(`"shell"`)); hasField != (shell != "") {
			t.Errorf("request %s: a shell field %v, want %v", line, hasField, shell != "")
		}
		resp, _ := json.Marshal(agent.Response{ID: req.ID, Content: []apitype.ContentBlock{apitype.TextBlock("ok")}})
		if _, err := outW.Write(append(resp, '\n')); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestClientLimits: CallLimits asks for the agent's counters in the call's own request and returns those its
// answer carries; an answer without them (an agent that predates the field) gives none, for the caller to ask
// otherwise; Call does not ask.
func TestClientLimits(t *testing.T) {
	f := newFakeAgent(t)
	sent := &agent.LimitEvents{Memory: "oom_kill 2\n", Pids: "max 1\n"}
	for _, tc := range []struct {
		ask   bool
		reply *agent.LimitEvents
	}{{true, sent}, {true, nil}, {false, nil}} {
		type out struct {
			res    sandbox.Result
			limits *agent.LimitEvents
			err    error
		}
		done := make(chan out, 1)
		go func() {
			var o out
			if tc.ask {
				o.res, o.limits, o.err = f.c.CallLimits(context.Background(), "", "bash", json.RawMessage(`{"command":"true"}`), time.Minute, 0, time.Minute)
			} else {
				o.res, o.err = f.c.Call(context.Background(), "", "bash", json.RawMessage(`{"command":"true"}`), time.Minute, 0, time.Minute)
			}
			done <- o
		}()
		var req agent.Request
		if err := f.req.Decode(&req); err != nil {
			t.Fatal(err)
		}
		if req.Limits != tc.ask {
			t.Errorf("request limits = %v, want %v", req.Limits, tc.ask)
		}
		resp, _ := json.Marshal(agent.Response{ID: req.ID, Content: []apitype.ContentBlock{apitype.TextBlock("ok")}, Limits: tc.reply})
		if _, err := f.out.Write(append(resp, '\n')); err != nil {
			t.Fatal(err)
		}
		o := <-done
		if o.err != nil || o.res.Text() != "ok" {
			t.Fatalf("call: %v %q", o.err, o.res.Text())
		}
		if (o.limits == nil) != (tc.reply == nil) || (o.limits != nil && *o.limits != *tc.reply) {
			t.Errorf("asked %v, answered %+v: limits %+v", tc.ask, tc.reply, o.limits)
		}
	}
}
