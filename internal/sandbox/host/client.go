package host

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
)

// Client is the host's end of one agent's pipes. It is safe for concurrent use.
type Client struct {
	w io.Writer

	wmu sync.Mutex // serialises writes of whole lines

	xferMu sync.Mutex // one archive transfer at a time (archive.go)

	maxCap atomic.Int64 // the largest output cap of any call so far: it bounds every message's size

	mu      sync.Mutex
	next    uint64
	pending map[uint64]pendingCall
	dead    error         // set once the agent's output ended
	done    chan struct{} // closed when the read loop ends
}

// pendingCall is a call waiting for its response.
type pendingCall struct {
	ch     chan agent.Response
	outCap int
}

// Bounds on what the host accepts from an agent, whatever the agent is made to send. A response's text is
// capped at the call's output cap plus the notes the agent adds (truncation, exit code, timeout), and may grow
// threefold when invalid UTF-8 is replaced; a line as a
// whole is at most that text JSON-escaped (six bytes per byte at worst), one image the read tool may return
// (base64) and the envelope. A message over either bound means the agent is broken or taken over: the sandbox
// is treated as dead, and the host never holds more than the line limit of one message.
const (
	// noteSlack is the room for the agent's own notes around a capped text.
	noteSlack = 4 << 10
	// envelopeBytes is the room for the JSON around the content.
	envelopeBytes = 64 << 10
)

// MessageLimit is the largest line the host reads from an agent for a call with output cap outCap (0: the
// agent's default).
func MessageLimit(outCap int) int {
	if outCap <= 0 {
		outCap = agent.DefaultOutputCap
	}
	return 6*(outCap+noteSlack) + base64.StdEncoding.EncodedLen(agent.MaxImageBytes) + envelopeBytes
}

// NewClient starts reading responses from r (the agent's stdout) and sends requests on w (its stdin). When r
// ends, every call in flight and every later call fails with sandbox.ErrSandboxDead.
func NewClient(w io.Writer, r io.Reader) *Client {
	c := &Client{w: w, pending: map[uint64]pendingCall{}, done: make(chan struct{})}
	c.maxCap.Store(agent.DefaultOutputCap)
	go c.readLoop(r)
	return c
}

// Done is closed when the agent's output has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

func (c *Client) readLoop(r io.Reader) {
	defer close(c.done)
	br := bufio.NewReaderSize(r, 64*1024)
	var err error
	for {
		var line []byte
		if line, err = c.readLine(br); err != nil {
			if !errors.Is(err, errTooLong) {
				err = fmt.Errorf("agent output ended: %w", err)
			}
			break
		}
		var resp agent.Response
		if err = json.Unmarshal(line, &resp); err != nil {
			err = fmt.Errorf("malformed response: %w", err)
			break
		}
		c.mu.Lock()
		call, ok := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if !ok {
			continue
		}
		if err = checkResponse(resp, call.outCap); err != nil {
			c.mu.Lock()
			c.pending[resp.ID] = call // failed below, once the client is marked dead
			c.mu.Unlock()
			break
		}
		call.ch <- resp
	}
	c.mu.Lock()
	c.dead = fmt.Errorf("%w: %v", sandbox.ErrSandboxDead, err)
	for id, call := range c.pending {
		close(call.ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// readLine reads one line of at most MessageLimit of the largest output cap in use, a chunk at a time, so that
// a longer line is refused before it is buffered. It returns io.EOF at the end of the input.
func (c *Client) readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if limit := MessageLimit(int(c.maxCap.Load())); len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("%w: more than %d bytes, over the %d-byte limit", errTooLong, len(line)+len(chunk), limit)
		}
		switch {
		case err == nil:
			if line == nil {
				return chunk[:len(chunk)-1], nil // valid until the next read: parsed before it
			}
			return append(line, chunk[:len(chunk)-1]...), nil
		case errors.Is(err, bufio.ErrBufferFull):
			if need := len(line) + len(chunk); need > cap(line) {
				// Double, up to the limit: what a long message costs stays within twice the limit.
				grown := make([]byte, len(line), min(max(2*cap(line), need, 256<<10), MessageLimit(int(c.maxCap.Load()))))
				copy(grown, line)
				line = grown
			}
			line = append(line, chunk...)
		case errors.Is(err, io.EOF) && len(line)+len(chunk) > 0:
			return nil, errors.New("the agent's output ended inside a message")
		default:
			return nil, err
		}
	}
}

var errTooLong = errors.New("the agent sent a message too long for any result")

// ErrNoAnswer is wrapped, beside sandbox.ErrSandboxDead, by a call whose answer did not come in time while the
// agent's output was still open.
var ErrNoAnswer = errors.New("the agent did not answer")

