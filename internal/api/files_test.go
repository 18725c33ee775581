package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/blob/localfs"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/store"
)

// withFiles gives the API a file service over a blob directory of the test's, with maxBytes as its limit.
func withFiles(t testing.TB, dir string, maxBytes int64) func(*api.Config) {
	return func(c *api.Config) {
		blobs, err := localfs.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { blobs.Close() })
		if c.Files, err = files.New(files.Config{Store: c.Store, Blobs: blobs, MaxBytes: maxBytes}); err != nil {
			t.Fatal(err)
		}
	}
}

// blobCount is the number of blobs under dir (what is not in its .tmp).
func blobCount(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".tmp" {
			entries, _ := os.ReadDir(p)
			n += len(entries) // a leftover of a failed write counts too
			return filepath.SkipDir
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFilesSDK: upload through the SDK, read the metadata, list, download byte-identical, delete.
func TestFilesSDK(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "blobs")
	h := newHarness(t, withFiles(t, dir, 1<<20))
	ctx := ctxT(t)
	content := bytes.Repeat([]byte("a,b,c\n1,2,\x00\xff\n"), 10000)
	up, err := h.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(bytes.NewReader(content), "../dir/report.csv", "text/csv"), ExpiresInSeconds: anthropic.Int(7200)})
	if err != nil {
		t.Fatal(err)
	}
	if !apitype.HasPrefix(up.ID, apitype.PrefixFile) || up.Filename != "report.csv" || up.MimeType != "text/csv" ||
		up.SizeBytes != int64(len(content)) || !up.Downloadable || up.Type != "file" {
		t.Fatalf("uploaded %+v", up)
	}
	if d := up.ExpiresAt.Sub(up.CreatedAt); d.Seconds() != 7200 {
		t.Errorf("expires %s after creation, want 2h", d)
	}
	rec, err := h.store.FileGet(ctx, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(content); rec.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("recorded sha256 %s", rec.SHA256)
	}
	got, err := h.client.Beta.Files.GetMetadata(ctx, up.ID, anthropic.BetaFileGetMetadataParams{})
	if err != nil || got.ID != up.ID || got.SizeBytes != up.SizeBytes {
		t.Fatalf("get metadata: %+v, %v", got, err)
	}
	resp, err := h.client.Beta.Files.Download(ctx, up.ID, anthropic.BetaFileDownloadParams{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(body, content) {
		t.Fatalf("downloaded %d bytes (%v), want the %d uploaded", len(body), err, len(content))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/csv" {
		t.Errorf("download Content-Type %q", ct)
	}
	page, err := h.client.Beta.Files.List(ctx, anthropic.BetaFileListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != up.ID {
		t.Fatalf("list: %+v, %v", page, err)
	}
	del, err := h.client.Beta.Files.Delete(ctx, up.ID, anthropic.BetaFileDeleteParams{})
	if err != nil || del.ID != up.ID || del.Type != "file_deleted" {
		t.Fatalf("delete: %+v, %v", del, err)
	}
	_, err = h.client.Beta.Files.GetMetadata(ctx, up.ID, anthropic.BetaFileGetMetadataParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Files.Download(ctx, up.ID, anthropic.BetaFileDownloadParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Files.Delete(ctx, up.ID, anthropic.BetaFileDeleteParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	if n := blobCount(t, dir); n != 0 {
		t.Errorf("%d blobs left after the delete", n)
	}
}

// TestFilesUploadRefused: oversized, empty, non-multipart, file-less and badly expiring uploads are 4xx in the
// envelope and leave nothing stored.
func TestFilesUploadRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "blobs")
	const limit = 64 << 10
	h := newHarness(t, withFiles(t, dir, limit))
	ctx := ctxT(t)
	upload := func(content []byte) error {
		_, err := h.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
			File: anthropic.File(bytes.NewReader(content), "x.bin", "application/octet-stream")})
		return err
	}
	wantAPIError(t, upload(make([]byte, limit+1)), http.StatusRequestEntityTooLarge, apitype.ErrRequestTooLarge)
	wantAPIError(t, upload(make([]byte, 3*limit)), http.StatusRequestEntityTooLarge, apitype.ErrRequestTooLarge)
	wantAPIError(t, upload(nil), http.StatusBadRequest, apitype.ErrInvalidRequest)
	if err := upload(make([]byte, limit)); err != nil {
		t.Fatalf("a file of exactly the limit: %v", err)
	}

	multi := func(fields map[string]string, file []byte) (int, []byte) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		for k, v := range fields {
			_ = mw.WriteField(k, v)
		}
		if file != nil {
			fw, _ := mw.CreateFormFile("file", "f.txt")
			_, _ = fw.Write(file)
		}
		_ = mw.Close()
		st, _, body := h.do(http.MethodPost, "/v1/files", buf.String(), "Content-Type", mw.FormDataContentType())
		return st, body
	}
	for name, tc := range map[string]struct {
		fields map[string]string
		file   []byte
	}{
		"no file part":        {fields: map[string]string{"purpose": "x"}},
		"expiry too short":    {fields: map[string]string{"expires_in_seconds": "60"}, file: []byte("x")},
		"expiry not a number": {fields: map[string]string{"expires_in_seconds": "soon"}, file: []byte("x")},
	} {
		if st, body := multi(tc.fields, tc.file); st != http.StatusBadRequest || !strings.Contains(string(body), string(apitype.ErrInvalidRequest)) {
			t.Errorf("%s: %d %s", name, st, body)
		}
	}
	if st, _, body := h.do(http.MethodPost, "/v1/files", `{"file":"x"}`); st != http.StatusBadRequest {
		t.Errorf("a JSON body: %d %s", st, body)
	}
	if st, _, body := h.do(http.MethodPost, "/v1/files", "--b\r\nbroken", "Content-Type", "multipart/form-data; boundary=b"); st != http.StatusBadRequest {
		t.Errorf("a broken multipart body: %d %s", st, body)
	}
	if n := blobCount(t, dir); n != 1 {
		t.Errorf("%d blobs stored, want only the one accepted upload", n)
	}
	list, err := h.store.FileList(ctx, &store.FileListParams{ListParams: store.ListParams{Limit: 10}})
	if err != nil || len(list) != 1 {
		t.Errorf("%d files recorded (%v), want 1", len(list), err)
	}
}

