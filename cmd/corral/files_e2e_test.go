package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestFilesInAndOut is the Files API end to end, through the official SDK against a real `corral serve`, in
// every isolating backend: a file is uploaded and given to a session as two resources (under the uploads and in
// the workspace), bash reads both in the sandbox and cannot write the upload, writes an output; when the turn
// ends the output is a file scoped to the session, listed by scope_id and downloaded byte-identical.
func TestFilesInAndOut(t *testing.T) {
	t.Parallel()
	isolatingBackends(t, testFilesInAndOut)
}

func testFilesInAndOut(t *testing.T, sandboxArgs []string) {
	model := modeltest.NewServer(t)
	s := startServer(t, t.TempDir(), model, sandboxArgs...)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	input := []byte("alpha,beta\ngamma,delta\n")
	up, err := c.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(bytes.NewReader(input), "input.csv", "text/csv")})
	if err != nil {
		t.Fatal(err)
	}
	const uploads, inWorkspace = "/mnt/session/uploads/input.csv", "/workspace/data/input.csv"
	model.Script(
		bashTurn(t, "cat "+uploads+" && cmp "+uploads+" "+inWorkspace+" && echo same-in-workspace; "+
			"(echo x >> "+uploads+") 2>/dev/null && echo upload-writable || echo upload-read-only; "+
			"tr a-z A-Z < "+uploads+" > /mnt/session/outputs/result.csv && echo written"),
		modeltest.Turn{Text: "Done: result.csv is in the outputs."},
	)
	agentID, envID := sdkAgentEnv(ctx, t, c, anthropic.BetaEnvironmentNewParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{}})
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
		EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{
			{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID, MountPath: anthropic.String(uploads)}},
			{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: up.ID, MountPath: anthropic.String(inWorkspace)}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	events, _ := sendAndWait(ctx, t, c, sess.ID, "Upper-case the file into the outputs.")
	results := toolResults(events)
	if len(results) != 1 {
		t.Fatalf("%d tool results, want 1", len(results))
	}
	want := string(input) + "same-in-workspace\nupload-read-only\nwritten" // the tool trims the last newline
	if out := results[0].text; results[0].isError || out != want {
		t.Fatalf("tool result %q (is_error %v), want %q", out, results[0].isError, want)
	}
	for _, ev := range events {
		if ev.Type == "session.error" {
			t.Errorf("session.error: %s", ev.RawJSON())
		}
	}

	page, err := c.Beta.Files.List(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String(sess.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].Filename != "result.csv" || page.Data[0].Scope.ID != sess.ID ||
		page.Data[0].Scope.Type != "session" || !page.Data[0].Downloadable {
		t.Fatalf("outputs of the session: %s", page.RawJSON())
	}
	resp, err := c.Beta.Files.Download(ctx, page.Data[0].ID, anthropic.BetaFileDownloadParams{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, bytes.ToUpper(input)) {
		t.Fatalf("downloaded %q (%v), want %q", got, err, bytes.ToUpper(input))
	}
	// The upload itself is not a session output.
	all, err := c.Beta.Files.List(ctx, anthropic.BetaFileListParams{})
	if err != nil || len(all.Data) != 2 || !strings.Contains(all.RawJSON(), up.ID) {
		t.Fatalf("all files: %v %s", err, all.RawJSON())
	}
}
