package api

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/store"
)

// Files API limits.
const (
	maxFileListLimit = 1000
	maxFileIDs       = 100
	minFileExpiry    = 3600
	maxFileExpiry    = 7776000
	// multipartOverhead is what a request may carry besides the file's bytes: headers of its parts and the
	// small fields.
	multipartOverhead = 1 << 20
	// ioIdleTimeout bounds each read of an upload and each write of a download: a transfer may take as long
	// as it needs while it moves, and a stalled one is cut.
	ioIdleTimeout = time.Minute
)

// errNoFiles answers the Files API of a server configured without file storage.
var errNoFiles = &apiError{status: http.StatusNotImplemented, typ: apitype.ErrAPI,
	msg: "this server has no file storage configured"}

func (s *Server) fileUploadLimit() int64 {
	if s.files == nil {
		return s.maxBody
	}
	return s.files.MaxBytes() + multipartOverhead
}

// deadlineReader extends the connection's read deadline before each read of an upload, and its write deadline
// with it: the answer is written after the upload, however long it took.
type deadlineReader struct {
	r  io.Reader
	rc *http.ResponseController
}

func (d deadlineReader) Read(p []byte) (int, error) {
	deadline := time.Now().Add(ioIdleTimeout)
	_ = d.rc.SetReadDeadline(deadline)
	_ = d.rc.SetWriteDeadline(deadline)
	return d.r.Read(p)
}

// deadlineWriter extends the connection's write deadline before each write.
type deadlineWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(ioIdleTimeout))
	return d.w.Write(p)
}

// fileUpload streams the multipart part "file" into the blob store and records its metadata. The part is
// never held in memory: its bytes go to the blob store as they arrive, hashed on the way.
func (s *Server) fileUpload(w http.ResponseWriter, r *http.Request) error {
	if s.files == nil {
		return errNoFiles
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return invalid("", "the body must be multipart/form-data with a part named file, got Content-Type %q",
			r.Header.Get("Content-Type"))
	}
	rc := http.NewResponseController(w)
	r.Body = readCloser{deadlineReader{r.Body, rc}, r.Body}
	mr, err := r.MultipartReader()
	if err != nil {
		return invalid("", "malformed multipart body: %v", err)
	}
	meta := &apitype.File{Type: apitype.ObjectFile, ID: apitype.NewID(apitype.PrefixFile), Downloadable: true}
	var (
		content *files.Content
		expires int64
	)
	fail := func(err error) error {
		if content != nil {
			s.files.Discard(r.Context(), content)
		}
		return err
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(multipartErr(err))
		}
		switch part.FormName() {
		case "file":
			if content != nil {
				return fail(invalid("file", "given more than once"))
			}
			ct := part.Header.Get("Content-Type")
			meta.Filename = files.CleanFilename(part.FileName(), ct)
			meta.MimeType = files.MimeType(meta.Filename, ct)
			content, err = s.files.Put(r.Context(), meta.ID, part)
			switch {
			case errors.Is(err, files.ErrTooLarge):
				return &apiError{status: http.StatusRequestEntityTooLarge, typ: apitype.ErrRequestTooLarge,
					msg: fmt.Sprintf("file: larger than the limit of %d bytes", s.files.MaxBytes())}
			case errors.Is(err, files.ErrEmpty):
				return invalid("file", "the file is empty")
			case errors.Is(err, files.ErrNoSpace):
				return &apiError{status: http.StatusInsufficientStorage, typ: apitype.ErrAPI,
					msg: "file: the server's disk is down to its reserve; nothing was stored"}
			case err != nil:
				return multipartErr(err)
			}
		case "expires_in_seconds":
			b, err := io.ReadAll(io.LimitReader(part, 32))
			if err != nil {
				return fail(multipartErr(err))
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil || n < minFileExpiry || n > maxFileExpiry {
				return fail(invalid("expires_in_seconds", "must be an integer between %d and %d", minFileExpiry, maxFileExpiry))
			}
			expires = n
		}
		// Other parts are skipped (NextPart discards what was not read).
	}
	if content == nil {
		return invalid("file", "required: a multipart part named file")
	}
	if c := callerOf(r.Context()); c != nil && c.kind == kindToken {
		// A sessions token uploads its session's outputs, and nothing else.
		meta.Scope = &apitype.FileScope{Type: apitype.FileScopeSession, ID: c.work.Data.ID}
		// The check and the record are one step for the session's uploads in this process: concurrent uploads
		// cannot each pass the quota on what the others have not recorded yet.
		mu := s.outputLock(c.work.Data.ID)
		mu.Lock()
		defer mu.Unlock()
		if err := s.checkOutputQuota(r.Context(), c.work.Data.ID, content.Size); err != nil {
			return fail(err)
		}
	}
	meta.CreatedAt = s.now()
	if expires > 0 {
		at := meta.CreatedAt.Add(time.Duration(expires) * time.Second)
		meta.ExpiresAt = &at
	}
	if meta.Scope == nil { // Record makes a session's output its session's workspace's
		if err := s.own(r.Context(), meta.ID); err != nil {
			s.files.Discard(r.Context(), content)
			return err
		}
	}
	f, err := s.files.Record(r.Context(), meta, content)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, &f.File)
}

// outputLock is the lock of a session's uploads through its sessions token: one of a fixed set, picked by the
// session's id, so that the locks take no memory per session.
func (s *Server) outputLock(sessionID string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sessionID))
	return &s.outputLocks[h.Sum32()%uint32(len(s.outputLocks))]
}

