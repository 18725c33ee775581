package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strconv"
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

// pattern yields n bytes of a fixed pattern without holding them.
type pattern struct{ n, off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	for i := range b {
		b[i] = byte((p.off + int64(i)) * 131 >> 7)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// rssKB reads a field (VmRSS, VmHWM) of a process's status, in kB.
func rssKB(b *testing.B, pid int, field string) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return v
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// BenchmarkFiles100MB uploads and downloads a 100 MB file through the SDK against a real `corral serve` and
// reports both throughputs and the server's memory: its resident set before the first upload and its peak
// (VmHWM) after every transfer. The file streams to and from the blob store, so the peak stays far below the
// file's size. Figures: docs/benchmarks.md.
func BenchmarkFiles100MB(b *testing.B) {
	const size = 100 << 20
	model := modeltest.NewServer(b)
	s := startServer(b, b.TempDir(), model, "--brains", "0")
	c := sdkClient(s)
	pid := s.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	want := sha256.New()
	if _, err := io.Copy(want, &pattern{n: size}); err != nil {
		b.Fatal(err)
	}
	baseline := rssKB(b, pid, "VmRSS")
	var up, down time.Duration
	for b.Loop() {
		start := time.Now()
		f, err := c.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(&pattern{n: size}, "big.bin", "application/octet-stream")})
		if err != nil {
			b.Fatal(err)
		}
		up += time.Since(start)
		if f.SizeBytes != size {
			b.Fatalf("uploaded %d bytes", f.SizeBytes)
		}
		start = time.Now()
		resp, err := c.Beta.Files.Download(ctx, f.ID, anthropic.BetaFileDownloadParams{})
		if err != nil {
			b.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, resp.Body)
		resp.Body.Close()
		down += time.Since(start)
		if err != nil || !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
			b.Fatalf("the download differs from the upload (%v)", err)
		}
		if _, err := c.Beta.Files.Delete(ctx, f.ID, anthropic.BetaFileDeleteParams{}); err != nil {
			b.Fatal(err)
		}
	}
	mb := float64(size) / (1 << 20) * float64(b.N)
	b.ReportMetric(mb/up.Seconds(), "upload_MiB/s")
	b.ReportMetric(mb/down.Seconds(), "download_MiB/s")
	b.ReportMetric(baseline/1024, "server_rss_before_MiB")
	b.ReportMetric(rssKB(b, pid, "VmHWM")/1024, "server_peak_rss_MiB")
}
