package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/store"
)

// These tests run the real corral binary as a process: the contract outside tools rely on (flags, environment,
// signals) and the crash behaviour of rule 2 and 3, which only a real SIGKILL shows.

var binDir string

func TestMain(m *testing.M) {
	if spec := os.Getenv(sdkWorkerEnv); spec != "" {
		os.Exit(runSDKWorkerChild(spec))
	}
	if spec := os.Getenv(tunnelMCPEnv); spec != "" {
		os.Exit(runTunnelMCPChild(spec))
	}
	dir, err := os.MkdirTemp("", "corral-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		// Only corral, statically linked (gVisor needs that): serve copies itself into the data dir and runs as
		// the in-sandbox agent. With -trimpath, as cmd/corral-image builds it: the two builds share Go's cache.
		build := exec.Command("go", "build", "-trimpath", "-o", dir, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build corral:", err)
			return 1
		}
		return m.Run()
	}()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testKey = "corral-e2e-key"

// server is a running `corral serve`.
type server struct {
	t      testing.TB
	cmd    *exec.Cmd
	url    string
	stderr *lockedBuffer
	stdout *lockedBuffer
	exited chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// sandboxKind is the backend the e2e tests use: bwrap where it runs, else the unisolated process backend.
func sandboxKind() string {
	if _, err := exec.LookPath("bwrap"); err == nil && os.Geteuid() == 0 {
		return "bwrap"
	}
	return "process"
}

// startServer starts `corral serve` on the data dir and waits until it listens.
func startServer(t testing.TB, data string, model *modeltest.Server, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", data, "--sandbox", sandboxKind(),
		"--lease-ttl", "2s", "--poll", "200ms"}, extra...)
	return startCorral(t, serverEnv(model, testKey), "corral: listening on ", args...)
}

// serverEnv is the environment of a corral process: the model behind ANTHROPIC_BASE_URL and, when key is not
// empty, the server's API key.
func serverEnv(model *modeltest.Server, key string) []string {
	env := append(os.Environ(), "ANTHROPIC_API_KEY=test-model-key", "ANTHROPIC_BASE_URL="+model.URL)
	if key != "" {
		env = append(env, "CORRAL_API_KEY="+key)
	}
	return env
}

// flagValue is the value of flag name in args ("" if absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// detachMountsUnder detaches the mounts under dir (workspace images a killed server left), deepest first, so
// that the test's temporary directory can go; their loop devices go with their last user (autoclear).
func detachMountsUnder(t testing.TB, dir string) {
	if dir == "" {
		return
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mounts []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], abs+"/") {
			mounts = append(mounts, f[4])
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("detach %s: %v", m, err)
		}
	}
}

// startCorral runs the corral binary with the environment and waits for a stderr line that starts with ready;
// the rest of that line becomes s.url. The process is killed when the test ends.
func startCorral(t testing.TB, env []string, ready string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "corral"), args...)
	// Every server of the tests shares the machine's image cache: the base is built once (imagetest).
	// Their garbage collection is off: the cache holds the other tests' layers.
	cmd.Env = append(slices.Clip(env), "CORRAL_IMAGE_CACHE="+imagetest.CacheDir(), "CORRAL_IMAGE_GC=0")
	pr, pw := io.Pipe()
	s := &server{t: t, cmd: cmd, stderr: &lockedBuffer{}, stdout: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = io.MultiWriter(s.stderr, pw) // the buffer first: it holds a line by the time the reader sees it
	cmd.Stdout = s.stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(s.exited)
	}()
	t.Cleanup(func() {
		// A clean stop first: the server unmounts its sessions' workspace images. Then what a killed server
		// (a crash test's) left mounted under its data directory goes too.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-s.exited
		}
		detachMountsUnder(t, flagValue(args, "--data"))
		if t.Failed() {
			t.Logf("corral %s log:\n%s", args[0], s.stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), ready); ok {
				line <- rest
			}
		}
	}()
	select {
	case s.url = <-line:
	case <-s.exited:
		t.Fatalf("corral %s exited early:\n%s", args[0], s.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("corral %s did not start:\n%s", args[0], s.stderr.String())
	}
	return s
}

