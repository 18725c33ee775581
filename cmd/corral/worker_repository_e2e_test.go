package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

// TestCorralWorkerRepository: `corral worker` places a self-hosted session's private github_repository resource
// (a real git server over TLS that requires its token) at its mount path in its bwrap sandbox, cloned through
// the server's git relay with the work item's sessions token; the bash reads the clone, commits and pushes
// through origin, the sandbox's git endpoint (http://corral.internal/git/<resource_id>), and the commit arrives
// upstream; a later work item of the session (another sessions token) pulls and pushes again from the same
// clone. The repository's token never reaches the worker: not the sandbox's environment (env,
// /proc/self/environ), not the clone's .git/config, not any file of the worker's data directory (the
// workspace included), not the worker's log; nor does the sessions token reach the sandbox.
func TestCorralWorkerRepository(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	token := secretString("ghp_workerToken")
	srv := sandboxtest.NewGitServer(t, token)
	repoURL := srv.NewRepo(t, "o/proj")
	const mount = "/workspace/repo"
	model := modeltest.NewServer(t)
	model.Script(
		bashTurn(t, "cd "+mount+" && cat README && git config user.email a@b && git config user.name a && echo hi > f && "+
			"git add f && git commit -q -m from-worker && GIT_TERMINAL_PROMPT=0 git push -q origin HEAD:main 2>&1 && echo pushed-ok && "+
			"git remote get-url origin && echo '--- env' && env && echo '--- environ' && tr '\\0' '\\n' </proc/self/environ && "+
			"echo '--- config' && cat .git/config"),
		modeltest.Turn{Text: "Pushed."},
		// A later work item of the session (another sessions token): the clone pulls and pushes again.
		bashTurn(t, "cd "+mount+" && git pull -q --rebase origin main 2>&1 && echo more >> f && git commit -q -am second && "+
			"GIT_TERMINAL_PROMPT=0 git push -q origin HEAD:main 2>&1 && echo pushed-again"),
		modeltest.Turn{Text: "Pushed again."},
	)
	s := startServer(t, t.TempDir(), model, "--work-lease-ttl", "10s",
		"--egress-allow-internal", srv.HostPort, "--egress-ca-file", writePEM(t, srv.CAPEM))
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	envID, key, agentID := selfHostedEnv(ctx, t, c, "worker-repository")
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{
			URL: repoURL, AuthorizationToken: token, MountPath: anthropic.String(mount),
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resID := sess.Resources[0].ID
	data := t.TempDir()
	w := startWorker(t, s, envID, key, data, "worker-git", 430000, 3*time.Second)

	l := sendAndFollow(ctx, t, c, sess.ID, "Commit a file and push it.")
	if len(l.uses) != 1 {
		t.Fatalf("uses %v, results %q", l.uses, l.results)
	}
	out := l.results[l.uses[0]]
	want := "v2\npushed-ok\n" + sandbox.LocalRemote(resID) + "\n--- env\n"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "\nPATH=") || !strings.Contains(out, "--- config\n") {
		t.Fatalf("tool result %q, want it to start with %q and show the environment and the config", out, want)
	}
	if log := srv.Log(t, "o/proj", "main"); !strings.HasPrefix(log, "from-worker\n") {
		t.Errorf("upstream main: %q, want the sandbox's commit on top", log)
	}

	// The worker lets the item go (--session-idle 3s); the next turn is another item, with another token.
	srv.Commit(t, "o/proj", "upstream")
	time.Sleep(4 * time.Second)
	l = sendAndFollow(ctx, t, c, sess.ID, "Pull and push again.")
	if len(l.uses) != 1 || strings.TrimSpace(l.results[l.uses[0]]) != "pushed-again" {
		t.Fatalf("second turn: uses %v, results %q", l.uses, l.results)
	}
	if n := strings.Count(w.stderr.String(), "claimed work"); n < 2 {
		t.Errorf("the worker claimed %d work items, want a second one for the second turn:\n%s", n, w.stderr.String())
	}
	if log := srv.Log(t, "o/proj", "main"); !strings.HasPrefix(log, "second\nupstream\nfrom-worker\n") {
		t.Errorf("upstream main after the second turn: %q", log)
	}

	// Red team: the token in any form git or the relay could have used, and the sessions token's prefix.
	forms := []string{token, base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))}
	for _, f := range forms {
		if strings.Contains(out, f) {
			t.Errorf("the sandbox saw the repository's token (%q...)", f[:12])
		}
	}
	if strings.Contains(out, apitype.SessionsTokenPrefix) {
		t.Errorf("the sandbox saw a sessions token:\n%s", out)
	}
	if !strings.Contains(out, "url = "+sandbox.LocalRemote(resID)) {
		t.Errorf("the clone's origin is not the git endpoint:\n%s", out)
	}
	// Every file of the worker's data directory: its workspaces (the clone's .git included) and its state.
	files := 0
	err = filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // a directory the sandbox's uid keeps to itself is walked as far as it can be
		}
		found, err := fileHolds(p, forms)
		if err != nil {
			return nil
		}
		files++
		if found != "" {
			t.Errorf("%s holds the repository's token", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "workspaces", sess.ID, "repo", ".git", "config")); err != nil || files < 10 {
		t.Errorf("the clone is not in the worker's workspace (%d files walked): %v", files, err)
	}
	for _, f := range forms {
		if strings.Contains(w.stderr.String(), f) || strings.Contains(w.stdout.String(), f) {
			t.Errorf("the worker's log holds the repository's token")
		}
	}
}

// fileHolds returns the first of forms the file at path holds, reading its data a window at a time and skipping
// its holes: the workspaces' quota images are sparse files of gigabytes (read whole, under -race, they took the
// test binary to 22 GB).
func fileHolds(path string, forms []string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	longest := 0
	for _, s := range forms {
		longest = max(longest, len(s))
	}
	const seekData, seekHole = 3, 4 // lseek(2)'s SEEK_DATA and SEEK_HOLE
	buf := make([]byte, 1<<20)
	var off int64
	for {
		start, err := f.Seek(off, seekData)
		if err != nil {
			return "", nil // ENXIO: no data past off
		}
		end, err := f.Seek(start, seekHole)
		if err != nil {
			return "", err
		}
		// A form may straddle windows: each window keeps the tail of the one before.
		var carry []byte
		for pos := start; pos < end; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), end-pos)], pos)
			if n == 0 && err != nil {
				return "", err
			}
			window := append(carry, buf[:n]...)
			for _, s := range forms {
				if bytes.Contains(window, []byte(s)) {
					return s, nil
				}
			}
			carry = append([]byte(nil), window[max(0, len(window)-longest+1):]...)
			pos += int64(n)
		}
		off = end
	}
}