// TestFilesList: pages through every file with the SDK's auto-pager, filters by scope_id and by ids[].
func TestFilesList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFiles(t, filepath.Join(t.TempDir(), "blobs"), 1<<20))
	ctx := ctxT(t)
	var uploaded []string
	for i := range 5 {
		f, err := h.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
			File: anthropic.File(strings.NewReader(fmt.Sprint("file ", i)), fmt.Sprintf("f%d.txt", i), "text/plain")})
		if err != nil {
			t.Fatal(err)
		}
		uploaded = append(uploaded, f.ID)
	}
	// An output of a session, as the collector records it.
	scoped := &store.File{File: apitype.File{Type: apitype.ObjectFile, ID: apitype.NewID(apitype.PrefixFile), Filename: "out.txt",
		MimeType: "text/plain", SizeBytes: 1, CreatedAt: apitype.Now(), Downloadable: true,
		Scope: &apitype.FileScope{Type: apitype.FileScopeSession, ID: "sesn_x"}}, SHA256: "00", BlobKey: "files/none"}
	if err := h.store.FileCreate(ctx, scoped); err != nil {
		t.Fatal(err)
	}
	var seen []string
	pager := h.client.Beta.Files.ListAutoPaging(ctx, anthropic.BetaFileListParams{Limit: anthropic.Int(2)})
	for pager.Next() {
		seen = append(seen, pager.Current().ID)
	}
	if err := pager.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 6 || seen[0] != scoped.ID || seen[5] != uploaded[0] {
		t.Fatalf("paged %v; want the 6 files newest first", seen)
	}
	page, err := h.client.Beta.Files.List(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String("sesn_x")})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != scoped.ID || page.Data[0].Scope.ID != "sesn_x" ||
		page.Data[0].Scope.Type != "session" {
		t.Fatalf("by scope: %+v, %v", page, err)
	}
	st, _, body := h.do(http.MethodGet, "/v1/files?ids[]="+uploaded[1]+"&ids[]="+uploaded[3]+"&ids[]=file_missing", "")
	if st != http.StatusOK || !strings.Contains(string(body), uploaded[1]) || !strings.Contains(string(body), uploaded[3]) ||
		strings.Count(string(body), `"type":"file"`) != 2 {
		t.Fatalf("by ids: %d %s", st, body)
	}
	if st, _, _ := h.do(http.MethodGet, "/v1/files?ids[]="+uploaded[1]+"&limit=2", ""); st != http.StatusBadRequest {
		t.Errorf("ids with limit: %d", st)
	}
	if st, _, _ := h.do(http.MethodGet, "/v1/files?limit=1001", ""); st != http.StatusBadRequest {
		t.Errorf("limit 1001: %d", st)
	}
}

// TestFilesWithoutStorage: a server without file storage says so.
func TestFilesWithoutStorage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, err := h.client.Beta.Files.Upload(context.Background(), anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader("x"), "x", "text/plain")})
	wantAPIError(t, err, http.StatusNotImplemented, apitype.ErrAPI)
}

