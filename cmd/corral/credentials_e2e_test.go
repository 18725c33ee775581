package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/vault"
)

// These tests take issue 10's credential path end to end through the real binary: `corral serve` with a real
// sandbox (the push and the injection on each isolating backend) and the operator's trusted destinations
// (--egress-allow-internal, --egress-ca-file), real git and HTTPS servers over TLS on 127.0.0.1, the official
// SDK as the client, and the fake model driving bash. Each then searches everything the API, the session log,
// the model, the server's output and the data directory can show for the secrets and the master keys.

// requireBwrap skips (or, when CORRAL_REQUIRE_SANDBOXES names bwrap, as CI sets it, fails) without a usable
// bwrap: the credential path must be tested inside a real sandbox.
func requireBwrap(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		sandboxtest.Require(t, "bwrap", errors.New("the bwrap backend needs root"))
	}
	sandboxtest.Require(t, "bwrap", bwrap.Available(""))
}

// isolatingBackends runs test as a parallel subtest per isolating backend (bwrap, oci, gvisor) with the serve
// flags that select it; a backend that cannot run here is skipped, or fails when CORRAL_REQUIRE_SANDBOXES
// names it (sandboxtest.Require).
func isolatingBackends(t *testing.T, test func(t *testing.T, sandboxArgs []string)) {
	runsc := findRunsc(os.Getenv("CORRAL_RUNSC")) // as serve finds it: on PATH, else the install location
	for _, b := range []struct {
		name      string
		available func() error
		args      []string
	}{
		{"bwrap", func() error { return bwrap.Available("") }, []string{"--sandbox", "bwrap"}},
		{"oci", func() error { return oci.Available("runc") }, []string{"--sandbox", "oci"}},
		{"gvisor", func() error { return oci.Available(runsc) }, []string{"--sandbox", "gvisor", "--runsc", runsc}},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			if os.Geteuid() != 0 {
				sandboxtest.Require(t, b.name, errors.New("sandboxes need root"))
			}
			sandboxtest.Require(t, b.name, b.available())
			test(t, b.args)
		})
	}
}

// secretString returns prefix with 32 random hex digits: a secret no other output can hold by chance.
func secretString(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// writePEM writes a CA file for --egress-ca-file.
func writePEM(t *testing.T, pemData []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pemData, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sdkClient(s *server) anthropic.Client {
	return anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
}

// bashTurn is a model turn that runs command with bash.
func bashTurn(t *testing.T, command string) modeltest.Turn {
	t.Helper()
	in, err := json.Marshal(map[string]any{"command": command, "timeout_ms": 120000})
	if err != nil {
		t.Fatal(err)
	}
	return modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: string(in)}}}
}

// sdkAgentEnv creates through the SDK an agent with the built-in toolset and an environment of cfg.
func sdkAgentEnv(ctx context.Context, t *testing.T, c anthropic.Client, cfg anthropic.BetaEnvironmentNewParamsConfigUnion) (agentID, envID string) {
	t.Helper()
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "credentials", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "credentials", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return agent.ID, env.ID
}

// sendAndWait sends a user message through the SDK and waits, listing the events through the SDK, until the
// session is idle with end_turn. It returns the events and their raw JSON.
func sendAndWait(ctx context.Context, t *testing.T, c anthropic.Client, sessionID, text string) ([]anthropic.BetaManagedAgentsSessionEventUnion, string) {
	t.Helper()
	before, _ := sdkEvents(ctx, t, c, sessionID)
	if _, err := c.Beta.Sessions.Events.Send(ctx, sessionID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}}})},
	}); err != nil {
		t.Fatal(err)
	}
	// The idle that ends this turn follows the message sent, not the one that ended the previous turn.
	return waitEndTurnAfter(ctx, t, c, sessionID, len(before)+1)
}

