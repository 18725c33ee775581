package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/sandbox/host"
)

// Sandbox is one pod.
type Sandbox struct {
	p       *Provider
	name    string
	limits  sandbox.Limits
	ln      *podListener
	proxy   *egress.Proxy
	created bool
	stderr  *host.TailWriter

	client *host.Client
	stdin  *io.PipeWriter     // the agent's stdin: closing it ends the agent, and then the stream
	cancel context.CancelFunc // ends the attach stream
	ended  chan struct{}      // closed when the stream has ended

	mu   sync.Mutex
	seen cgroup.Events // the pod's limit events after the last call
	note string        // put in front of the next result, once

	once     sync.Once
	closeErr error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// hangGrace is how long past a call's timeout the host waits before it declares the agent hung.
const hangGrace = 15 * time.Second

// attach opens the stream to the agent's stdin and stdout.
func (sb *Sandbox) attach() error {
	p := sb.p
	req := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.cfg.Namespace).Name(sb.name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: "sandbox", Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(p.cfg.REST, "POST", req.URL())
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(p.cfg.REST, "GET", req.URL().String())
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	sb.cancel, sb.ended, sb.stdin = cancel, make(chan struct{}), inW
	sb.client = host.NewClient(inW, outR)
	go func() {
		defer close(sb.ended)
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: sb.stderr})
		if err == nil {
			err = errors.New("the attach stream ended")
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	return nil
}

// ping waits until the agent answers, for at most timeout. containerd starts copying a new attach stream's
// stdin to the container before it adds the stream's stdout to the container's outputs (ContainerIO.Attach in
// its CRI plugin), so an answer to a request sent at once can go to the container's log alone: the ping is sent
// again every pingEvery until one is answered (a late answer to an earlier one is dropped by the client).
func (sb *Sandbox) ping(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		res, err := sb.client.Call(ctx, "", agent.PingTool, json.RawMessage(`{}`), pingEvery, 0, 0)
		if errors.Is(err, host.ErrNoAnswer) {
			if time.Now().Before(deadline) {
				continue
			}
			err = fmt.Errorf("%w (pinged every %s for %s)", err, pingEvery, timeout)
		}
		if err != nil {
			if t := strings.TrimSpace(sb.stderr.String()); t != "" {
				err = fmt.Errorf("%w (agent stderr: %s)", err, t)
			}
			return err
		}
		if res.IsError {
			return errors.New("agent: ping failed")
		}
		return nil
	}
}

const (
	pingTimeout = 35 * time.Second
	pingEvery   = time.Second
)

// confined proves the pod's network policy is enforced: from inside, the provider's canary port (which no
// policy allows) must be unreachable. A policy engine programs a new pod's rules a moment after it starts;
// until then the pod is not handed out.
func (sb *Sandbox) confined(ctx context.Context, canaryPort int) error {
	probe, _ := json.Marshal(map[string]any{"command": fmt.Sprintf(
		"timeout 2 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null && echo reached || echo refused", sb.p.cfg.EgressIP, canaryPort)})
	for {
		res, err := sb.client.Call(ctx, "", "bash", probe, 10*time.Second, 0, 5*time.Second)
		if err != nil {
			return fmt.Errorf("network policy probe: %w", err)
		}
		out := res.Text()
		if strings.Contains(out, "refused") {
			return nil
		}
		if !strings.Contains(out, "reached") {
			return fmt.Errorf("network policy probe: %s", out)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pod's network policy was not enforced in time: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Execute runs one tool call in the pod. Its cgroups are on the node, out of this process's reach: the agent
// reads their event counters while the call runs (agent.LimitEventsTool) and with its answer (agent.Request.Limits),
// to tell a fork refused at the pod's pids limit (the call is stopped at once and the pod deleted, as one host ends
// a sandbox) from a process the kernel killed at the memory limit (said in the result; the agent and its shells
// live on).
func (sb *Sandbox) Execute(ctx context.Context, shell, name string, input json.RawMessage) (sandbox.Result, error) {
	sb.mu.Lock()
	prev := sb.seen
	sb.mu.Unlock()
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go host.WatchPids(pidsPoll, sb.pidsMax, prev.PidsMax, cancel, stop)
	res, after, err := sb.client.CallLimits(callCtx, shell, name, input, sb.limits.CommandTimeout, sb.limits.OutputBytes, hangGrace)
	if err != nil && !errors.Is(err, sandbox.ErrSandboxDead) && ctx.Err() != nil {
		return res, err // the caller gave up
	}
	if err == nil {
		sb.mu.Lock()
		if sb.note != "" {
			res.Content = append([]apitype.ContentBlock{apitype.TextBlock(sb.note)}, res.Content...)
			sb.note = ""
		}
		sb.mu.Unlock()
	}
	var ev cgroup.Events
	var evErr error
	if after != nil {
		ev = cgroup.ParseEvents([]byte(after.Memory), []byte(after.Pids))
	} else {
		ev, evErr = sb.events(context.Background()) // a failed call, or an agent that does not send them
	}
	if evErr == nil {
		sb.mu.Lock()
		sb.seen = ev
		sb.mu.Unlock()
	}
	switch {
	case evErr == nil && ev.PidsMax > prev.PidsMax:
		// Whatever forked past the limit may still be forking: the pod goes. The next call gets a new one.
		_ = sb.Close()
		return sandbox.Result{}, fmt.Errorf("%w: it reached %s (a fork bomb?); its pod was deleted%w", sandbox.ErrSandboxDead, sb.p.pidsLimit(), host.LimitHit)
	case err != nil && errors.Is(err, sandbox.ErrSandboxDead):
		why, oom := sb.status()
		if why != "" {
			err = fmt.Errorf("%w (%s)", err, why)
		}
		if oom {
			err = fmt.Errorf("%w: it ran out of memory (limit %d MiB)%w", err, sb.limits.MemoryBytes>>20, host.LimitHit)
		}
		return res, err
	case err == nil && evErr == nil && ev.OOMKills > prev.OOMKills:
		host.OOMKilled(&res, sb.limits.MemoryBytes, ev.OOMKills-prev.OOMKills)
	}
	return res, err
}

// eventsTimeout bounds one read of the pod's cgroup counters.
const eventsTimeout = 5 * time.Second

// events asks the agent how often the pod's container hit its limits.
func (sb *Sandbox) events(ctx context.Context) (cgroup.Events, error) {
	res, err := sb.client.Call(ctx, "", agent.LimitEventsTool, json.RawMessage(`{}`), eventsTimeout, 0, eventsTimeout)
	if err != nil {
		return cgroup.Events{}, err
	}
	var le agent.LimitEvents
	if err := json.Unmarshal([]byte(res.Text()), &le); err != nil || res.IsError {
		return cgroup.Events{}, fmt.Errorf("agent: limit events: %q", res.Text())
	}
	return cgroup.ParseEvents([]byte(le.Memory), []byte(le.Pids)), nil
}

// pidsPoll is how often a running call's pod is asked whether a fork was refused.
const pidsPoll = 100 * time.Millisecond

// pidsMax asks the pod how many forks its pids limit refused.
func (sb *Sandbox) pidsMax() (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), eventsTimeout)
	defer cancel()
	ev, err := sb.events(ctx)
	return ev.PidsMax, err == nil
}

// status is what the cluster says of the pod once the stream to it ended, and whether the kernel killed its
// agent at the memory limit.
func (sb *Sandbox) status() (why string, oom bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pod, err := sb.p.cs.CoreV1().Pods(sb.p.cfg.Namespace).Get(ctx, sb.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "its pod was deleted", false
	case err != nil:
		return "", false
	case pod.DeletionTimestamp != nil:
		return "its pod is being deleted", false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			oom = true
		}
	}
	return strings.TrimSpace(string(pod.Status.Phase) + " " + containerReasons(pod)), oom
}