// seedFile records a file's metadata in st (no content), so that resources may name it.
func seedFile(t testing.TB, st store.Store, id string) {
	t.Helper()
	f := &store.File{File: apitype.File{Type: apitype.ObjectFile, ID: id, Filename: id, MimeType: "text/plain", SizeBytes: 1,
		CreatedAt: apitype.Now()}, SHA256: "00", BlobKey: "files/" + id}
	if err := st.FileCreate(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}

// TestFileResourceRefused: a file resource naming no file, or mounted outside the uploads and the workspace,
// is a 400 on create and on add.
func TestFileResourceRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	seedFile(t, h.store, "file_ok")
	sessID := h.newSession(ctx, agentID, envID)
	for _, res := range []string{
		`{"type":"file","file_id":"file_missing"}`,
		`{"type":"file","file_id":"file_ok","mount_path":"/etc/passwd"}`,
		`{"type":"file","file_id":"file_ok","mount_path":"/mnt/session/outputs/x"}`,
		`{"type":"file","file_id":"file_ok","mount_path":"/workspace"}`,
	} {
		body := `{"agent":"` + agentID + `","environment_id":"` + envID + `","resources":[` + res + `]}`
		if st, _, b := h.do(http.MethodPost, "/v1/sessions", body); st != http.StatusBadRequest {
			t.Errorf("create with %s: %d %s", res, st, b)
		}
		if st, _, b := h.do(http.MethodPost, "/v1/sessions/"+sessID+"/resources", res); st != http.StatusBadRequest {
			t.Errorf("add %s: %d %s", res, st, b)
		}
	}
	if st, _, b := h.do(http.MethodPost, "/v1/sessions/"+sessID+"/resources", `{"type":"file","file_id":"file_ok","mount_path":"/workspace/in/ok.txt"}`); st != http.StatusOK {
		t.Errorf("a file in the workspace: %d %s", st, b)
	}
}

