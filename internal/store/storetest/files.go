package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func newFile(created time.Time, scope string) *store.File {
	f := &store.File{File: apitype.File{Type: apitype.ObjectFile, ID: apitype.NewID(apitype.PrefixFile), Filename: "a b.txt",
		MimeType: "text/plain", SizeBytes: 42, CreatedAt: created, Downloadable: true},
		SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	f.BlobKey = "files/" + f.ID
	if scope != "" {
		f.Scope = &apitype.FileScope{Type: apitype.FileScopeSession, ID: scope}
	}
	return f
}

func fileID(f *store.File) string { return f.ID }

func testFile(t *testing.T, h Harness) {
	s := h.open(t)
	f := newFile(base, "sesn_1")
	exp := base.Add(time.Hour)
	f.ExpiresAt = &exp
	must(t, s.FileCreate(ctxBg, f), "create file")
	mustIs(t, s.FileCreate(ctxBg, f), store.ErrConflict, "create file twice")
	got, err := s.FileGet(ctxBg, f.ID)
	must(t, err, "get file")
	equal(t, got.Filename, "a b.txt", "filename")
	equal(t, got.MimeType, "text/plain", "mime type")
	equal(t, got.SizeBytes, int64(42), "size")
	equal(t, got.SHA256, f.SHA256, "sha256")
	equal(t, got.BlobKey, f.BlobKey, "blob key")
	equal(t, got.Downloadable, true, "downloadable")
	sameTime(t, got.CreatedAt, base, "created_at")
	if got.ExpiresAt == nil || got.Scope == nil {
		t.Fatalf("expires_at %v, scope %v", got.ExpiresAt, got.Scope)
	}
	sameTime(t, *got.ExpiresAt, exp, "expires_at")
	equal(t, *got.Scope, apitype.FileScope{Type: apitype.FileScopeSession, ID: "sesn_1"}, "scope")
	_, err = s.FileGet(ctxBg, "file_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown file")
	must(t, s.FileDelete(ctxBg, f.ID), "delete file")
	_, err = s.FileGet(ctxBg, f.ID)
	mustIs(t, err, store.ErrNotFound, "get deleted file")
	mustIs(t, s.FileDelete(ctxBg, f.ID), store.ErrNotFound, "delete twice")
}

func testFileList(t *testing.T, h Harness) {
	s := h.open(t)
	var all []*store.File
	for i := range 6 {
		scope := ""
		if i%2 == 1 {
			scope = "sesn_a"
		}
		f := newFile(base.Add(time.Duration(i)*time.Second), scope)
		must(t, s.FileCreate(ctxBg, f), "create file")
		all = append(all, f)
	}
	want := func(idx ...int) string {
		out := make([]store.File, len(idx))
		for i, j := range idx {
			out[i] = *all[j]
		}
		return ids(out, fileID)
	}
	list := func(p store.FileListParams) string {
		t.Helper()
		got, err := s.FileList(ctxBg, &p)
		must(t, err, fmt.Sprintf("list %+v", p))
		return ids(got, fileID)
	}
	equal(t, list(store.FileListParams{ListParams: store.ListParams{Limit: 10}}), want(0, 1, 2, 3, 4, 5), "all")
	equal(t, list(store.FileListParams{ListParams: store.ListParams{Limit: 2, Desc: true}}), want(5, 4), "newest two")
	equal(t, list(store.FileListParams{ListParams: store.ListParams{Limit: 10, Desc: true,
		After: &store.Cursor{CreatedAt: all[4].CreatedAt, ID: all[4].ID}}}), want(3, 2, 1, 0), "after a cursor")
	equal(t, list(store.FileListParams{ListParams: store.ListParams{Limit: 10}, ScopeID: "sesn_a"}), want(1, 3, 5), "by scope")
	equal(t, list(store.FileListParams{ListParams: store.ListParams{Limit: 10}, ScopeID: "sesn_b"}), "", "other scope")
	equal(t, list(store.FileListParams{ListParams: store.ListParams{Limit: 10}, IDs: []string{all[2].ID, all[5].ID, "file_x"}}),
		want(2, 5), "by ids")
	equal(t, list(store.FileListParams{ListParams: store.ListParams{Limit: 10}, ScopeID: "sesn_a", IDs: []string{all[2].ID, all[3].ID}}),
		want(3), "by scope and ids")
}

func testFileExpired(t *testing.T, h Harness) {
	s := h.open(t)
	var all []*store.File
	for i, exp := range []time.Duration{3 * time.Hour, time.Hour, 0, 2 * time.Hour} {
		f := newFile(base.Add(time.Duration(i)*time.Second), "")
		if exp > 0 {
			at := base.Add(exp)
			f.ExpiresAt = &at
		}
		must(t, s.FileCreate(ctxBg, f), "create file")
		all = append(all, f)
	}
	expired := func(at time.Time, limit int) string {
		t.Helper()
		got, err := s.FileExpired(ctxBg, at, limit)
		must(t, err, "list expired")
		return ids(got, fileID)
	}
	equal(t, expired(base, 10), "", "nothing expired yet")
	equal(t, expired(base.Add(time.Hour), 10), all[1].ID, "expired at its time")
	equal(t, expired(base.Add(5*time.Hour), 10), all[1].ID+","+all[3].ID+","+all[0].ID, "earliest expiry first, none without expiry")
	equal(t, expired(base.Add(5*time.Hour), 1), all[1].ID, "limit")
}
