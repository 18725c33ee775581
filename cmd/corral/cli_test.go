package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/model/modeltest"
)

func TestCLI(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	model.Script(modeltest.Turn{Text: "Hello from the model."})
	s := startServer(t, t.TempDir(), model)

	conn := []string{"--url", s.url, "--key", testKey}
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if code := run(ctx, &stdio{out: &out, err: &errb}, append(args, conn...)); code != 0 {
			t.Fatalf("corral %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return out.String()
	}

	var agent, env, sess struct{ ID string }
	if err := json.Unmarshal([]byte(cli("agents", "create", "--name", "cli", "--system", "Be brief.")), &agent); err != nil || agent.ID == "" {
		t.Fatalf("agents create: %v %+v", err, agent)
	}
	if err := json.Unmarshal([]byte(cli("envs", "create", "--name", "cli")), &env); err != nil || env.ID == "" {
		t.Fatalf("envs create: %v", err)
	}
	if out := cli("agents", "list"); !strings.Contains(out, agent.ID) || !strings.Contains(out, "cli") {
		t.Errorf("agents list lacks the agent:\n%s", out)
	}
	if err := json.Unmarshal([]byte(cli("sessions", "create", "--agent", agent.ID, "--env", env.ID, "--message", "Say hello.")), &sess); err != nil || sess.ID == "" {
		t.Fatalf("sessions create: %v", err)
	}
	tail := cli("tail", sess.ID, "--until-idle")
	for _, want := range []string{"user.message", "Say hello.", "agent.message", "Hello from the model.", "session.status_idle", "end_turn"} {
		if !strings.Contains(tail, want) {
			t.Errorf("tail output lacks %q:\n%s", want, tail)
		}
	}
	if out := cli("sessions", "get", sess.ID); !strings.Contains(out, `"status": "idle"`) {
		t.Errorf("sessions get:\n%s", out)
	}

	// Errors come back in the API's words, with a non-zero exit.
	var errb bytes.Buffer
	if code := run(context.Background(), &stdio{out: &bytes.Buffer{}, err: &errb}, append([]string{"sessions", "get", "sesn_missing"}, conn...)); code == 0 || !strings.Contains(errb.String(), "not_found_error") {
		t.Errorf("sessions get of a missing id: exit %d, %q", code, errb.String())
	}
	if code := run(context.Background(), &stdio{out: &bytes.Buffer{}, err: &errb}, []string{"agents", "bogus"}); code == 0 {
		t.Errorf("unknown subcommand exited 0")
	}
}

// TestKeys: with no CORRAL_API_KEY, the first start mints a key and prints it once; `corral keys` manages more
// in the store, and a revoked key is refused.
func TestKeys(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	data := t.TempDir()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--data", data, "--sandbox", "none"}
	s := startCorral(t, serverEnv(model, ""), "corral: listening on ", args...)
	printed := regexp.MustCompile(`created API key (apikey_\w+)`).FindStringSubmatch(s.stderr.String())
	// stdout and stderr are separate pipes: the key may arrive a moment after the listening line.
	for deadline := time.Now().Add(5 * time.Second); s.stdout.String() == "" && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	first := strings.TrimSpace(s.stdout.String())
	if printed == nil || !regexp.MustCompile(`^corral-\w{40}$`).MatchString(first) {
		t.Fatalf("first start printed no key: stdout %q, stderr:\n%s", first, s.stderr.String())
	}
	if strings.Contains(s.stderr.String(), first) {
		t.Error("the key secret was written to the log (stderr)")
	}
	ctx := context.Background()
	get := func(key string) error {
		c, err := client.New(client.Config{BaseURL: s.url, APIKey: key})
		if err != nil {
			return err
		}
		_, err = c.AgentList(ctx, nil)
		return err
	}
	if err := get(first); err != nil {
		t.Fatalf("the printed key is refused: %v", err)
	}

	cli := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, &stdio{out: &out, err: &errb}, append(args, "--data", data))
		return out.String() + errb.String(), code
	}
	out, code := cli("keys", "create", "--name", "ci")
	fields := strings.Fields(out)
	if code != 0 || len(fields) < 2 || !strings.HasPrefix(fields[0], "apikey_") {
		t.Fatalf("keys create: exit %d: %s", code, out)
	}
	secondID, second := fields[0], fields[1]
	if err := get(second); err != nil {
		t.Fatalf("a created key is refused: %v", err)
	}
	if out, _ := cli("keys", "list"); !strings.Contains(out, secondID) || !strings.Contains(out, printed[1]) || strings.Contains(out, second) {
		t.Errorf("keys list must show both ids and no secret:\n%s", out)
	}
	if out, code := cli("keys", "revoke", secondID); code != 0 {
		t.Fatalf("keys revoke: exit %d: %s", code, out)
	}
	var apiErr *client.Error
	if err := get(second); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Errorf("revoked key: got %v, want 401", err)
	}
	if err := get("corral-not-a-key"); !errors.As(err, &apiErr) || apiErr.Type != "authentication_error" {
		t.Errorf("unknown key: got %v, want authentication_error", err)
	}

	// A restart with keys in the store mints none.
	s.cmd.Process.Kill()
	<-s.exited
	s2 := startCorral(t, serverEnv(model, ""), "corral: listening on ", args...)
	if strings.Contains(s2.stderr.String(), "created API key") || s2.stdout.String() != "" {
		t.Errorf("second start minted another key:\n%s", s2.stderr.String())
	}
}
