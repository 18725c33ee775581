package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