// TestFilesSessionsToken: the sessions token of a self-hosted session's work item reads its session's file
// resources and the files scoped to its session, and no other file (another session's resource or output, an
// unrelated file, a file that does not exist: all the same 403); what it uploads is an output of its session
// (scoped to it, listed by scope_id), whatever the upload says, within the session's output quota (a 413 past
// it, nothing stored); it lists and deletes no file.
func TestFilesSessionsToken(t *testing.T) {
	t.Parallel()
	blobs := filepath.Join(t.TempDir(), "blobs")
	h := newHarness(t, withFiles(t, blobs, 1<<20), func(c *api.Config) { c.MaxSessionOutputBytes = 20 })
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	envID, key, _ := h.selfHosted(ctx, agentID)
	upload := func(name, content string, opts ...option.RequestOption) *anthropic.BetaFileMetadata {
		t.Helper()
		f, err := h.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
			File: anthropic.File(strings.NewReader(content), name, "text/plain")}, opts...)
		if err != nil {
			t.Fatalf("upload %s: %v", name, err)
		}
		return f
	}
	mine, theirs, unrelated := upload("mine.txt", "mine"), upload("theirs.txt", "theirs"), upload("unrelated.txt", "unrelated")
	session := func(fileID string) string {
		t.Helper()
		s, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
			Resources: []anthropic.BetaSessionNewParamsResourceUnion{{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{
				FileID: fileID, MountPath: anthropic.String("/mnt/session/uploads/in.txt")}}}})
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	// token claims the session's work item and returns its sessions token.
	token := func(sessID string) string {
		t.Helper()
		w := h.queue(ctx, envID, sessID)
		var polled apitype.Work
		status, _, body := h.do("GET", "/v1/environments/"+envID+"/work/poll", "", bearer(key)...)
		decodeRaw(t, string(body), &polled)
		if status != http.StatusOK || polled.ID != w.ID || polled.Secret == nil {
			t.Fatalf("poll: %d %s", status, body)
		}
		return apitype.SessionsTokenFromSecret(*polled.Secret)
	}
	as := func(token string) []option.RequestOption {
		return []option.RequestOption{option.WithHeaderDel("X-Api-Key"), option.WithAuthToken(token)}
	}
	s1, s2 := session(mine.ID), session(theirs.ID)
	raw1 := token(s1)
	tok1, tok2 := as(raw1), as(token(s2))

	read := func(id string, tok []option.RequestOption) (string, error) {
		t.Helper()
		if _, err := h.client.Beta.Files.GetMetadata(ctx, id, anthropic.BetaFileGetMetadataParams{}, tok...); err != nil {
			return "", err
		}
		resp, err := h.client.Beta.Files.Download(ctx, id, anthropic.BetaFileDownloadParams{}, tok...)
		if err != nil {
			t.Fatalf("%s: the metadata is readable, the content not: %v", id, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), nil
	}
	if got, err := read(mine.ID, tok1); err != nil || got != "mine" {
		t.Fatalf("the token reads its session's file resource: %q %v", got, err)
	}

	// Its uploads are outputs of its session, even with a scope field of another's.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "report.txt")
	fw.Write([]byte("report"))
	mw.WriteField("scope_id", s2)
	mw.Close()
	var out apitype.File
	status, _, resp := h.do(http.MethodPost, "/v1/files", body.String(), append(bearer(raw1), "Content-Type", mw.FormDataContentType())...)
	decodeRaw(t, string(resp), &out)
	if status != http.StatusOK || out.Scope == nil || out.Scope.Type != apitype.FileScopeSession || out.Scope.ID != s1 {
		t.Fatalf("a token's upload: %d %s", status, resp)
	}
	theirOut := upload("their-report.txt", "theirs", tok2...)
	if got, err := read(out.ID, tok1); err != nil || got != "report" {
		t.Fatalf("the token reads its session's output: %q %v", got, err)
	}
	page, err := h.client.Beta.Files.List(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String(s1)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != out.ID {
		t.Fatalf("the session's outputs: %v %s", err, page.RawJSON())
	}
	// The quota counts every file scoped to the session (6 bytes so far): 15 more are refused, 14 fit.
	blobsBefore := blobCount(t, blobs)
	_, err = h.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader(strings.Repeat("x", 15)), "big.txt", "text/plain")}, tok1...)
	if aerr := wantAPIError(t, err, http.StatusRequestEntityTooLarge, apitype.ErrRequestTooLarge); !strings.Contains(aerr.Message, "quota") {
		t.Errorf("over the quota: %s", aerr.Message)
	}
	if n := blobCount(t, blobs); n != blobsBefore {
		t.Errorf("%d blobs after a refused upload, %d before", n, blobsBefore)
	}
	upload("fits.txt", strings.Repeat("x", 14), tok1...)
	if page, err := h.client.Beta.Files.List(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String(s1)}); err != nil || len(page.Data) != 2 {
		t.Fatalf("the session's outputs after the quota: %v %s", err, page.RawJSON())
	}

	// Refusals, all alike: another session's resource and output, an unrelated file, no file at all.
	for _, id := range []string{theirs.ID, theirOut.ID, unrelated.ID, "file_nope"} {
		_, err := h.client.Beta.Files.GetMetadata(ctx, id, anthropic.BetaFileGetMetadataParams{}, tok1...)
		if aerr := wantAPIError(t, err, http.StatusForbidden, apitype.ErrPermission); !strings.Contains(aerr.Message, id) {
			t.Errorf("metadata of %s: %s", id, aerr.Message)
		}
		_, err = h.client.Beta.Files.Download(ctx, id, anthropic.BetaFileDownloadParams{}, tok1...)
		wantAPIError(t, err, http.StatusForbidden, apitype.ErrPermission)
	}
	// Listing and deleting take the API key: the token is not one.
	_, err = h.client.Beta.Files.List(ctx, anthropic.BetaFileListParams{ScopeID: anthropic.String(s1)}, tok1...)
	wantAPIError(t, err, http.StatusUnauthorized, apitype.ErrAuthentication)
	_, err = h.client.Beta.Files.Delete(ctx, out.ID, anthropic.BetaFileDeleteParams{}, tok1...)
	wantAPIError(t, err, http.StatusUnauthorized, apitype.ErrAuthentication)
	// The other token reads its own.
	if got, err := read(theirs.ID, tok2); err != nil || got != "theirs" {
		t.Fatalf("the other token reads its session's file resource: %q %v", got, err)
	}
	// Concurrent uploads cannot each pass the quota on what the others have not recorded yet: the other session
	// has 6 bytes of outputs, so of 8 uploads of 5 bytes at once exactly 2 fit.
	var wg sync.WaitGroup
	var stored atomic.Int32
	for range 8 {
		wg.Go(func() {
			if _, err := h.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
				File: anthropic.File(strings.NewReader("12345"), "c.txt", "text/plain")}, tok2...); err == nil {
				stored.Add(1)
			}
		})
	}
	wg.Wait()
	if n := stored.Load(); n != 2 {
		t.Errorf("%d of 8 concurrent uploads of 5 bytes stored under 14 bytes of quota, want 2", n)
	}
}