// checkResponse refuses a response whose text exceeds what the agent can produce for a call with output cap
// outCap (the content, not only the line, is bounded).
func checkResponse(resp agent.Response, outCap int) error {
	if outCap <= 0 {
		outCap = agent.DefaultOutputCap
	}
	n := 0
	for _, b := range resp.Content {
		n += len(b.Text)
	}
	// The agent caps bytes; each invalid UTF-8 byte among them (binary output) arrives as U+FFFD, three bytes.
	if n > 3*outCap+noteSlack {
		return fmt.Errorf("response %d carries %d bytes of text, over the call's output cap of %d bytes", resp.ID, n, outCap)
	}
	if len(resp.Data) > agent.ArchiveChunk {
		return fmt.Errorf("response %d carries %d bytes of data, over the %d-byte chunk", resp.ID, len(resp.Data), agent.ArchiveChunk)
	}
	return nil
}

// Call sends one tool call, to run in the shell named shell ("" for the default; agent.Request.Shell), and
// waits for its response, for ctx, or for the agent's death. A call that outlives its own timeout by grace is
// treated as the agent hanging and fails with sandbox.ErrSandboxDead; the caller should then close the sandbox.
func (c *Client) Call(ctx context.Context, shell, tool string, input json.RawMessage, timeout time.Duration, outputCap int, grace time.Duration) (sandbox.Result, error) {
	res, _, err := c.call(ctx, shell, tool, input, timeout, outputCap, grace, false)
	return res, err
}

// CallLimits is Call, and the agent's cgroup event counters as they are once the call is over
// (agent.Request.Limits), in the same answer: nil when the call failed, or from an agent that sends none.
func (c *Client) CallLimits(ctx context.Context, shell, tool string, input json.RawMessage, timeout time.Duration, outputCap int, grace time.Duration) (sandbox.Result, *agent.LimitEvents, error) {
	return c.call(ctx, shell, tool, input, timeout, outputCap, grace, true)
}

func (c *Client) call(ctx context.Context, shell, tool string, input json.RawMessage, timeout time.Duration, outputCap int, grace time.Duration, limits bool) (sandbox.Result, *agent.LimitEvents, error) {
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	// A bash call may carry its own timeout_ms; the agent enforces it, the host only guards against a hang.
	resp, err := c.do(ctx, agent.Request{Tool: tool, Shell: shell, Input: input, TimeoutMS: timeout.Milliseconds(), OutputCap: outputCap, Limits: limits},
		maxTimeout(input, timeout)+grace)
	if err != nil {
		return sandbox.Result{}, nil, err
	}
	res := sandbox.Result{Content: resp.Content, IsError: resp.IsError}
	if resp.IsError && resp.Failure == agent.FailureTimeout {
		res.Failure = sandbox.FailureTimeout // the only failure the agent reports; anything else is dropped
	}
	return res, resp.Limits, nil
}

// do sends req (with an ID of its own) and waits for its response, for ctx, or for the agent's death; a request
// not answered within hang is the agent hanging (sandbox.ErrSandboxDead).
func (c *Client) do(ctx context.Context, req agent.Request, hang time.Duration) (agent.Response, error) {
	c.mu.Lock()
	if c.dead != nil {
		err := c.dead
		c.mu.Unlock()
		return agent.Response{}, err
	}
	c.next++
	req.ID = c.next
	ch := make(chan agent.Response, 1)
	c.pending[req.ID] = pendingCall{ch: ch, outCap: req.OutputCap}
	c.mu.Unlock()
	for cur := c.maxCap.Load(); int64(req.OutputCap) > cur && !c.maxCap.CompareAndSwap(cur, int64(req.OutputCap)); cur = c.maxCap.Load() {
	}

	line, err := json.Marshal(req)
	if err != nil {
		c.forget(req.ID)
		return agent.Response{}, fmt.Errorf("encode request: %w", err)
	}
	c.wmu.Lock()
	_, err = c.w.Write(append(line, '\n'))
	c.wmu.Unlock()
	if err != nil {
		c.forget(req.ID)
		return agent.Response{}, fmt.Errorf("%w: send request: %v", sandbox.ErrSandboxDead, err)
	}
	timer := time.NewTimer(hang)
	defer timer.Stop()
	select {
	case resp, ok := <-ch:
		if !ok {
			return agent.Response{}, c.deadErr()
		}
		return resp, nil
	case <-ctx.Done():
		c.forget(req.ID)
		// Best effort: have the agent kill what the call started.
		if line, err := json.Marshal(agent.Request{Cancel: req.ID}); err == nil {
			c.wmu.Lock()
			_, _ = c.w.Write(append(line, '\n'))
			c.wmu.Unlock()
		}
		return agent.Response{}, ctx.Err()
	case <-timer.C:
		c.forget(req.ID)
		return agent.Response{}, fmt.Errorf("%w: %w within %s", sandbox.ErrSandboxDead, ErrNoAnswer, hang)
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *Client) deadErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead == nil {
		return errors.New("agent: response channel closed")
	}
	return c.dead
}

// maxTimeout is the larger of the default timeout and a timeout_ms in the input.
func maxTimeout(input json.RawMessage, def time.Duration) time.Duration {
	var in struct {
		TimeoutMS int64 `json:"timeout_ms"`
	}
	if json.Unmarshal(input, &in) == nil && in.TimeoutMS > 0 {
		return max(def, time.Duration(min(in.TimeoutMS, agent.MaxTimeoutMS))*time.Millisecond)
	}
	return def
}