// waitEndTurnAfter waits, listing the events through the SDK, until the session has more than n events and is
// idle with end_turn (another stop reason than requires_action fails the test), and returns the events and
// their raw JSON.
func waitEndTurnAfter(ctx context.Context, t *testing.T, c anthropic.Client, sessionID string, n int) ([]anthropic.BetaManagedAgentsSessionEventUnion, string) {
	t.Helper()
	for {
		events, raw := sdkEvents(ctx, t, c, sessionID)
		if k := len(events); k > n && events[k-1].Type == "session.status_idle" {
			if r := events[k-1].AsSessionStatusIdle().StopReason.Type; r != "requires_action" {
				if r != "end_turn" {
					t.Fatalf("idle with %q: %s", r, raw)
				}
				return events, raw
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s did not go idle: %s", sessionID, raw)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sdkEvents lists every event of the session through the SDK, with the raw JSON of each.
func sdkEvents(ctx context.Context, t *testing.T, c anthropic.Client, sessionID string) ([]anthropic.BetaManagedAgentsSessionEventUnion, string) {
	t.Helper()
	var events []anthropic.BetaManagedAgentsSessionEventUnion
	var raw strings.Builder
	iter := c.Beta.Sessions.Events.ListAutoPaging(ctx, sessionID, anthropic.BetaSessionEventListParams{})
	for iter.Next() {
		ev := iter.Current()
		events = append(events, ev)
		raw.WriteString(ev.RawJSON())
		raw.WriteByte('\n')
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return events, raw.String()
}

// toolOutput is what one agent.tool_result showed the model.
type toolOutput struct {
	text    string   // the text blocks, joined
	blocks  []string // each text block
	isError bool
}

// toolResults returns the agent.tool_result events in order.
func toolResults(events []anthropic.BetaManagedAgentsSessionEventUnion) []toolOutput {
	var out []toolOutput
	for _, ev := range events {
		if ev.Type != "agent.tool_result" {
			continue
		}
		r := ev.AsAgentToolResult()
		var blocks []string
		for _, b := range r.Content {
			blocks = append(blocks, b.Text)
		}
		out = append(out, toolOutput{strings.Join(blocks, ""), blocks, r.IsError})
	}
	return out
}

// rawGET returns the body of an authenticated GET of the API path (200 required).
// metricsText is what the server's /metrics (--metrics-listen) serves; it fails the test if the server names no
// metrics address or serves no corral metric.
func metricsText(t *testing.T, s *server) string {
	t.Helper()
	_, after, ok := strings.Cut(s.stderr.String(), "corral: metrics on ")
	if !ok {
		t.Fatalf("the server names no metrics address:\n%s", s.stderr.String())
	}
	u, _, _ := strings.Cut(after, "\n")
	resp, err := http.Get(strings.TrimSpace(u))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("corral_turns_total")) {
		t.Fatalf("GET %s: %d %v\n%.2000s", u, resp.StatusCode, err, b)
	}
	return string(b)
}

func rawGET(t *testing.T, s *server, path string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", testKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("anthropic-beta", "managed-agents-2026-04-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b)
}

// dataDirFiles returns the contents of every regular file under dir (the SQLite database and its WAL, the
// vault's key file, the CA file, the workspaces), by path.
func dataDirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := readAllocated(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		files[p] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readAllocated reads what file p holds, leaving out its holes and its 64 KiB blocks of zeros. A workspace's
// image is a sparse file of gigabytes (4 GiB by default) of which a few MiB hold data: read whole, a few of them
// took the test binary past 20 GiB and into the kernel's OOM killer.
func readAllocated(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fd := int(f.Fd())
	var out []byte
	buf := make([]byte, 64<<10)
	for off := int64(0); ; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return out, nil // no data after off
		}
		if err != nil {
			return nil, err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		for pos := data; pos < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			if n > 0 && slices.ContainsFunc(buf[:n], func(c byte) bool { return c != 0 }) {
				out = append(out, buf[:n]...)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					return out, nil
				}
				return nil, err
			}
			pos += int64(n)
		}
		off = hole
	}
}

// assertNowhere fails for every place (by label) whose content holds one of the forbidden strings (by label).
func assertNowhere(t *testing.T, places map[string]string, forbidden map[string]string) {
	t.Helper()
	for place, content := range places {
		if content == "" {
			t.Errorf("%s is empty: the search would be vacuous", place)
		}
		for label, s := range forbidden {
			if strings.Contains(content, s) {
				t.Errorf("%s holds %s", place, label)
			}
		}
	}
}

// TestPrivateRepositoryPush: a session with a private github_repository resource is cloned on the host; from
// bash in the sandbox (bwrap, oci, gvisor) the agent commits and pushes through the git endpoint, and the commit arrives
// upstream. Once the server revokes the token the push fails with a clear message; after the new token is
// given to the API (the resource's update), the push goes through, and again after `corral vault rotate-key`
// and a restart on the new master key alone. Neither token nor master key is in any event, API answer, model
// request, log line or file of the data directory (the workspace's .git/config included), nor in the sandbox's
// environment.
func TestPrivateRepositoryPush(t *testing.T) {
	t.Parallel()
	isolatingBackends(t, testPrivateRepositoryPush)
}

func testPrivateRepositoryPush(t *testing.T, sandboxArgs []string) {
	token := secretString("ghp_e2eToken")
	srv := sandboxtest.NewGitServer(t, token)
	repoURL := srv.NewRepo(t, "o/proj")

	const mount = "/workspace/repo"
	model := modeltest.NewServer(t)
	// The sandbox's environment is printed too: it must not hold the token either.
	model.Script(
		bashTurn(t, "cd "+mount+" && git config user.email a@b && git config user.name a && echo hi > f && "+
			"git add f && git commit -q -m e2e && git push -q origin HEAD:main 2>&1 && echo pushed-ok && git remote get-url origin && env"),
		modeltest.Turn{Text: "Pushed."},
		// After the token is revoked upstream: the push fails.
		bashTurn(t, "cd "+mount+" && echo again >> f && git commit -q -am e2e-rotated && "+
			"GIT_TERMINAL_PROMPT=0 git push -q origin HEAD:main 2>&1"),
		modeltest.Turn{Text: "The push was refused."},
		// After the new token is given to the API: the same commit goes through.
		bashTurn(t, "cd "+mount+" && GIT_TERMINAL_PROMPT=0 git push -q origin HEAD:main 2>&1 && echo pushed-again"),
		modeltest.Turn{Text: "Pushed again."},
		// After a restart on a rotated master key: the workspace's clone is used as it is, and pushes.
		bashTurn(t, "cd "+mount+" && echo third >> f && git commit -q -am e2e-after-restart && "+
			"GIT_TERMINAL_PROMPT=0 git push -q origin HEAD:main 2>&1 && echo pushed-after-restart"),
		modeltest.Turn{Text: "Pushed after the restart."},
	)
	data := t.TempDir()
	serverArgs := append(sandboxArgs, "--egress-allow-internal", srv.HostPort, "--egress-ca-file", writePEM(t, srv.CAPEM),
		"--metrics-listen", "127.0.0.1:0")
	s := startServer(t, data, model, serverArgs...)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The environment reaches only the git server's host (and the git endpoint, which is the sandbox's own).
	agentID, envID := sdkAgentEnv(ctx, t, c, anthropic.BetaEnvironmentNewParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{
		Networking: anthropic.BetaCloudConfigParamsNetworkingUnion{OfLimited: &anthropic.BetaLimitedNetworkParams{AllowedHosts: []string{"127.0.0.1"}}},
	}})
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
		EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{
			URL: repoURL, AuthorizationToken: token, MountPath: anthropic.String(mount),
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Resources) != 1 || sess.Resources[0].Type != "github_repository" || sess.Resources[0].MountPath != mount {
		t.Fatalf("session resources: %s", sess.RawJSON())
	}
	resID := sess.Resources[0].ID

	events, _ := sendAndWait(ctx, t, c, sess.ID, "Commit a file and push it.")
	results := toolResults(events)
	if len(results) != 1 {
		t.Fatalf("%d tool results, want 1", len(results))
	}
	out, isErr := results[0].text, results[0].isError
	want := "pushed-ok\nhttp://" + sandbox.LocalHost + "/git/" + resID + "\n"
	if isErr || !strings.HasPrefix(out, want) || !strings.Contains(out, "\nPATH=") {
		t.Errorf("tool result %q (is_error %v), want %q and the environment", out, isErr, want)
	}
	if log := srv.Log(t, "o/proj", "main"); !strings.HasPrefix(log, "e2e\n") {
		t.Errorf("upstream main: %q, want the sandbox's commit on top", log)
	}

	// Revocation: the server stops accepting the token; the push fails with a clear message and git asks for
	// no credentials.
	rotated := secretString("ghp_e2eRotated")
	srv.SetToken(rotated)
	events, _ = sendAndWait(ctx, t, c, sess.ID, "Commit again and push.")
	results = toolResults(events)
	if len(results) != 2 || !results[1].isError || !strings.Contains(results[1].text, "refused the session's token") ||
		strings.Contains(results[1].text, "Username") {
		t.Errorf("push with the revoked token: %+v", results)
	}
	// Rotation: the API gets the new token (POST .../resources/{id}), and the push from the same workspace
	// goes through with it.
	upd, err := c.Beta.Sessions.Resources.Update(ctx, resID, anthropic.BetaSessionResourceUpdateParams{SessionID: sess.ID, AuthorizationToken: rotated})
	if err != nil {
		t.Fatal(err)
	}
	events, _ = sendAndWait(ctx, t, c, sess.ID, "Push again.")
	results = toolResults(events)
	if len(results) != 3 || results[2].isError || strings.TrimSpace(results[2].text) != "pushed-again" {
		t.Errorf("push after the rotation: %+v", results)
	}
	if log := srv.Log(t, "o/proj", "main"); !strings.HasPrefix(log, "e2e-rotated\ne2e\n") {
		t.Errorf("upstream main after the rotation: %q", log)
	}

	// `corral vault rotate-key` (the token's data key rewrapped), then a restart on the new master key alone.
	metrics := metricsText(t, s)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	rot := rotateVaultKey(t, data, 1)
	s2 := startServer(t, data, model, append(serverArgs, "--vault-key-file", rot.newKeyFile)...)
	c = sdkClient(s2)
	events, rawEvents := sendAndWait(ctx, t, c, sess.ID, "Commit once more and push.")
	results = toolResults(events)
	if len(results) != 4 || results[3].isError || strings.TrimSpace(results[3].text) != "pushed-after-restart" {
		t.Errorf("push after the restart: %+v", results)
	}
	for _, ev := range events {
		if ev.Type == "session.error" {
			t.Errorf("session.error: %s", ev.RawJSON())
		}
	}
	if log := srv.Log(t, "o/proj", "main"); !strings.HasPrefix(log, "e2e-after-restart\ne2e-rotated\ne2e\n") {
		t.Errorf("upstream main after the restart: %q", log)
	}

	// The workspace's git config on the host: origin is the git endpoint, and no token.
	ws := filepath.Join(data, "workspaces", sess.ID)
	gitConfig, err := os.ReadFile(filepath.Join(ws, "repo", ".git", "config"))
	if err != nil {
		t.Fatalf("the repository's .git/config in the workspace: %v", err)
	}
	if !strings.Contains(string(gitConfig), "http://"+sandbox.LocalHost+"/git/"+resID) {
		t.Errorf("the workspace's origin is not the git endpoint:\n%s", gitConfig)
	}

	places := map[string]string{
		"the server's metrics":               metrics,
		"the restarted server's metrics":     metricsText(t, s2),
		"the session's events (SDK)":         rawEvents,
		"the session create response":        sess.RawJSON(),
		"the resource update response":       upd.RawJSON(),
		"GET /v1/sessions/{id}":              rawGET(t, s2, "/v1/sessions/"+sess.ID),
		"GET /v1/sessions/{id}/events":       rawGET(t, s2, "/v1/sessions/"+sess.ID+"/events"),
		"GET /v1/sessions/{id}/resources":    rawGET(t, s2, "/v1/sessions/"+sess.ID+"/resources"),
		"GET /v1/sessions/{id}/resources/id": rawGET(t, s2, "/v1/sessions/"+sess.ID+"/resources/"+resID),
		"the server's stderr":                s.stderr.String(),
		"the restarted server's stderr":      s2.stderr.String(),
		"the output of rotate-key":           rot.output,
		"the workspace's .git/config":        string(gitConfig),
	}
	if stdout := s.stdout.String() + s2.stdout.String(); stdout != "" {
		places["the servers' stdout"] = stdout
	}
	for i, r := range model.Requests() {
		places[fmt.Sprintf("model request %d", i+1)] = string(r.Body)
	}
	for p, b := range dataDirFiles(t, data) {
		if len(b) > 0 {
			places[p] = string(b)
		}
	}
	assertNowhere(t, places, map[string]string{
		"the token":                           token,
		"the token's Basic auth form":         base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token)),
		"the rotated token":                   rotated,
		"the rotated token's Basic auth form": base64.StdEncoding.EncodeToString([]byte("x-access-token:" + rotated)),
		"the old master key":                  rot.oldKey,
		"the new master key":                  rot.newKey,
	})
	// On a cluster: nor in any of its objects or files (the pods' volumes included).
	assertClusterClean(t, sandboxArgs, map[string]string{"the token": token, "the rotated token": rotated})
	// The search is not vacuous: the model saw the tool's output.
	if reqs := model.Requests(); len(reqs) != 8 || !strings.Contains(string(reqs[1].Body), "pushed-ok") || !strings.Contains(string(reqs[7].Body), "pushed-after-restart") {
		t.Errorf("the model's requests lack the tool results (%d requests)", len(reqs))
	}
}

