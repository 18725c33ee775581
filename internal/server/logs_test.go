package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/server"
)

// lockedBuffer is a bytes.Buffer for a logger written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSessionLogLines: with a JSON logger, the lines a session's turn produces (here its sandbox failing to
// provision, logged by the pool) are JSON objects, and every line that mentions the session carries its id
// under "session", never under another key.
func TestSessionLogLines(t *testing.T) {
	t.Parallel()
	fake := modeltest.NewServer(t)
	st := openStore(t)
	var out lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(server.Config{
		Store: st, Logger: logger,
		API: &server.APIConfig{Listen: "127.0.0.1:0", Keys: &api.KeyAuth{Store: st, Static: key}},
		Brain: &harness.Config{
			Model:   anthropic.New(anthropic.Config{APIKey: "test", BaseURL: fake.URL}),
			Workers: 2, PollInterval: 50 * time.Millisecond,
		},
		Sandbox: server.SandboxConfig{Provider: &stubProvider{closed: make(chan struct{})}, Pool: sandbox.PoolConfig{WorkspaceRoot: t.TempDir()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := toolResult(t, toolTurn(t, srv, fake))
	srv.Stop()
	if !res.IsError {
		t.Fatalf("the stub's provisioning did not fail: %s", res.Content)
	}
	var sessionID string
	lines, about := 0, 0
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		lines++
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Text())
		}
		if _, ok := rec["session_id"]; ok {
			t.Errorf("log line uses session_id instead of session: %s", sc.Text())
		}
		if rec["msg"] == "sandbox provisioning failed" {
			id, _ := rec["session"].(string)
			if !strings.HasPrefix(id, "sesn_") {
				t.Errorf("the provisioning failure names no session: %s", sc.Text())
			}
			sessionID = id
		}
	}
	if sessionID == "" {
		t.Fatalf("no line about the failed provisioning in %d lines:\n%s", lines, out.String())
	}
	sc = bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		if !strings.Contains(sc.Text(), sessionID) {
			continue
		}
		about++
		var rec map[string]any
		_ = json.Unmarshal(sc.Bytes(), &rec)
		if rec["session"] != sessionID {
			t.Errorf("a line mentions %s but does not carry it as session: %s", sessionID, sc.Text())
		}
	}
	if about == 0 {
		t.Error("no line mentions the session")
	}
}
