package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox/cgroup"
)

func newTestServer(t *testing.T, confine bool) (*Server, string) {
	t.Helper()
	ws := t.TempDir()
	s := NewServer(Config{Workspace: ws, Env: []string{"PATH=/usr/bin:/bin"}, Confine: confine})
	t.Cleanup(s.Close)
	return s, ws
}

func handle(t *testing.T, s *Server, tool, input string) (string, bool) {
	t.Helper()
	resp := s.Handle(context.Background(), Request{Tool: tool, Input: json.RawMessage(input), OutputCap: 4096})
	var b strings.Builder
	for _, c := range resp.Content {
		b.WriteString(c.Text)
	}
	return b.String(), resp.IsError
}

func TestConfinedPaths(t *testing.T) {
	t.Parallel()
	s, ws := newTestServer(t, true)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tool, input string }{
		{"read", `{"file_path": "../` + filepath.Base(outside) + `/secret"}`},
		{"read", `{"file_path": "` + outside + `/secret"}`},
		{"read", `{"file_path": "link/secret"}`},
		{"write", `{"file_path": "link/new", "content": "x"}`},
		{"edit", `{"file_path": "link/secret", "old_string": "s", "new_string": "x"}`},
		{"grep", `{"pattern": "s3cret", "path": "link"}`},
	} {
		out, isErr := handle(t, s, tc.tool, tc.input)
		if !isErr || strings.Contains(out, "s3cret") || !strings.Contains(out, "outside") {
			t.Errorf("%s %s: %v %q", tc.tool, tc.input, isErr, out)
		}
	}
	// grep inside the workspace does not follow the symlink either.
	if out, _ := handle(t, s, "grep", `{"pattern": "s3cret"}`); out != "no matches" {
		t.Errorf("grep followed a symlink: %q", out)
	}
}

func TestReadRanges(t *testing.T) {
	t.Parallel()
	s, ws := newTestServer(t, false)
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte("1\n2\n3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ rng, want string }{
		{"[1, 1]", "1"}, {"[2, 0]", "2\n3\n"}, {"[3, 2]", ""}, {"[9, 10]", ""}, {"[0, 2]", "1\n2"},
	} {
		if out, isErr := handle(t, s, "read", `{"file_path": "f", "view_range": `+tc.rng+`}`); isErr || out != tc.want {
			t.Errorf("view_range %s: %v %q, want %q", tc.rng, isErr, out, tc.want)
		}
	}
	// A file past the whole-file cap is read by range only.
	big := bytes.Repeat([]byte("0123456789\n"), maxFileBytes/10)
	if err := os.WriteFile(filepath.Join(ws, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, isErr := handle(t, s, "read", `{"file_path": "big"}`); !isErr || !strings.Contains(out, "view_range") {
		t.Errorf("big file: %v %q", isErr, out)
	}
	if out, isErr := handle(t, s, "read", `{"file_path": "big", "view_range": [2, 3]}`); isErr || out != "0123456789\n0123456789" {
		t.Errorf("big file range: %v %q", isErr, out)
	}
	if out, isErr := handle(t, s, "read", `{"file_path": "/dev/zero"}`); !isErr || !strings.Contains(out, "not a regular file") {
		t.Errorf("device: %v %q", isErr, out)
	}
}

func TestBashOutputKeepsTail(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t, false)
	resp := s.Handle(context.Background(), Request{Tool: "bash", Input: json.RawMessage(`{"command": "seq 1 100000"}`), OutputCap: 100})
	out := resp.Content[0].Text
	if resp.IsError || !strings.HasSuffix(out, "100000") || !strings.Contains(out, "truncated") || len(out) > 200 {
		t.Errorf("capped bash output: %q", out)
	}
}

func TestBashTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	s, ws := newTestServer(t, false)
	start := time.Now()
	resp := s.Handle(context.Background(), Request{Tool: "bash", Input: json.RawMessage(`{"command": "(sleep 2; touch late) & sleep 5", "timeout_ms": 200}`)})
	// The answer says the command timed out, and came before the command could have ended by itself (sleep 5):
	// how soon after the 200 ms is the machine's load, not the agent's (a shell is started again first).
	if !resp.IsError || !strings.Contains(resp.Content[0].Text, "timed out") || time.Since(start) >= 5*time.Second {
		t.Fatalf("timeout: %+v after %s", resp, time.Since(start))
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(ws, "late")); err == nil {
		t.Error("a process of the timed-out command survived")
	}
}

func TestBashTimeoutCapped(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t, false)
	for _, in := range []string{`{"command": "true", "timeout_ms": 3600001}`, `{"command": "true", "timeout_ms": 0}`} {
		resp := s.Handle(context.Background(), Request{Tool: "bash", Input: json.RawMessage(in)})
		if !resp.IsError || !strings.Contains(resp.Content[0].Text, "at most 3600000") {
			t.Errorf("%s: %+v", in, resp)
		}
	}
	if resp := s.Handle(context.Background(), Request{Tool: "bash", Input: json.RawMessage(`{"command": "echo ok", "timeout_ms": 3600000}`)}); resp.IsError {
		t.Errorf("the maximum timeout is refused: %+v", resp)
	}
}