// rotation is what rotateVaultKey did.
type rotation struct {
	newKeyFile     string // holds the new master key alone
	oldKey, newKey string // encoded
	output         string // of corral vault rotate-key
}

// rotateVaultKey runs `corral vault rotate-key` on the stopped server's data directory, which must rewrap
// the secrets' data keys and the egress CA's key, writes the new master key alone to a file, and removes the old key
// file from the data directory: a server started on the new file can then only use the new key.
func rotateVaultKey(t *testing.T, data string, secrets int) rotation {
	t.Helper()
	oldKeys, err := vault.ReadKeyFile(filepath.Join(data, vault.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(t.TempDir(), "rotated.key")
	cmd := exec.Command(filepath.Join(binDir, "corral"), "vault", "rotate-key", "--data", data, "--new-key-file", both)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rotate-key: %v\n%s", err, out)
	}
	keys, err := vault.ReadKeyFile(both)
	if err != nil || len(keys) != 2 {
		t.Fatalf("the rotated key file: %v, %d keys", err, len(keys))
	}
	if want := fmt.Sprintf("rewrapped %d data keys under master key %s", secrets, keys[0].ID()); !strings.Contains(string(out), want) ||
		!strings.Contains(string(out), "rewrapped the egress CA key") {
		t.Fatalf("rotate-key output %q, want %q and the CA rewrapped", out, want)
	}
	only := filepath.Join(t.TempDir(), "new.key")
	if err := vault.WriteKeyFile(only, keys[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(data, vault.KeyFileName)); err != nil {
		t.Fatal(err)
	}
	return rotation{newKeyFile: only, oldKey: oldKeys[0].Encode(), newKey: keys[0].Encode(), output: string(out)}
}

// authRecorder is an HTTPS upstream that records the Authorization headers and the bodies it receives.
type authRecorder struct {
	mu   sync.Mutex
	auth []string
	body []string
}

func (a *authRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.auth = append(a.auth, r.Header.Get("Authorization"))
	a.body = append(a.body, string(b))
	a.mu.Unlock()
	io.WriteString(w, "upstream-ok\n")
}

func (a *authRecorder) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.auth...)
}