func (s *server) client() *client.Client {
	c, err := client.New(client.Config{BaseURL: s.url, APIKey: testKey})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// waitIdle polls the session's events until it is idle with a final stop reason, and returns the whole log.
func waitIdle(t *testing.T, c *client.Client, sessionID string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		events := listEvents(t, c, sessionID)
		if n := len(events); n > 0 {
			last := events[n-1]
			if last["type"] == "session.status_idle" {
				if sr, _ := last["stop_reason"].(map[string]any); sr["type"] != "requires_action" {
					return events
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s did not go idle; events: %v", sessionID, types(listEvents(t, c, sessionID)))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitModelCall waits until the model has received n requests and the session's log holds n
// span.model_request_start events: a brain sends a request while it appends its start, so a test that kills a
// brain mid-call waits for both before the kill.
func waitModelCall(ctx context.Context, t *testing.T, model *modeltest.Server, c *client.Client, sessionID string, n int) {
	t.Helper()
	if err := model.WaitRequests(ctx, n); err != nil {
		t.Fatal(err)
	}
	for count(listEvents(t, c, sessionID), "span.model_request_start") < n {
		select {
		case <-ctx.Done():
			t.Fatalf("session %s: no %d request starts in the log; events: %v", sessionID, n, types(listEvents(t, c, sessionID)))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func listEvents(t *testing.T, c *client.Client, sessionID string) []map[string]any {
	t.Helper()
	var all []map[string]any
	for ev, err := range c.Events(context.Background(), sessionID, nil) {
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(ev.Raw, &m); err != nil {
			t.Fatal(err)
		}
		all = append(all, m)
	}
	return all
}

func types(events []map[string]any) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i], _ = e["type"].(string)
	}
	return out
}

func count(events []map[string]any, typ string) int {
	n := 0
	for _, e := range events {
		if e["type"] == typ {
			n++
		}
	}
	return n
}

// newSession creates an agent with the built-in toolset, an environment and a session that starts with text.
func newSession(t *testing.T, c *client.Client, text string) string {
	t.Helper()
	ctx := context.Background()
	agent, err := c.AgentCreate(ctx, &client.AgentCreateParams{
		Name: "e2e", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}, System: "You are terse.",
		Tools: []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "e2e", Config: apitype.EnvConfig{Type: "cloud"}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.SessionCreate(ctx, &client.SessionCreateParams{
		Agent: client.AgentRef{ID: agent.ID}, EnvironmentID: env.ID, InitialEvents: []apitype.NewEvent{client.UserMessage(text)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID
}

// assertLogSound checks what every log must satisfy: unique ids, and no event doubled by a resumed brain.
func assertLogSound(t *testing.T, events []map[string]any) {
	t.Helper()
	seen := map[string]bool{}
	for _, e := range events {
		id, _ := e["id"].(string)
		if seen[id] {
			t.Errorf("event id %s appears twice", id)
		}
		seen[id] = true
	}
}

func TestServeToolTurn(t *testing.T) {
	t.Parallel()
	testToolTurn(t)
}

// TestServeToolTurnBackends runs the same turn on the other isolating backends.
func TestServeToolTurnBackends(t *testing.T) {
	t.Parallel()
	runsc := cmp.Or(os.Getenv("CORRAL_RUNSC"), "runsc")
	for _, b := range []struct {
		name      string
		available error
		args      []string
	}{
		{"oci", oci.Available("runc"), []string{"--sandbox", "oci"}},
		{"gvisor", oci.Available(runsc), []string{"--sandbox", "gvisor", "--runsc", runsc}},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			if os.Geteuid() != 0 {
				sandboxtest.Require(t, b.name, errors.New("sandboxes need root"))
			}
			sandboxtest.Require(t, b.name, b.available)
			testToolTurn(t, b.args...)
		})
	}
}

// testToolTurn: the model runs bash, the result holds corral-42, and the model's answer follows.
func testToolTurn(t *testing.T, serverArgs ...string) {
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo corral-$((6*7)) > out.txt && cat out.txt"}`}}},
		modeltest.Turn{Text: "The file says corral-42."},
	)
	data := t.TempDir()
	s := startServer(t, data, model, serverArgs...)
	c := s.client()
	id := newSession(t, c, "Write the answer to a file and show it.")
	events := waitIdle(t, c, id)
	assertLogSound(t, events)
	t.Cleanup(func() { assertWorkspaceRemovedOnDelete(t, s, data, id, model, serverArgs...) })

	var toolUse, toolResult, message int = -1, -1, -1
	for i, e := range events {
		switch e["type"] {
		case "agent.tool_use":
			toolUse = i
		case "agent.tool_result":
			toolResult = i
			b, _ := json.Marshal(e["content"])
			if !strings.Contains(string(b), "corral-42") || e["is_error"] == true {
				t.Errorf("tool result = %s (is_error %v), want corral-42", b, e["is_error"])
			}
		case "agent.message":
			message = i
		}
	}
	if !(toolUse >= 0 && toolUse < toolResult && toolResult < message) {
		t.Fatalf("want tool_use < tool_result < message, got %d %d %d in %v", toolUse, toolResult, message, types(events))
	}
	// The second model request carried the tool's output.
	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model got %d requests, want 2", len(reqs))
	}
	if body := string(reqs[1].Body); !strings.Contains(body, `"tool_result"`) || !strings.Contains(body, "corral-42") {
		t.Errorf("second model request lacks the tool result: %s", body)
	}
	if count(events, "span.sandbox_provision_start") != 1 {
		t.Errorf("want one sandbox provisioning span, got %v", types(events))
	}
}

func TestServeTextTurnProvisionsNothing(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	model.Script(modeltest.Turn{Text: "Hello."})
	data := t.TempDir()
	s := startServer(t, data, model)
	c := s.client()
	id := newSession(t, c, "Say hello.")
	events := waitIdle(t, c, id)
	want := []string{"user.message", "session.status_running", "span.model_request_start", "agent.message", "span.model_request_end", "session.usage", "session.status_idle"}
	if got := types(events); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("events = %v, want %v", got, want)
	}
	if entries, _ := os.ReadDir(filepath.Join(data, "workspaces")); len(entries) != 0 {
		t.Errorf("a text-only session created %d workspaces", len(entries))
	}
}

// assertWorkspaceRemovedOnDelete deletes the session through the API, restarts the server (which sweeps at
// start) and checks that the session's workspace, which held out.txt, is gone.
func assertWorkspaceRemovedOnDelete(t *testing.T, s *server, data, id string, model *modeltest.Server, serverArgs ...string) {
	ws := filepath.Join(data, "workspaces", id)
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || strings.TrimSpace(string(b)) != "corral-42" {
		t.Errorf("workspace out.txt = %q, %v", b, err)
	}
	if _, err := s.client().SessionDelete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	startServer(t, data, model, serverArgs...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := os.Stat(ws)
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace of the deleted session remains: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeCrashMidModelCall kills `corral serve` with SIGKILL while the model is answering, starts it again on
// the same data, and expects the session to finish with exactly one user and one agent message.
func TestServeCrashMidModelCall(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	hold := make(chan struct{})
	defer close(hold)
	model.Script(modeltest.Turn{Text: "partial answer that never completes", Hold: hold})
	data := t.TempDir()
	s := startServer(t, data, model)
	id := newSession(t, s.client(), "Tell me something.")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitModelCall(ctx, t, model, s.client(), id, 1)
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited

	model.Script(modeltest.Turn{Text: "The complete answer."})
	killed := time.Now()
	s2 := startServer(t, data, model)
	events := waitIdle(t, s2.client(), id)
	t.Logf("resumed and finished %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	assertOneTurn(t, events, "The complete answer.")
	assertCrashRecovered(t, events)
}

// assertOneTurn checks a log that a crash or a handover went through: sound, with exactly one user message and
// one agent message, which holds want.
func assertOneTurn(t *testing.T, events []map[string]any, want string) {
	t.Helper()
	assertLogSound(t, events)
	if n := count(events, "user.message"); n != 1 {
		t.Errorf("%d user messages, want 1: %v", n, types(events))
	}
	if n := count(events, "agent.message"); n != 1 {
		t.Fatalf("%d agent messages, want 1: %v", n, types(events))
	}
	for _, e := range events {
		if e["type"] == "agent.message" {
			if b, _ := json.Marshal(e["content"]); !strings.Contains(string(b), want) {
				t.Errorf("agent message = %s, want %q in it", b, want)
			}
		}
	}
}

// TestServeSIGTERM: a graceful stop exits 0 and hands a running session over without waiting for its lease.
func TestServeSIGTERM(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	hold := make(chan struct{})
	defer close(hold)
	model.Script(modeltest.Turn{Text: "held", Hold: hold})
	data := t.TempDir()
	s := startServer(t, data, model, "--lease-ttl", "30s")
	id := newSession(t, s.client(), "Hi.")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := model.WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("corral serve did not exit after SIGTERM")
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	// The lease (30 s) was released, and the session left runnable: another brain can claim it at once.
	st, err := openStore(ctx, "sqlite://"+filepath.Join(data, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	leases, err := st.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "probe", TTL: time.Second, SessionID: id})
	if err != nil {
		t.Fatalf("claim after SIGTERM: %v (the lease was not released, or the session not left runnable)", err)
	}
	if err := st.LeaseRelease(ctx, &store.Lease{SessionID: id, Owner: "probe", Token: leases[0].Token, WakeSeq: 0}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	model.Script(modeltest.Turn{Text: "Resumed."})
	s2 := startServer(t, data, model, "--lease-ttl", "30s")
	events := waitIdle(t, s2.client(), id)
	assertOneTurn(t, events, "Resumed.")
	if n := count(events, "session.error"); n != 0 {
		t.Errorf("a turn handed back by a graceful stop resumed with %d session.error, want none: %v", n, types(events))
	}
}

// assertCrashRecovered checks that the log says a brain resumed the turn after another crashed: one
// session.error whose source is the brain, crash_recovered.
func assertCrashRecovered(t *testing.T, events []map[string]any) {
	t.Helper()
	n := 0
	for _, e := range events {
		if e["type"] != "session.error" {
			continue
		}
		n++
		b, _ := json.Marshal(e["error"])
		var body apitype.SessionErrorBody
		_ = json.Unmarshal(b, &body)
		want := apitype.FailureSource{Component: apitype.ComponentBrain, Reason: apitype.ReasonCrashRecovered}
		if body.Source == nil || *body.Source != want {
			t.Errorf("session.error after the crash = %s, want source %+v", b, want)
		}
	}
	if n != 1 {
		t.Errorf("%d session.error events after the crash, want 1: %v", n, types(events))
	}
}
