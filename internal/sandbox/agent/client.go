package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// Client is the host's end of one agent's pipes. It is safe for concurrent use.
type Client struct {
	w io.Writer

	wmu sync.Mutex // serialises writes of whole lines

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan Response
	dead    error         // set once the agent's output ended
	done    chan struct{} // closed when the read loop ends
}

// NewClient starts reading responses from r (the agent's stdout) and sends requests on w (its stdin). When r
// ends, every call in flight and every later call fails with sandbox.ErrSandboxDead.
func NewClient(w io.Writer, r io.Reader) *Client {
	c := &Client{w: w, pending: map[uint64]chan Response{}, done: make(chan struct{})}
	go c.readLoop(r)
	return c
}

// Done is closed when the agent's output has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

func (c *Client) readLoop(r io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 256*1024*1024)
	var err error
	for sc.Scan() {
		var resp Response
		if err = json.Unmarshal(sc.Bytes(), &resp); err != nil {
			err = fmt.Errorf("malformed response: %w", err)
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	if err == nil {
		err = sc.Err()
	}
	if err == nil {
		err = io.EOF
	}
	c.mu.Lock()
	c.dead = fmt.Errorf("%w: agent output ended: %v", sandbox.ErrSandboxDead, err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// Call sends one tool call and waits for its response, for ctx, or for the agent's death. A call that outlives
// its own timeout by grace is treated as the agent hanging and fails with sandbox.ErrSandboxDead; the caller
// should then close the sandbox.
func (c *Client) Call(ctx context.Context, tool string, input json.RawMessage, timeout time.Duration, outputCap int, grace time.Duration) (sandbox.Result, error) {
	c.mu.Lock()
	if c.dead != nil {
		err := c.dead
		c.mu.Unlock()
		return sandbox.Result{}, err
	}
	c.next++
	id := c.next
	ch := make(chan Response, 1)
	c.pending[id] = ch
	c.mu.Unlock()

	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	line, err := json.Marshal(Request{ID: id, Tool: tool, Input: input, TimeoutMS: timeout.Milliseconds(), OutputCap: outputCap})
	if err != nil {
		c.forget(id)
		return sandbox.Result{}, fmt.Errorf("encode request: %w", err)
	}
	c.wmu.Lock()
	_, err = c.w.Write(append(line, '\n'))
	c.wmu.Unlock()
	if err != nil {
		c.forget(id)
		return sandbox.Result{}, fmt.Errorf("%w: send request: %v", sandbox.ErrSandboxDead, err)
	}
	// A bash call may carry its own timeout_ms; the agent enforces it, the host only guards against a hang.
	hang := time.NewTimer(maxTimeout(input, timeout) + grace)
	defer hang.Stop()
	select {
	case resp, ok := <-ch:
		if !ok {
			return sandbox.Result{}, c.deadErr()
		}
		return sandbox.Result{Content: resp.Content, IsError: resp.IsError}, nil
	case <-ctx.Done():
		c.forget(id)
		// Best effort: have the agent kill what the call started.
		if line, err := json.Marshal(Request{Cancel: id}); err == nil {
			c.wmu.Lock()
			_, _ = c.w.Write(append(line, '\n'))
			c.wmu.Unlock()
		}
		return sandbox.Result{}, ctx.Err()
	case <-hang.C:
		c.forget(id)
		return sandbox.Result{}, fmt.Errorf("%w: the agent did not answer within %s", sandbox.ErrSandboxDead, timeout+grace)
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
		return max(def, time.Duration(min(in.TimeoutMS, MaxTimeoutMS))*time.Millisecond)
	}
	return def
}