func (a *authRecorder) bodies() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.body...)
}

// TestSecretInjectedAtEgress: an environment_variable credential of the session's vault, limited to 127.0.0.1,
// reaches the sandbox (bwrap, oci, gvisor) as a placeholder; the egress proxy (terminating TLS under the
// server's CA, which the sandbox trusts) replaces it on a request to 127.0.0.1 only; the same placeholder sent to
// another host (localhost: the same machine, not an allowed host) arrives unreplaced. A session naming a vault that does not
// exist or is archived is refused. After `corral vault rotate-key` and a restart on the new master key alone
// (the secrets and the CA's key rewrapped), the secret is injected as before, and a second credential with
// injection_location.body is replaced in a request body where the header-only one is not. No secret or master
// key is in any tool result, event, API answer or error, model request, log line or file of the data directory.
//
// The credential's allowed_hosts take bare hosts (no port), so the second server is reached by another name,
// localhost; it is not intercepted, so curl verifies it itself and is told not to (-k: its certificate is the
// test's own). Both are on the host's loopback, which the sandbox's no_proxy names (127.0.0.1 and localhost
// are the sandbox's own loopback to it), so curl is told to use the proxy anyway (an empty --noproxy and -x).
func TestSecretInjectedAtEgress(t *testing.T) {
	t.Parallel()
	isolatingBackends(t, testSecretInjectedAtEgress)
}

