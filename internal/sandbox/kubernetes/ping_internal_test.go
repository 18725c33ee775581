package kubernetes

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/host"
)

// lossyOutput is a container's output as containerd routes it while a new attach stream is being set up: the
// first drop lines reach the container's log only (not the stream); the rest reach w. The agent writes each
// answer with one Write.
type lossyOutput struct {
	mu      sync.Mutex
	drop    int
	dropped int
	w       io.Writer
}

func (o *lossyOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dropped < o.drop {
		o.dropped++
		return len(p), nil
	}
	return o.w.Write(p)
}

// pingOver starts the real agent's server on a pair of pipes whose output loses the first drop answers, and
// returns a Sandbox that talks to it, and the output.
func pingOver(t *testing.T, drop int) (*Sandbox, *lossyOutput, *io.PipeWriter) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	out := &lossyOutput{drop: drop, w: outW}
	srv := agent.NewServer(agent.Config{Workspace: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ctx, inR, out)
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outW.Close()
		<-served
		srv.Close()
	})
	return &Sandbox{client: host.NewClient(inW, outR), stderr: host.NewTailWriter(4096)}, out, outW
}

// TestPingAnswerLost: the answer to the first ping on a new attach stream can be lost (containerd adds the
// stream's stdout after it starts copying its stdin); the ping is sent again and the second answer counts.
func TestPingAnswerLost(t *testing.T) {
	sb, out, _ := pingOver(t, 2)
	if err := sb.ping(t.Context(), pingTimeout); err != nil {
		t.Fatalf("ping with its first two answers lost: %v", err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.dropped != 2 {
		t.Errorf("%d answers lost, want 2: the ping was not sent again until one came through", out.dropped)
	}
}

// TestPingStreamEnded: an agent whose output has ended is dead at once, not pinged until pingTimeout.
func TestPingStreamEnded(t *testing.T) {
	sb, _, outW := pingOver(t, 1<<30)
	outW.CloseWithError(errors.New("the attach stream ended"))
	err := sb.ping(t.Context(), pingTimeout)
	if !errors.Is(err, sandbox.ErrSandboxDead) || errors.Is(err, host.ErrNoAnswer) {
		t.Fatalf("ping of an agent whose output ended: %v, want sandbox.ErrSandboxDead and not ErrNoAnswer", err)
	}
}

// TestPingNoAnswer: an agent whose answers never come through is pinged again until the timeout, then fails as
// a sandbox that did not answer.
func TestPingNoAnswer(t *testing.T) {
	sb, out, _ := pingOver(t, 1<<30)
	err := sb.ping(t.Context(), 2500*time.Millisecond)
	if !errors.Is(err, sandbox.ErrSandboxDead) || !errors.Is(err, host.ErrNoAnswer) {
		t.Fatalf("ping of an agent whose answers are all lost: %v, want ErrSandboxDead and ErrNoAnswer", err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.dropped < 2 {
		t.Errorf("%d pings answered (and lost) before the timeout, want at least 2: the ping was not sent again", out.dropped)
	}
}
