package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// The SDK worker child: TestMain runs it instead of the tests when sdkWorkerEnv is set, so that a test can
// SIGKILL a worker mid-tool-call.
const sdkWorkerEnv = "CORRAL_TEST_SDK_WORKER" // "url env_id key workdir worker_id"

// runSDKWorkerChild runs the official SDK's EnvironmentWorker until it is killed (or its work ends).
func runSDKWorkerChild(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 5 {
		fmt.Fprintln(os.Stderr, "bad", sdkWorkerEnv, spec)
		return 2
	}
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(f[0]), option.WithAPIKey("unused"))
	err := environments.NewEnvironmentWorker(client, environments.EnvironmentWorkerOptions{
		EnvironmentID: f[1], EnvironmentKey: f[2], Workdir: f[3], WorkerID: f[4],
	}).Run(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

// selfHostedEnv creates, through the SDK, an agent with the built-in toolset, a self_hosted environment and an
// environment key for it.
func selfHostedEnv(ctx context.Context, t testing.TB, client anthropic.Client, name string) (envID, key, agentID string) {
	t.Helper()
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: name, Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: name,
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}}})
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Key  string `json:"key"`
	}
	if err := client.Post(ctx, "v1/environments/"+env.ID+"/keys", map[string]string{"name": "e2e"}, &k); err != nil {
		t.Fatal(err)
	}
	if k.Type != "environment_key" || !strings.HasPrefix(k.Key, "corral-env-") {
		t.Fatalf("environment key answer %+v", k)
	}
	return env.ID, k.Key, agent.ID
}

// selfHostedSession creates what selfHostedEnv does, and a session of them.
func selfHostedSession(ctx context.Context, t *testing.T, client anthropic.Client, name string) (sess *anthropic.BetaManagedAgentsSession, envID, key string) {
	t.Helper()
	envID, key, agentID := selfHostedEnv(ctx, t, client, name)
	sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
		EnvironmentID: envID,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sess, envID, key
}

// workerServer starts `corral serve` with a work lease of ttl and a model scripted with turns, and returns it
// with an SDK client of it.
func workerServer(t testing.TB, ttl string, turns ...modeltest.Turn) (*server, anthropic.Client) {
	t.Helper()
	model := modeltest.NewServer(t)
	model.Script(turns...)
	s := startServer(t, t.TempDir(), model, "--work-lease-ttl", ttl)
	return s, anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
}

// runSDKWorker runs the official SDK's EnvironmentWorker in this process, in dir, until stop is called; stop
// returns what Run returned. tune, if given, sets further options of the worker.
func runSDKWorker(ctx context.Context, t testing.TB, client anthropic.Client, envID, key, dir, id string, maxIdle *time.Duration,
	tune ...func(*environments.EnvironmentWorkerOptions)) (stop func() error) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	logger := slog.New(slog.DiscardHandler)
	if tt, ok := t.(*testing.T); ok {
		logger = slog.New(slog.NewTextHandler(&testWriter{tt}, nil))
	}
	opts := environments.EnvironmentWorkerOptions{
		EnvironmentID: envID, EnvironmentKey: key, Workdir: dir, WorkerID: id, MaxIdle: maxIdle, Logger: logger,
	}
	for _, f := range tune {
		f(&opts)
	}
	go func() {
		done <- environments.NewEnvironmentWorker(client, opts).Run(wctx)
	}()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("the worker did not stop")
		}
	}
}

// turnLog is what a test saw of a session's stream until it idled with end_turn.
type turnLog struct {
	types   []string
	results map[string]string // tool_use_id -> the text of its user.tool_result
	uses    []string          // agent.tool_use ids, in order
	answer  string
}