func testSecretInjectedAtEgress(t *testing.T, sandboxArgs []string) {
	secret := secretString("e2e-secret-value-")
	bodySecret := secretString("e2e-body-secret-")
	var allowedRec, otherRec authRecorder
	allowed := httptest.NewTLSServer(&allowedRec)
	t.Cleanup(allowed.Close)
	other := httptest.NewTLSServer(&otherRec)
	t.Cleanup(other.Close)
	allowedAddr := strings.TrimPrefix(allowed.URL, "https://")
	_, otherPort, err := net.SplitHostPort(strings.TrimPrefix(other.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: allowed.Certificate().Raw})

	curl := `curl -sS --max-time 30 --noproxy '' -x "$http_proxy" `
	model := modeltest.NewServer(t)
	model.Script(
		bashTurn(t, curl+`-H "Authorization: Bearer $MY_TOKEN" https://`+allowedAddr+`/; `+
			curl+`-k -H "Authorization: Bearer $MY_TOKEN" https://localhost:`+otherPort+`/; echo "env=$MY_TOKEN"; env`),
		modeltest.Turn{Text: "Done."},
	)
	data := t.TempDir()
	serverArgs := append(sandboxArgs, "--egress-allow-internal", allowedAddr+",localhost:"+otherPort,
		"--egress-ca-file", writePEM(t, ca), "--metrics-listen", "127.0.0.1:0")
	s := startServer(t, data, model, serverArgs...)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	vlt, err := c.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := c.Beta.Vaults.Credentials.New(ctx, vlt.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfEnvironmentVariable: &anthropic.BetaManagedAgentsEnvironmentVariableCreateParams{
			SecretName: "MY_TOKEN", SecretValue: secret,
			Networking: anthropic.BetaManagedAgentsCredentialNetworkingParamsUnion{
				OfLimited: &anthropic.BetaManagedAgentsLimitedCredentialNetworkingParams{AllowedHosts: []string{"127.0.0.1"}},
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A second credential is replaced in request bodies too (MY_TOKEN, by default, in headers only).
	bodyCred, err := c.Beta.Vaults.Credentials.New(ctx, vlt.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfEnvironmentVariable: &anthropic.BetaManagedAgentsEnvironmentVariableCreateParams{
			SecretName: "MY_BODY_TOKEN", SecretValue: bodySecret,
			Networking: anthropic.BetaManagedAgentsCredentialNetworkingParamsUnion{
				OfLimited: &anthropic.BetaManagedAgentsLimitedCredentialNetworkingParams{AllowedHosts: []string{"127.0.0.1"}},
			},
			InjectionLocation: anthropic.BetaManagedAgentsInjectionLocationParams{Body: anthropic.Bool(true), Header: anthropic.Bool(true)},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	agentID, envID := sdkAgentEnv(ctx, t, c, anthropic.BetaEnvironmentNewParamsConfigUnion{})
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
		EnvironmentID: envID,
		VaultIDs:      []string{vlt.ID},
	})
	if err != nil {
		t.Fatal(err)
	}

	events, _ := sendAndWait(ctx, t, c, sess.ID, "Call both APIs.")
	results := toolResults(events)
	if len(results) != 1 {
		t.Fatalf("%d tool results, want 1", len(results))
	}
	out, isErr := results[0].text, results[0].isError
	// The sandbox holds a placeholder; the allowed host got the secret, the other the placeholder.
	var ph string
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, "env="); ok {
			ph = strings.TrimSpace(v)
		}
	}
	if !strings.HasPrefix(ph, "corral-secret-") || !strings.Contains(out, "\nMY_TOKEN="+ph+"\n") {
		t.Fatalf("tool result %q (is_error %v): want env=<placeholder> and MY_TOKEN=<placeholder> in the environment", out, isErr)
	}
	if isErr || !strings.HasPrefix(out, "upstream-ok\nupstream-ok\nenv=") {
		t.Errorf("tool result %q (is_error %v), want both upstreams' answers", out, isErr)
	}
	if got := allowedRec.seen(); len(got) != 1 || got[0] != "Bearer "+secret {
		t.Errorf("the allowed host received Authorization %q, want the secret", got)
	}
	if got := otherRec.seen(); len(got) != 1 || got[0] != "Bearer "+ph {
		t.Errorf("the host that is not allowed received Authorization %q, want the placeholder %q", got, ph)
	}

	// A session's vault_ids must name existing, unarchived vaults.
	archived, err := c.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "archived"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Vaults.Archive(ctx, archived.ID, anthropic.BetaVaultArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	var apiErrs strings.Builder
	for _, ids := range [][]string{{"vlt_doesnotexist"}, {archived.ID}, {vlt.ID, archived.ID}} {
		_, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID, VaultIDs: ids,
		})
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode < 400 || apiErr.StatusCode >= 500 {
			t.Errorf("session with vault_ids %v: %v, want a 4xx error", ids, err)
			continue
		}
		apiErrs.WriteString(apiErr.RawJSON())
	}

	// A restart after `corral vault rotate-key`, on the new master key alone: the secrets and the CA's key were
	// rewrapped, and the new sandbox's placeholders are replaced as before: MY_TOKEN in the header only,
	// MY_BODY_TOKEN in the body.
	model.Script(
		bashTurn(t, curl+`-H "Authorization: Bearer $MY_TOKEN" --data-binary "a=$MY_TOKEN&b=$MY_BODY_TOKEN" https://`+allowedAddr+`/`),
		modeltest.Turn{Text: "Done again."},
	)
	metrics := metricsText(t, s)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	rot := rotateVaultKey(t, data, 2)
	s2 := startServer(t, data, model, append(serverArgs, "--vault-key-file", rot.newKeyFile)...)
	c = sdkClient(s2)
	events, rawEvents := sendAndWait(ctx, t, c, sess.ID, "Call it again.")
	if results := toolResults(events); len(results) != 2 || results[1].isError || strings.TrimSpace(results[1].text) != "upstream-ok" {
		t.Errorf("after the restart: %+v", results)
	}
	if got := allowedRec.seen(); len(got) != 2 || got[1] != "Bearer "+secret {
		t.Errorf("after the restart, the allowed host received Authorization %q, want the secret", got)
	}
	if got := allowedRec.bodies(); len(got) != 2 || !strings.HasPrefix(got[1], "a=corral-secret-") || !strings.HasSuffix(got[1], "&b="+bodySecret) {
		t.Errorf("after the restart, the allowed host received the bodies %q, want a=<placeholder>&b=<body secret>", got)
	}

	places := map[string]string{
		"the server's metrics":              metrics,
		"the restarted server's metrics":    metricsText(t, s2),
		"the session create errors":         apiErrs.String(),
		"the tool result":                   out,
		"the session's events (SDK)":        rawEvents,
		"the credential create responses":   cred.RawJSON() + bodyCred.RawJSON(),
		"the session create response":       sess.RawJSON(),
		"GET /v1/sessions/{id}":             rawGET(t, s2, "/v1/sessions/"+sess.ID),
		"GET /v1/sessions/{id}/events":      rawGET(t, s2, "/v1/sessions/"+sess.ID+"/events"),
		"GET /v1/vaults/{id}":               rawGET(t, s2, "/v1/vaults/"+vlt.ID),
		"GET /v1/vaults/{id}/credentials":   rawGET(t, s2, "/v1/vaults/"+vlt.ID+"/credentials"),
		"GET /v1/vaults/{id}/credentials/i": rawGET(t, s2, "/v1/vaults/"+vlt.ID+"/credentials/"+cred.ID),
		"the server's stderr":               s.stderr.String(),
		"the restarted server's stderr":     s2.stderr.String(),
		"the output of rotate-key":          rot.output,
	}
	if stdout := s.stdout.String() + s2.stdout.String(); stdout != "" {
		places["the servers' stdout"] = stdout
	}
	for i, r := range model.Requests() {
		places[fmt.Sprintf("model request %d", i+1)] = string(r.Body)
	}
	for p, b := range dataDirFiles(t, data) {
		if len(b) > 0 {
			places[p] = string(b)
		}
	}
	forbidden := map[string]string{"the secret value": secret, "the body secret value": bodySecret,
		"the old master key": rot.oldKey, "the new master key": rot.newKey}
	assertNowhere(t, places, forbidden)
	assertClusterClean(t, sandboxArgs, forbidden)
	if reqs := model.Requests(); len(reqs) != 4 || !strings.Contains(string(reqs[1].Body), "env="+ph) {
		t.Errorf("the model's second request lacks the tool result (%d requests)", len(reqs))
	}
}

