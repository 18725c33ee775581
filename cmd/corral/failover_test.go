package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
	"github.com/corralhq/corral/internal/vault"
)

// TestHarnessFailover runs the scaled-out shape: `corral serve --brains 0` (the API alone) and two
// `corral harness` processes on one PostgreSQL. The brain working a session is killed with SIGKILL in the
// middle of a model call; the other one resumes the session when the lease expires, and the session finishes
// with nothing lost or doubled.
func TestHarnessFailover(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDSN(t)
	model := modeltest.NewServer(t)
	hold := make(chan struct{})
	defer close(hold)
	model.Script(modeltest.Turn{Text: "an answer that never completes", Hold: hold})

	key := sharedVaultKey(t)
	api := startServer(t, t.TempDir(), model, "--db", db, "--brains", "0", "--vault-key-file", key)
	harness := func() *server {
		return startCorral(t, serverEnv(model, testKey), "corral: harness running", "harness", "--db", db, "--data", t.TempDir(),
			"--sandbox", "none", "--brains", "4", "--lease-ttl", "2s", "--poll", "200ms", "--vault-key-file", key)
	}
	first := harness()
	id := newSession(t, api.client(), "Tell me something.")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitModelCall(ctx, t, model, api.client(), id, 1)
	second := harness() // started only now, so the first one is the one holding the session
	model.Script(modeltest.Turn{Text: "The answer from the second brain."})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	killed := time.Now()

	events := waitIdle(t, api.client(), id)
	t.Logf("session finished by the second brain %v after the SIGKILL (lease TTL 2s)", time.Since(killed).Round(time.Millisecond))
	assertOneTurn(t, events, "The answer from the second brain.")
	assertCrashRecovered(t, events)
	if strings.Contains(second.stderr.String(), "panic") {
		t.Errorf("second brain panicked:\n%s", second.stderr.String())
	}
}

// sharedVaultKey writes a vault master key file for the processes of one deployment: every process on one
// store must be given the same key (the first to start records it; the others refuse another).
func sharedVaultKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vault.key")
	if err := vault.WriteKeyFile(path, vault.NewKey()); err != nil {
		t.Fatal(err)
	}
	return path
}