// sendAndFollow sends a user message and reads the session's stream until it idles with end_turn.
func sendAndFollow(ctx context.Context, t *testing.T, client anthropic.Client, sessionID, text string) *turnLog {
	t.Helper()
	stream := client.Beta.Sessions.Events.StreamEvents(ctx, sessionID, anthropic.BetaSessionEventStreamParams{})
	defer stream.Close()
	if _, err := client.Beta.Sessions.Events.Send(ctx, sessionID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}}})},
	}); err != nil {
		t.Fatal(err)
	}
	l := &turnLog{results: map[string]string{}}
	for stream.Next() {
		ev := stream.Current()
		l.types = append(l.types, ev.Type)
		switch ev.Type {
		case "agent.tool_use":
			l.uses = append(l.uses, ev.ID)
		case "user.tool_result":
			var b strings.Builder
			for _, c := range ev.AsUserToolResult().Content {
				b.WriteString(c.Text)
			}
			l.results[ev.ToolUseID] = b.String()
		case "agent.tool_result":
			t.Errorf("agent.tool_result %s in a self-hosted session: the brain ran a tool itself", ev.ID)
		case "agent.message":
			for _, b := range ev.AsAgentMessage().Content {
				l.answer += b.Text
			}
		case "session.status_idle":
			if ev.AsSessionStatusIdle().StopReason.Type == "end_turn" {
				return l
			}
		}
	}
	t.Fatalf("stream ended before end_turn: %v (events %v)", stream.Err(), l.types)
	return nil
}