// TestPrivateRepositoryCloneErrors: a session's repositories that cannot be cloned each give a typed
// session.error naming the repository (a wrong token, a token that may not read it, no such repository, a
// branch that does not exist, a host the operator does not trust), the session goes on with the repository that
// could be cloned, and no token is echoed anywhere.
func TestPrivateRepositoryCloneErrors(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	token := secretString("ghp_e2eGood")
	wrong := secretString("ghp_e2eWrong")
	srv := sandboxtest.NewGitServer(t, token)
	good := srv.NewRepo(t, "o/proj")
	untrusted := "https://127.0.0.2:1/o/proj.git" // internal and not --egress-allow-internal: refused
	repos := []struct {
		url, token, mount, branch, errType string
	}{
		{good, token, "/workspace/good", "", ""},
		{good, wrong, "/workspace/wrong-token", "", "repository_authentication_error"},
		{srv.URL + "/forbidden/proj.git", token, "/workspace/forbidden", "", "repository_forbidden_error"},
		{srv.URL + "/o/missing.git", token, "/workspace/missing", "", "repository_not_found_error"},
		{good, token, "/workspace/no-branch", "no-such-branch", "repository_checkout_error"},
		{untrusted, token, "/workspace/untrusted", "", "repository_clone_error"},
	}

	model := modeltest.NewServer(t)
	model.Script(bashTurn(t, "ls /workspace; cat /workspace/good/README"), modeltest.Turn{Text: "Listed."})
	data := t.TempDir()
	s := startServer(t, data, model, "--sandbox", "bwrap",
		"--egress-allow-internal", srv.HostPort, "--egress-ca-file", writePEM(t, srv.CAPEM))
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	agentID, envID := sdkAgentEnv(ctx, t, c, anthropic.BetaEnvironmentNewParamsConfigUnion{})
	var resources []anthropic.BetaSessionNewParamsResourceUnion
	for _, r := range repos {
		p := &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{URL: r.url, AuthorizationToken: r.token, MountPath: anthropic.String(r.mount)}
		if r.branch != "" {
			p.Checkout.OfBranch = &anthropic.BetaManagedAgentsBranchCheckoutParam{Name: r.branch}
		}
		resources = append(resources, anthropic.BetaSessionNewParamsResourceUnion{OfGitHubRepository: p})
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID, Resources: resources,
	})
	if err != nil {
		t.Fatal(err)
	}
	events, rawEvents := sendAndWait(ctx, t, c, sess.ID, "List the workspace.")

	got := map[string]string{} // error type by repository URL and mount, from the session.error events
	var types []string
	for _, ev := range events {
		if ev.Type != "session.error" {
			continue
		}
		e := ev.AsSessionError().Error
		types = append(types, e.Type)
		for _, r := range repos {
			if r.errType == e.Type && r.url == e.RepositoryURL {
				got[r.mount] = e.Type
			}
		}
	}
	for _, r := range repos {
		if r.errType != "" && got[r.mount] != r.errType {
			t.Errorf("%s (%s): no %s event; session errors: %v", r.mount, r.url, r.errType, types)
		}
	}
	if n := len(types); n != len(repos)-1 {
		t.Errorf("%d session.error events, want %d: %v", n, len(repos)-1, types)
	}
	// The session went on: the repository that could be cloned is there (README v2 at the head of main), the
	// others are not, and the tool result's first block tells the model which are missing.
	results := toolResults(events)
	if len(results) != 1 || len(results[0].blocks) != 2 || strings.TrimSpace(results[0].blocks[1]) != "good\nv2" {
		t.Fatalf("the workspace: %+v, want a note, then only good (README v2)", results)
	}
	for _, r := range repos {
		if note := results[0].blocks[0]; (r.errType != "") != strings.Contains(note, " at "+r.mount+": ") {
			t.Errorf("the note about unplaced resources and %s: %q", r.mount, note)
		}
	}

	places := map[string]string{
		"the session's events (SDK)":   rawEvents,
		"the session create response":  sess.RawJSON(),
		"GET /v1/sessions/{id}":        rawGET(t, s, "/v1/sessions/"+sess.ID),
		"GET /v1/sessions/{id}/events": rawGET(t, s, "/v1/sessions/"+sess.ID+"/events"),
		"the server's stderr":          s.stderr.String(),
	}
	for i, r := range model.Requests() {
		places[fmt.Sprintf("model request %d", i+1)] = string(r.Body)
	}
	for p, b := range dataDirFiles(t, data) {
		if len(b) > 0 {
			places[p] = string(b)
		}
	}
	assertNowhere(t, places, map[string]string{
		"the token":                         token,
		"the wrong token":                   wrong,
		"the token's Basic auth form":       base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token)),
		"the wrong token's Basic auth form": base64.StdEncoding.EncodeToString([]byte("x-access-token:" + wrong)),
	})
}