func TestServeProtocol(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t, false)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), inR, outW); outW.Close() }()
	go func() {
		_, _ = io.WriteString(inW, `{"id":1,"tool":"bash","input":{"command":"echo hi"}}`+"\n"+`not json`+"\n"+`{"id":2,"tool":"glob","input":{"pattern":"*"}}`+"\n")
	}()
	got := map[uint64]Response{}
	dec := json.NewDecoder(outR)
	for len(got) < 3 {
		var r Response
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		got[r.ID] = r
	}
	inW.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if r := got[1]; r.IsError || r.Content[0].Text != "hi" {
		t.Errorf("id 1: %+v", r)
	}
	if r := got[0]; !r.IsError || !strings.Contains(r.Content[0].Text, "invalid request") {
		t.Errorf("bad line: %+v", r)
	}
	if r := got[2]; r.IsError || r.Content[0].Text != "no matches" {
		t.Errorf("id 2: %+v", r)
	}
}

// TestServeEndsCallsWhenInputEnds: once the host's end of the pipe is gone (it closed it or died), the calls in
// flight are cancelled at once instead of running to their timeouts, so that a sandbox whose pid 1 is the agent
// dies with its server. Before, Serve waited for the hour-long command.
func TestServeEndsCallsWhenInputEnds(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t, false)
	inR, inW := io.Pipe()
	var out bytes.Buffer
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), inR, &out) }()
	if _, err := io.WriteString(inW, `{"id":1,"tool":"bash","input":{"command":"echo started; sleep 3600","timeout_ms":3600000}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	inW.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve still runs the call in flight a minute after its input ended")
	}
	if !strings.Contains(out.String(), "cancelled") {
		t.Errorf("the call in flight was not reported cancelled: %s", out.String())
	}
}

func FuzzToolInput(f *testing.F) {
	for _, s := range []string{`{}`, `{"file_path": "a", "view_range": [1, 2]}`, `{"pattern": "**/*"}`, `null`, `[1]`, `{"old_string": 1}`} {
		f.Add("read", s)
		f.Add("glob", s)
	}
	ws := f.TempDir()
	s := NewServer(Config{Workspace: ws, Confine: true})
	f.Fuzz(func(t *testing.T, tool, input string) {
		if tool == "bash" || tool == "write" || tool == "edit" {
			return // side effects
		}
		resp := s.Handle(context.Background(), Request{Tool: tool, Input: json.RawMessage(input)})
		if len(resp.Content) == 0 {
			t.Fatalf("no content for %s %q", tool, input)
		}
	})
}

func TestServeCancel(t *testing.T) {
	t.Parallel()
	s, ws := newTestServer(t, false)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), inR, outW); outW.Close() }()
	start := time.Now()
	go func() {
		_, _ = io.WriteString(inW, `{"id":7,"tool":"bash","input":{"command":"sleep 1; touch late"}}`+"\n")
		time.Sleep(200 * time.Millisecond)
		_, _ = io.WriteString(inW, `{"cancel":7}`+"\n")
	}()
	var resp Response
	if err := json.NewDecoder(outR).Decode(&resp); err != nil {
		t.Fatal(err)
	}
	if resp.ID != 7 || !resp.IsError || !strings.Contains(resp.Content[0].Text, "cancelled") || time.Since(start) > 3*time.Second {
		t.Errorf("cancelled call: %+v after %s", resp, time.Since(start))
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(ws, "late")); err == nil {
		t.Error("the cancelled command ran on")
	}
}

// TestLimitEvents: the agent reads its cgroup's event files as a container runtime mounts them, v1 (one
// directory per controller) or v2 (the group itself), and the host kit parses both.
func TestLimitEvents(t *testing.T) {
	write := func(root, name, content string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v1, v2 := t.TempDir(), t.TempDir()
	write(v1, "memory/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
	write(v1, "pids/pids.events", "max 7\n")
	write(v2, "memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n")
	write(v2, "pids.events", "max 1\n")
	for _, c := range []struct {
		root     string
		oom, max int
	}{{v1, 3, 7}, {v2, 2, 1}, {t.TempDir(), 0, 0}} {
		le := limitEvents(c.root)
		if got := cgroup.ParseEvents([]byte(le.Memory), []byte(le.Pids)); got.OOMKills != c.oom || got.PidsMax != c.max {
			t.Errorf("%s: %+v, want %d oom kills and %d refused forks", c.root, got, c.oom, c.max)
		}
	}
	srv := NewServer(Config{Workspace: t.TempDir()})
	defer srv.Close()
	resp := srv.Handle(context.Background(), Request{ID: 1, Tool: LimitEventsTool})
	if resp.IsError || len(resp.Content) != 1 || !strings.HasPrefix(resp.Content[0].Text, `{"memory":`) || resp.Limits != nil {
		t.Errorf("the tool's answer: %+v", resp)
	}
	// A call that asks for them gets the counters with its answer, as the tool gives them; one that does not,
	// none.
	var asked LimitEvents
	if err := json.Unmarshal([]byte(resp.Content[0].Text), &asked); err != nil {
		t.Fatal(err)
	}
	with := srv.Handle(context.Background(), Request{ID: 2, Tool: "bash", Input: json.RawMessage(`{"command":"echo hi"}`), Limits: true})
	if with.IsError || with.Limits == nil || *with.Limits != asked {
		t.Errorf("bash with limits: %+v (limits %+v), want the counters %+v", with, with.Limits, asked)
	}
	if without := srv.Handle(context.Background(), Request{ID: 3, Tool: "bash", Input: json.RawMessage(`{"command":"echo hi"}`)}); without.Limits != nil {
		t.Errorf("bash without limits: %+v", without.Limits)
	}
}