// TestSDKEnvironmentWorker: the official SDK's EnvironmentWorker, unmodified, runs a self-hosted session's tool
// on the worker's machine, and the session completes.
func TestSDKEnvironmentWorker(t *testing.T) {
	t.Parallel()
	_, client := workerServer(t, "10s",
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo corral-$((6*7)) > out.txt && cat out.txt"}`}}},
		modeltest.Turn{Text: "The file holds corral-42."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sess, envID, key := selfHostedSession(ctx, t, client, "sdk-worker")

	workdir := t.TempDir()
	stop := runSDKWorker(ctx, t, client, envID, key, workdir, "e2e-worker", nil)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()

	l := sendAndFollow(ctx, t, client, sess.ID, "Run it.")
	if len(l.uses) != 1 || !strings.Contains(l.results[l.uses[0]], "corral-42") || !strings.Contains(l.answer, "corral-42") {
		t.Fatalf("uses %v, results %v, answer %q; events %v", l.uses, l.results, l.answer, l.types)
	}
	// The tool ran on the worker side, in its directory.
	out, err := os.ReadFile(filepath.Join(workdir, "out.txt"))
	if err != nil || strings.TrimSpace(string(out)) != "corral-42" {
		t.Fatalf("out.txt in the worker's directory: %q, %v", out, err)
	}

	var st anthropic.BetaSelfHostedWorkQueueStats
	if err := client.Get(ctx, "v1/environments/"+envID+"/work/stats", nil, &st, option.WithAuthToken(key)); err != nil {
		t.Fatal(err)
	}
	if st.WorkersPolling < 1 || st.Depth != 0 {
		t.Errorf("stats %+v: want the worker polling and nothing waiting", st)
	}
}

// TestSDKWorkerKilled: a worker SIGKILLed mid-tool-call loses its lease; the call is settled as of unknown
// outcome, never run again; a second SDK worker takes the session over and runs the next call.
func TestSDKWorkerKilled(t *testing.T) {
	t.Parallel()
	s, client := workerServer(t, "8s",
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"touch started.txt && sleep 120"}`}}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo second > second.txt && cat second.txt"}`}}},
		modeltest.Turn{Text: "Done."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	sess, envID, key := selfHostedSession(ctx, t, client, "sdk-worker-killed")

	// The first worker, in its own process.
	dir1 := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe)
	child.Env = append(os.Environ(), sdkWorkerEnv+"="+strings.Join([]string{s.url, envID, key, dir1, "worker-1"}, " "))
	childLog := &lockedBuffer{}
	child.Stderr, child.Stdout = childLog, childLog
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = child.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("worker-1 log:\n%s", childLog.String())
		}
	})

	turn := make(chan *turnLog, 1)
	go func() { turn <- sendAndFollow(ctx, t, client, sess.ID, "Go.") }()

	// Once worker-1 runs the first call, kill it.
	for {
		if _, err := os.Stat(filepath.Join(dir1, "started.txt")); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("worker-1 never started the first call:\n%s", childLog.String())
		case <-exited:
			t.Fatalf("worker-1 exited:\n%s", childLog.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited

	// The second worker, in this process.
	dir2 := t.TempDir()
	stop := runSDKWorker(ctx, t, client, envID, key, dir2, "worker-2", nil)
	defer func() { _ = stop() }()

	var l *turnLog
	select {
	case l = <-turn:
	case <-ctx.Done():
		t.Fatal("the session did not complete after worker-1 was killed")
	}
	if len(l.uses) != 2 {
		t.Fatalf("tool uses %v; events %v", l.uses, l.types)
	}
	if r := l.results[l.uses[0]]; !strings.Contains(r, "outcome is unknown") {
		t.Errorf("the killed worker's call was answered %q, want the outcome-unknown rule", r)
	}
	if r := l.results[l.uses[1]]; !strings.Contains(r, "second") {
		t.Errorf("the second call was answered %q", r)
	}
	if _, err := os.Stat(filepath.Join(dir2, "started.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("worker-2 ran the killed worker's call again (started.txt: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, "second.txt")); err != nil {
		t.Errorf("worker-2 did not run the second call: %v", err)
	}
}

// testWriter sends a worker's log to the test log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startWorker runs `corral worker` for the environment with the bwrap backend; its workspaces are under data.
func startWorker(t *testing.T, s *server, envID, key, data, id string, uidBase int, idle time.Duration) *server {
	t.Helper()
	return startCorral(t, os.Environ(), "corral: worker ", "worker", "--url", s.url, "--env", envID, "--key", key,
		"--data", data, "--worker-id", id, "--sandbox", "bwrap", "--sandbox-uids", fmt.Sprint(uidBase),
		"--session-idle", idle.String())
}

// TestCorralWorker: `corral worker` runs a self-hosted session's tool in a bwrap sandbox on its machine (its own
// uid, its own workspace), and the session completes; a second worker shares the queue, and when the first is
// SIGKILLed mid-call the call is settled as of unknown outcome and the second runs the next one.
func TestCorralWorker(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	s, client := workerServer(t, "8s",
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo corral-$((6*7)) > out.txt && cat out.txt && id -u"}`}}},
		modeltest.Turn{Text: "The file holds corral-42."},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"touch started.txt && sleep 120"}`}}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo second > second.txt && cat second.txt"}`}}},
		modeltest.Turn{Text: "Done."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	// The environment and its key through the CLI.
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, &stdio{out: &out, err: &errb}, append(args, "--url", s.url, "--key", testKey)); code != 0 {
			t.Fatalf("corral %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	envID := cli("envs", "create", "--name", "corral-worker", "--self-hosted", "-q")
	key := cli("envs", "keys", "create", envID, "--name", "laptop", "-q")
	if !strings.HasPrefix(key, apitype.EnvironmentKeyPrefix) {
		t.Fatalf("envs keys create -q printed %q", key)
	}
	if list := cli("envs", "keys", "list", envID); !strings.Contains(list, "laptop") || !strings.Contains(list, key[len(key)-4:]) ||
		strings.Contains(list, key) {
		t.Fatalf("envs keys list (the hint, never the key):\n%s", list)
	}
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "corral-worker", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envID})
	if err != nil {
		t.Fatal(err)
	}

	data1 := t.TempDir()
	w1 := startWorker(t, s, envID, key, data1, "worker-1", 400000, time.Minute)
	l := sendAndFollow(ctx, t, client, sess.ID, "Run it.")
	if len(l.uses) != 1 || !strings.Contains(l.results[l.uses[0]], "corral-42") {
		t.Fatalf("uses %v, results %v; events %v", l.uses, l.results, l.types)
	}
	lines := strings.Fields(l.results[l.uses[0]])
	if uid := lines[len(lines)-1]; uid == "0" || uid == fmt.Sprint(os.Geteuid()) {
		t.Errorf("the tool ran as uid %s, not a sandbox uid of its own", uid)
	}
	out, err := os.ReadFile(filepath.Join(data1, "workspaces", sess.ID, "out.txt"))
	if err != nil || strings.TrimSpace(string(out)) != "corral-42" {
		t.Fatalf("out.txt in worker-1's workspace: %q, %v", out, err)
	}

	// Worker-2 joins the queue; worker-1 holds the session (its idle wait) and gets the next call.
	data2 := t.TempDir()
	w2 := startWorker(t, s, envID, key, data2, "worker-2", 410000, time.Second)
	turn := make(chan *turnLog, 1)
	go func() { turn <- sendAndFollow(ctx, t, client, sess.ID, "Go on.") }()
	started1 := filepath.Join(data1, "workspaces", sess.ID, "started.txt")
	started2 := filepath.Join(data2, "workspaces", sess.ID, "started.txt")
	var victim *server
	for victim == nil {
		if _, err := os.Stat(started1); err == nil {
			victim = w1
		}
		select {
		case <-ctx.Done():
			t.Fatal("no worker started the long call")
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := os.Stat(started2); err == nil {
			t.Fatal("worker-2 ran a call of the session worker-1 holds")
		}
	}
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case l = <-turn:
	case <-ctx.Done():
		t.Fatal("the session did not complete after worker-1 was killed")
	}
	if len(l.uses) != 2 || !strings.Contains(l.results[l.uses[0]], "outcome is unknown") || !strings.Contains(l.results[l.uses[1]], "second") {
		t.Fatalf("uses %v, results %v; events %v", l.uses, l.results, l.types)
	}
	if _, err := os.Stat(started2); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("worker-2 ran the killed worker's call again (started.txt: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(data2, "workspaces", sess.ID, "second.txt")); err != nil {
		t.Errorf("worker-2 did not run the second call: %v", err)
	}

	// A revoked key stops working at once: once worker-2 lets the idle session go, its next poll is refused and
	// it exits.
	var keys []apitype.EnvironmentKey
	if err := json.Unmarshal([]byte(cli("envs", "keys", "list", envID, "--json")), &keys); err != nil || len(keys) != 1 {
		t.Fatalf("envs keys list --json: %v %v", keys, err)
	}
	cli("envs", "keys", "revoke", envID, keys[0].ID)
	select {
	case <-w2.exited:
		if !strings.Contains(w2.stderr.String(), "401") {
			t.Errorf("worker-2 exited without saying why:\n%s", w2.stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("worker-2 kept running with a revoked key")
	}
}

// TestSDKWorkerSkills: the SDK's EnvironmentWorker downloads the session agent's skills with the item's sessions
// token (GET .../versions/{version} and .../content) into its skills directory, where the tool it runs reads them.
func TestSDKWorkerSkills(t *testing.T) {
	t.Parallel()
	_, client := workerServer(t, "10s",
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"cat skills/*/SKILL.md"}`}}},
		modeltest.Turn{Text: "I read the skill."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	envID, key, _ := selfHostedEnv(ctx, t, client, "sdk-worker-skills")
	skillMD := "---\nname: worker-notes\ndescription: Notes for the worker.\n---\n# Notes\nskill-body-marker\n"
	sk, err := client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: []io.Reader{
		anthropic.File(strings.NewReader(skillMD), "worker-notes/SKILL.md", "text/markdown"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "skilled-worker", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools:  []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
		Skills: []anthropic.BetaManagedAgentsSkillParamsUnion{{OfCustom: &anthropic.BetaManagedAgentsCustomSkillParams{SkillID: sk.ID}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envID})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSDKWorker(ctx, t, client, envID, key, t.TempDir(), "skills-worker", nil)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	l := sendAndFollow(ctx, t, client, sess.ID, "Read your skill.")
	if len(l.uses) != 1 || !strings.Contains(l.results[l.uses[0]], "skill-body-marker") {
		t.Fatalf("uses %v, results %v; events %v: want the skill's SKILL.md read on the worker", l.uses, l.results, l.types)
	}
}

// TestSDKWorkerMemory: the SDK's EnvironmentWorker, unmodified, downloads a self-hosted session's memory stores
// with its work item's sessions token to their mount paths (/mnt/memory/<slug>) on the worker's host, where the
// tool it runs reads and writes them; its sync after a tool call, once its interval has passed, writes the
// read_write store's new file back as the session (session_actor) while the session runs, and its final sync ends
// the session's memory; what the tool wrote in the read_only store's folder never reaches the server. The token
// the worker's memory calls carry reaches neither a store the session does not have nor a write to the read_only
// one, and dies with the work item.
func TestSDKWorkerMemory(t *testing.T) {
	t.Parallel()
	// The worker writes at the stores' mount paths on this very host: names unique to this run keep runs apart.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	rwName, roName := "E2E Notes "+run, "e2e facts "+run
	rwDir, roDir := apitype.MemoryMountPath(rwName, ""), apitype.MemoryMountPath(roName, "")
	if err := os.MkdirAll(apitype.MemoryMount, 0o755); err != nil {
		t.Fatalf("the SDK's EnvironmentWorker puts a session's memory stores under %s on the worker's host, and this "+
			"test runs it here: %s must be creatable (run the tests as root): %v", apitype.MemoryMount, apitype.MemoryMount, err)
	}
	// The worker removes the folders itself after its final sync; this is for a run that fails before. The
	// shared /mnt/memory stays: a concurrent run may be using it.
	t.Cleanup(func() {
		for _, d := range []string{rwDir, roDir} {
			if err := os.RemoveAll(d); err != nil {
				t.Errorf("remove %s: %v", d, err)
			}
		}
	})

	// The first call reads the seed and the fact, writes a note in the read_write store and tries two writes in
	// the read_only one, then waits for the test (which checks the token meanwhile) to let it end. The second
	// waits too, while the test sees the worker's interval sync (not yet its final one) write the note back.
	script := fmt.Sprintf(`cat %[1]s/notes/seed.md %[2]s/facts.md && printf 'note-from-the-worker\n' > %[1]s/notes/a.md && `+
		`{ echo sneaky > %[2]s/sneaky.md; echo edited >> %[2]s/facts.md; ls %[2]s; } && `+
		`until [ -e release ]; do sleep 0.1; done && echo released`, rwDir, roDir)
	input, err := json.Marshal(map[string]string{"command": script})
	if err != nil {
		t.Fatal(err)
	}
	s, client := workerServer(t, "10s",
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: string(input)}}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"until [ -e release2 ]; do sleep 0.1; done && echo released-2"}`}}},
		modeltest.Turn{Text: "Noted."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	envID, key, agentID := selfHostedEnv(ctx, t, client, "sdk-worker-memory")

	mem := client.Beta.MemoryStores.Memories
	newStore := func(name, path, content string) *anthropic.BetaManagedAgentsMemoryStore {
		t.Helper()
		st, err := client.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: path, Content: anthropic.String(content)}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	rw := newStore(rwName, "/notes/seed.md", "seed-memory-marker\n")
	ro := newStore(roName, "/facts.md", "fact-marker\n")
	elsewhere := newStore("e2e elsewhere "+run, "/secret.md", "secret\n")

	sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: rw.ID,
				Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadWrite}},
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: ro.ID,
				Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Resources) != 2 {
		t.Fatalf("session resources: %s", sess.RawJSON())
	}
	for i, want := range []struct{ id, access, mount string }{{rw.ID, "read_write", rwDir}, {ro.ID, "read_only", roDir}} {
		r := sess.Resources[i].AsMemoryStore()
		if sess.Resources[i].Type != "memory_store" || r.MemoryStoreID != want.id || string(r.Access) != want.access || r.MountPath != want.mount {
			t.Fatalf("resource %d: %s, want %s %s at %s", i, sess.Resources[i].RawJSON(), want.id, want.access, want.mount)
		}
	}

	// The worker's client records the credential of every memory call it makes.
	var (
		authMu  sync.Mutex
		memAuth = map[string]int{}
	)
	wclient := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url), option.WithAPIKey("unused"),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			if strings.HasPrefix(req.URL.Path, "/v1/memory_stores/") {
				authMu.Lock()
				memAuth[req.Header.Get("Authorization")]++
				authMu.Unlock()
			}
			return next(req)
		}))
	workdir := t.TempDir()
	idle := 2 * time.Second
	stop := runSDKWorker(ctx, t, wclient, envID, key, workdir, "memory-worker", &idle, func(o *environments.EnvironmentWorkerOptions) {
		o.MemorySyncInterval = environments.MinMemorySyncInterval
	})
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	turn := make(chan *turnLog, 1)
	go func() { turn <- sendAndFollow(ctx, t, client, sess.ID, "Take a note.") }()

	// The tool has written its note on the worker's host and waits.
	note := filepath.Join(rwDir, "notes", "a.md")
	for {
		if _, err := os.Stat(note); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the tool never wrote %s", note)
		case l := <-turn:
			t.Fatalf("the turn ended before the tool wrote %s: uses %v, results %v; events %v", note, l.uses, l.results, l.types)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The worker started its sync interval when its download ended, before it ran the tool that wrote the note:
	// the interval is measured from here, not from the message sent, which can precede the worker's claim by
	// seconds when the machine is loaded.
	started := time.Now()
	// Every memory call so far carried one credential: the work item's sessions token.
	authMu.Lock()
	var token string
	for a := range memAuth {
		token = strings.TrimPrefix(a, "Bearer ")
	}
	calls := len(memAuth)
	authMu.Unlock()
	if calls != 1 || !strings.HasPrefix(token, apitype.SessionsTokenPrefix) {
		t.Fatalf("the worker's memory calls carried %d credentials, want one sessions token (%s...)", calls, apitype.SessionsTokenPrefix)
	}
	withToken := func(method, path, body string) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// While its item runs, the token reads its session's stores, and nothing else.
	if status, body := withToken("GET", "/v1/memory_stores/"+rw.ID+"/memories", ""); status != http.StatusOK {
		t.Fatalf("the token lists its session's store: %d %s", status, body)
	}
	for _, c := range []struct{ what, method, path, body string }{
		{"list a store the session does not have", "GET", "/v1/memory_stores/" + elsewhere.ID + "/memories", ""},
		{"write in a store the session does not have", "POST", "/v1/memory_stores/" + elsewhere.ID + "/memories", `{"path":"/x.md","content":"x"}`},
		{"write in the read_only store", "POST", "/v1/memory_stores/" + ro.ID + "/memories", `{"path":"/x.md","content":"x"}`},
	} {
		if status, body := withToken(c.method, c.path, c.body); status != http.StatusForbidden || !strings.Contains(body, string(apitype.ErrPermission)) {
			t.Errorf("the sessions token may %s: %d %s", c.what, status, body)
		}
	}

	// Once the sync interval has passed, the first call may end: the worker's sync after it writes the note
	// back while the session still runs (the second call holds it).
	time.Sleep(time.Until(started.Add(environments.MinMemorySyncInterval + 100*time.Millisecond)))
	if err := os.WriteFile(filepath.Join(workdir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := mem.List(ctx, rw.ID, anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: anthropic.String("/notes/")})
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(m.Data, func(m anthropic.BetaManagedAgentsMemoryListItemUnion) bool { return m.Path == "/notes/a.md" }) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the worker's interval sync never wrote the note back")
		case l := <-turn:
			t.Fatalf("the turn ended before an interval sync: uses %v, results %v; events %v", l.uses, l.results, l.types)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := os.Stat(rwDir); err != nil {
		t.Fatalf("the store's folder went before the session's end: %v", err)
	}
	if err := os.WriteFile(filepath.Join(workdir, "release2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var l *turnLog
	select {
	case l = <-turn:
	case <-ctx.Done():
		t.Fatal("the session did not complete")
	}
	if len(l.uses) != 2 || !strings.Contains(l.results[l.uses[1]], "released-2") {
		t.Fatalf("tool uses %v, results %v; events %v", l.uses, l.results, l.types)
	}
	if r := l.results[l.uses[0]]; !strings.Contains(r, "seed-memory-marker") || !strings.Contains(r, "fact-marker") ||
		!strings.Contains(r, "sneaky.md") || !strings.Contains(r, "released") {
		t.Fatalf("the tool's result %q: want the seed and the fact read from the mounts, and the read_only write done", r)
	}

	// Once the session idles past MaxIdle the worker runs its final sync (with nothing left to write) and removes
	// the folders.
	for _, d := range []string{rwDir, roDir} {
		for {
			if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the worker never finished the session's memory: %s is still there", d)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	contents := func(storeID string) map[string]anthropic.BetaManagedAgentsMemoryListItemUnion {
		t.Helper()
		got := map[string]anthropic.BetaManagedAgentsMemoryListItemUnion{}
		it := mem.ListAutoPaging(ctx, storeID, anthropic.BetaMemoryStoreMemoryListParams{View: anthropic.BetaManagedAgentsMemoryViewFull})
		for it.Next() {
			got[it.Current().Path] = it.Current()
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		return got
	}
	versions := func(storeID string) []anthropic.BetaManagedAgentsMemoryVersion {
		t.Helper()
		page, err := client.Beta.MemoryStores.MemoryVersions.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryVersionListParams{})
		if err != nil {
			t.Fatal(err)
		}
		return page.Data
	}
	// The read_write store: the seed, and the note as the worker wrote it, by the session.
	got := contents(rw.ID)
	a, ok := got["/notes/a.md"]
	if len(got) != 2 || !ok || a.Content != "note-from-the-worker\n" || got["/notes/seed.md"].Content != "seed-memory-marker\n" {
		t.Fatalf("the read_write store after the worker's sync: %d memories, /notes/a.md %v %q", len(got), ok, a.Content)
	}
	v, err := client.Beta.MemoryStores.MemoryVersions.Get(ctx, a.MemoryVersionID, anthropic.BetaMemoryStoreMemoryVersionGetParams{MemoryStoreID: rw.ID})
	if err != nil {
		t.Fatal(err)
	}
	if v.CreatedBy.Type != "session_actor" || v.CreatedBy.SessionID != sess.ID || v.Operation != "created" {
		t.Errorf("the note's version: %s, want created by session_actor %s", v.RawJSON(), sess.ID)
	}
	if vs := versions(rw.ID); len(vs) != 2 {
		t.Errorf("the read_write store has %d versions, want the seed's and the note's", len(vs))
	}
	// The read_only store and the unattached one: as they were.
	for _, c := range []struct {
		id, path, content string
	}{{ro.ID, "/facts.md", "fact-marker\n"}, {elsewhere.ID, "/secret.md", "secret\n"}} {
		got := contents(c.id)
		if len(got) != 1 || got[c.path].Content != c.content {
			t.Errorf("store %s after the session: %d memories, %s %q", c.id, len(got), c.path, got[c.path].Content)
		}
		if vs := versions(c.id); len(vs) != 1 || vs[0].CreatedBy.Type == "session_actor" {
			t.Errorf("store %s has %d versions, want only its first", c.id, len(vs))
		}
	}

	// The token dies with its work item, which the worker stops once the session is done.
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, body := withToken("GET", "/v1/memory_stores/"+rw.ID+"/memories", "")
		if status == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sessions token still answers %d after the session ended: %s", status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