// checkOutputQuota refuses an output of size bytes that would bring the files scoped to the session past
// Config.MaxSessionOutputBytes.
func (s *Server) checkOutputQuota(ctx context.Context, sessionID string, size int64) error {
	total := size
	p := store.FileListParams{ScopeID: sessionID, ListParams: store.ListParams{Limit: maxFileListLimit}}
	for {
		page, err := s.store.FileList(ctx, &p)
		if err != nil {
			return err
		}
		for i := range page {
			total += page[i].SizeBytes
		}
		if total > s.maxOutputs {
			return &apiError{status: http.StatusRequestEntityTooLarge, typ: apitype.ErrRequestTooLarge,
				msg: fmt.Sprintf("file: the session's outputs would exceed their quota of %d bytes", s.maxOutputs)}
		}
		if len(page) < p.Limit {
			return nil
		}
		last := page[len(page)-1]
		p.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// fileOfSession lets a sessions token read a file only if it is a file resource of its session or a file scoped
// to its session (one of its outputs). Any other file, existing or not, is refused alike.
func (s *Server) fileOfSession(r *http.Request, wk *apitype.Work) error {
	id := r.PathValue("file_id")
	sess, err := s.store.SessionGet(r.Context(), wk.Data.ID)
	if err != nil {
		return lookup(err, "session", wk.Data.ID)
	}
	if slices.ContainsFunc(sess.Resources, func(res apitype.Resource) bool {
		return res.Type == apitype.ResourceFile && res.FileID == id
	}) {
		return nil
	}
	f, err := s.store.FileGet(r.Context(), id)
	switch {
	case err == nil && f.Scope != nil && f.Scope.Type == apitype.FileScopeSession && f.Scope.ID == sess.ID:
		return nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	}
	return errForbidden("this sessions token may read only its session's files and outputs, not %s", id)
}

// outputOfSession lets a sessions token upload only while its session exists: fileUpload scopes the file to it.
func (s *Server) outputOfSession(r *http.Request, wk *apitype.Work) error {
	if _, err := s.store.SessionState(r.Context(), wk.Data.ID); err != nil {
		return lookup(err, "session", wk.Data.ID)
	}
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// multipartErr maps an error reading the upload to the envelope: too large, or malformed.
func multipartErr(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return errTooLarge(tooLarge.Limit)
	}
	return invalid("", "reading the multipart body: %v", err)
}

func (s *Server) fileList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	ids := q.list("ids")
	p := store.FileListParams{ScopeID: q.str("scope_id")}
	if len(ids) > 0 {
		if len(ids) > maxFileIDs {
			return invalid("ids", "at most %d ids", maxFileIDs)
		}
		if q.str("page") != "" || q.str("limit") != "" {
			return invalid("ids", "cannot be combined with page or limit")
		}
		p.IDs, p.Limit, p.Desc, p.Workspace = ids, maxFileIDs, true, workspaceOf(r)
		data, err := s.store.FileList(r.Context(), &p)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, listPage[apitype.File]{Data: fileViews(data)})
	}
	lp, limit, c, err := listParams(q, defaultLimit, maxFileListLimit)
	if err != nil {
		return err
	}
	lp.Desc = true
	data, next, _, err := listByCreated(lp, limit, c, false,
		func(lp *store.ListParams) ([]store.File, error) {
			p.ListParams = *inWorkspace(r, lp)
			return s.store.FileList(r.Context(), &p)
		},
		func(f *store.File) (time.Time, string) { return f.CreatedAt, f.ID })
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.File]{Data: fileViews(data), NextPage: next})
}

func fileViews(fs []store.File) []apitype.File {
	out := make([]apitype.File, len(fs))
	for i := range fs {
		out[i] = fs[i].File
	}
	return out
}

func (s *Server) fileGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("file_id")
	f, err := s.store.FileGet(r.Context(), id)
	if err != nil {
		return lookup(err, "file", id)
	}
	return writeJSON(w, http.StatusOK, &f.File)
}

func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) error {
	if s.files == nil {
		return errNoFiles
	}
	id := r.PathValue("file_id")
	f, rc, err := s.files.Open(r.Context(), id)
	if err != nil {
		return lookup(err, "file", id)
	}
	defer rc.Close()
	if f.ExpiresAt != nil && !s.now().Before(*f.ExpiresAt) {
		return &apiError{status: http.StatusNotFound, typ: apitype.ErrNotFound, code: "file_expired",
			msg: fmt.Sprintf("file %q has expired", id)}
	}
	if !f.Downloadable {
		return invalidCode("file_not_downloadable", "file %q cannot be downloaded", id)
	}
	h := w.Header()
	h.Set("Content-Type", f.MimeType)
	h.Set("Content-Length", strconv.FormatInt(f.SizeBytes, 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Filename}))
	h.Set("X-Content-Type-Options", "nosniff") // the type is the uploader's word
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(deadlineWriter{w, http.NewResponseController(w)}, rc) // a failed copy means the client went away
	return nil
}

func (s *Server) fileDelete(w http.ResponseWriter, r *http.Request) error {
	if s.files == nil {
		return errNoFiles
	}
	id := r.PathValue("file_id")
	if err := s.files.Delete(r.Context(), id); err != nil {
		return lookup(err, "file", id)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "file_deleted"})
}
