package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/blob/localfs"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/workspace"
)

// TestFilesOverAPI: the worker's workspace.Files against a real server with file storage (with the API key: the
// sessions token's scope is the API's, tested there). It reads the content of a file resource of a held session
// and of no other file, uploads an output of a held session (streamed, its type inferred from its name) and of
// no other session, and reaches nothing once the session is released.
func TestFilesOverAPI(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := localfs.Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	fsvc, err := files.New(files.Config{Store: st, Blobs: blobs, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: st, Files: fsvc, Logger: slog.New(slog.DiscardHandler), Keys: &api.KeyAuth{Static: "test-key"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() { srv.Close(); blobs.Close(); _ = st.Close() })
	c, err := client.New(client.Config{BaseURL: srv.URL, APIKey: "test-key", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	in, err := c.FileUpload(ctx, "in.csv", "text/csv", strings.NewReader("a,b\n"))
	if err != nil || in.MimeType != "text/csv" || in.SizeBytes != 4 {
		t.Fatalf("upload: %+v %v", in, err)
	}
	other, err := c.FileUpload(ctx, "other.txt", "", strings.NewReader("other"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHeld()
	f := filesAPI{held: h}
	if _, err := f.OpenContent(ctx, in.ID); !errors.Is(err, errNotHeld) {
		t.Fatalf("content of a file of no held session: %v", err)
	}
	release := h.hold("sesn_1", c, &sandbox.Recipe{Resources: []apitype.Resource{{Type: apitype.ResourceFile, FileID: in.ID}}})
	rc, err := f.OpenContent(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "a,b\n" {
		t.Fatalf("content %q %v", b, err)
	}
	if _, err := f.OpenContent(ctx, other.ID); !errors.Is(err, errNotHeld) {
		t.Fatalf("content of a file that is no resource of a held session: %v", err)
	}
	id, err := f.CreateOutput(ctx, "sesn_1", "report.txt", strings.NewReader("report"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.FileGet(ctx, id)
	if err != nil || out.Filename != "report.txt" || out.MimeType != "text/plain" || out.SizeBytes != 6 {
		t.Fatalf("the output: %+v %v", out, err)
	}
	if _, err := f.CreateOutput(ctx, "sesn_2", "x.txt", strings.NewReader("x")); !errors.Is(err, errNotHeld) {
		t.Fatalf("an output of a session not held: %v", err)
	}
	if _, _, err := f.OpenSkillArchive(ctx, "skill_x", "1"); !errors.Is(err, errNotHeld) {
		t.Fatalf("a skill of no held session's agent: %v", err)
	}
	release()
	if _, err := f.OpenContent(ctx, in.ID); !errors.Is(err, errNotHeld) {
		t.Fatalf("content after the release: %v", err)
	}
}

// TestOutputQuotas: the quota the API applies to a sessions token's uploads is the workspace's, which the worker
// applies on its side: a worker's session may store what a server's may, no more.
func TestOutputQuotas(t *testing.T) {
	if api.DefaultMaxSessionOutputBytes != workspace.DefaultMaxOutputBytes {
		t.Errorf("the API's quota of a session's outputs %d, the workspace's %d", api.DefaultMaxSessionOutputBytes, workspace.DefaultMaxOutputBytes)
	}
}