// Close deletes the pod (its policy and config map with it) and stops its proxy. Idempotent.
func (sb *Sandbox) Close() error {
	sb.once.Do(func() {
		if sb.cancel != nil {
			// The agent's stdin closes first (the container has stdinOnce: the agent ends, and the stream with
			// it); a stream that outlives that is cut.
			sb.stdin.Close()
			select {
			case <-sb.ended:
			case <-time.After(3 * time.Second):
			}
			sb.cancel()
			<-sb.ended
		}
		var errs []error
		if sb.created {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			errs = append(errs, sb.p.deleteWhere(ctx, LabelSandbox+"="+sb.name))
			cancel()
		}
		if sb.proxy != nil {
			errs = append(errs, sb.proxy.Close())
		} else if sb.ln != nil {
			errs = append(errs, sb.ln.Close())
		}
		sb.p.untrack(sb)
		sb.closeErr = errors.Join(errs...)
	})
	return sb.closeErr
}

// podListener accepts connections only from the pod's address, once it is known: another pod, or anything
// else that reaches the port, is cut at once.
type podListener struct {
	net.Listener
	mu sync.Mutex
	ip netip.Addr
}

func (l *podListener) allow(ip netip.Addr) {
	l.mu.Lock()
	l.ip = ip
	l.mu.Unlock()
}

func (l *podListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		from, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		l.mu.Lock()
		ok := l.ip.IsValid() && from.Addr().Unmap() == l.ip
		l.mu.Unlock()
		if ok {
			return c, nil
		}
		c.Close()
	}
}

func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// packagesNote is what a sandbox says of the environment's packages when its pod does not run the
// environment's image (image is "": the Pool gave none, as on a server without --k8s-registry): "" when the
// environment lists none or the pod runs its image.
func packagesNote(pk *apitype.Packages, image string) string {
	if pk == nil || image != "" {
		return ""
	}
	var listed []string
	for _, m := range []struct {
		name string
		pkgs []string
	}{{"apt", pk.Apt}, {"cargo", pk.Cargo}, {"gem", pk.Gem}, {"go", pk.Go}, {"npm", pk.Npm}, {"pip", pk.Pip}} {
		if len(m.pkgs) > 0 {
			listed = append(listed, m.name+": "+strings.Join(m.pkgs, " "))
		}
	}
	if len(listed) == 0 {
		return ""
	}
	return "Note: the environment's packages were not installed (" + strings.Join(listed, "; ") +
		"): this sandbox runs on the operator's image as it is, which may or may not have them.\n"
}

// validLabel reports whether s can be a label value: 1 to 63 letters, digits, '-', '_' and '.', starting and
// ending with a letter or digit.
func validLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return true
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
