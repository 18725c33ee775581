package main

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestCorralWorkerResources: `corral worker` places a self-hosted session's file resources at their mount paths
// (under /mnt/session/uploads, read-only, and in the workspace) and its agent's custom skill under /mnt/skills,
// read through the API with the work item's sessions token, as a server's hands do; what the bash leaves under
// /mnt/session/outputs is collected when the turn ends into the Files API as files scoped to the session (listed
// by scope_id, downloaded byte for byte); one written after the turn ended is collected before the worker lets
// the session's work item go.
func TestCorralWorkerResources(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	s, c := workerServer(t, "10s",
		bashTurn(t, "cat /mnt/session/uploads/data/in.txt; cat /workspace/data/in.txt; "+
			"(echo x > /mnt/session/uploads/data/in.txt) 2>/dev/null && echo upload-writable || echo upload-read-only; "+
			"ls /mnt/skills/worker-notes; tail -n 1 /mnt/skills/worker-notes/SKILL.md; "+
			"mkdir -p /mnt/session/outputs/sub && tr a-z A-Z < /mnt/session/uploads/data/in.txt > /mnt/session/outputs/report.txt && "+
			"echo nested > /mnt/session/outputs/sub/nested.txt && echo written"),
		modeltest.Turn{Text: "Reported."},
		bashTurn(t, "(sleep 1; echo late > /mnt/session/outputs/late.txt) >/dev/null 2>&1 & echo later"),
		modeltest.Turn{Text: "Later."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	in, err := c.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader("input for the worker\n"), "in.txt", "text/plain")})
	if err != nil {
		t.Fatal(err)
	}
	skillMD := "---\nname: worker-notes\ndescription: Notes for the worker.\n---\n# Notes\nskill-body-marker\n"
	sk, err := c.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: []io.Reader{
		anthropic.File(strings.NewReader(skillMD), "worker-notes/SKILL.md", "text/markdown"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	envID, key, _ := selfHostedEnv(ctx, t, c, "worker-resources")
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "worker-resources", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools:  []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
		Skills: []anthropic.BetaManagedAgentsSkillParamsUnion{{OfCustom: &anthropic.BetaManagedAgentsCustomSkillParams{SkillID: sk.ID}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{
			{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: in.ID, MountPath: anthropic.String("/mnt/session/uploads/data/in.txt")}},
			{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: in.ID, MountPath: anthropic.String("/workspace/data/in.txt")}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	// A short hold: the worker lets the session's item go 3 s after a turn ends.
	startWorker(t, s, envID, key, t.TempDir(), "worker-res", 430000, 3*time.Second)

	// outputs waits until the files scoped to the session are want (name=content, sorted): the worker collects
	// once it sees the turn end, just after the client does.
	outputs := func(want ...string) {
		t.Helper()
		var got []string
		for {
			page, err := c.Beta.Files.List(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String(sess.ID)})
			if err != nil {
				t.Fatal(err)
			}
			got = got[:0]
			for _, f := range page.Data {
				if f.Scope.Type != "session" || f.Scope.ID != sess.ID || !f.Downloadable {
					t.Fatalf("an output not scoped to the session: %s", f.RawJSON())
				}
				resp, err := c.Beta.Files.Download(ctx, f.ID, anthropic.BetaFileDownloadParams{})
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, f.Filename+"="+string(b))
			}
			slices.Sort(got)
			if slices.Equal(got, want) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("outputs of the session %q, want %q", got, want)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	l := sendAndFollow(ctx, t, c, sess.ID, "Report.")
	want := "input for the worker\ninput for the worker\nupload-read-only\nSKILL.md\nskill-body-marker\nwritten"
	if len(l.uses) != 1 || strings.TrimSpace(l.results[l.uses[0]]) != want {
		t.Fatalf("uses %v, results %q; want %q", l.uses, l.results, want)
	}
	outputs("nested.txt=nested\n", "report.txt=INPUT FOR THE WORKER\n")

	// A file written after the turn ended is collected before the worker lets the item go.
	l = sendAndFollow(ctx, t, c, sess.ID, "Write it later.")
	if len(l.uses) != 1 || strings.TrimSpace(l.results[l.uses[0]]) != "later" {
		t.Fatalf("uses %v, results %q", l.uses, l.results)
	}
	outputs("late.txt=late\n", "nested.txt=nested\n", "report.txt=INPUT FOR THE WORKER\n")
}

// TestCorralWorkerResourceAdded: a file resource added to a session while `corral worker` holds its work item is
// placed when the session's sandbox is next provisioned (here after the idle one was reaped), as on a server:
// the worker reads the session's resources again as each turn starts.
func TestCorralWorkerResourceAdded(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	s, c := workerServer(t, "10s",
		bashTurn(t, "ls /mnt/session/uploads; echo one"),
		modeltest.Turn{Text: "One."},
		bashTurn(t, "cat /mnt/session/uploads/added.txt"),
		modeltest.Turn{Text: "Two."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	sess, envID, key := selfHostedSession(ctx, t, c, "worker-added")
	// The worker holds the session for a minute; its sandboxes are reaped after a second unused.
	startCorral(t, os.Environ(), "corral: worker ", "worker", "--url", s.url, "--env", envID, "--key", key,
		"--data", t.TempDir(), "--worker-id", "worker-added", "--sandbox", "bwrap", "--sandbox-uids", "440000",
		"--session-idle", "1m", "--sandbox-idle", "1s")

	l := sendAndFollow(ctx, t, c, sess.ID, "One.")
	if len(l.uses) != 1 || strings.TrimSpace(l.results[l.uses[0]]) != "one" {
		t.Fatalf("uses %v, results %q", l.uses, l.results)
	}
	f, err := c.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader("added later\n"), "added.txt", "text/plain")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Sessions.Resources.Add(ctx, sess.ID, anthropic.BetaSessionResourceAddParams{
		BetaManagedAgentsFileResourceParams: anthropic.BetaManagedAgentsFileResourceParams{FileID: f.ID,
			MountPath: anthropic.String("/mnt/session/uploads/added.txt")}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the sandbox is reaped
	l = sendAndFollow(ctx, t, c, sess.ID, "Two.")
	if len(l.uses) != 1 || strings.TrimSpace(l.results[l.uses[0]]) != "added later" {
		t.Fatalf("uses %v, results %q", l.uses, l.results)
	}
}
