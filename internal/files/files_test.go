package files_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/blob/localfs"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

func TestCleanFilename(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"report.csv":             "report.csv",
		"../../etc/passwd":       "passwd",
		`C:\Users\a\b.txt`:       "b.txt",
		"dir/":                   "unnamed.pdf",
		"..":                     "unnamed.pdf",
		"a\x00b\nc.txt":          "abc.txt",
		"":                       "unnamed.pdf",
		strings.Repeat("é", 200): strings.Repeat("é", 127),
	} {
		if got := files.CleanFilename(in, "application/pdf"); got != want {
			t.Errorf("CleanFilename(%q) = %q, want %q", in, got, want)
		}
	}
	if got := files.MimeType("a.csv", "application/octet-stream"); got != "text/csv" {
		t.Errorf("MimeType of a.csv sent as octet-stream = %q", got)
	}
	if got := files.MimeType("a", "text/plain; charset=utf-8"); got != "text/plain" {
		t.Errorf("MimeType keeps parameters: %q", got)
	}
}

// newService is a files.Service over a SQLite store and a local blob store in a temporary directory, with
// upload limit maxBytes; it returns the blob store too.
func newService(t *testing.T, maxBytes int64) (*files.Service, *localfs.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), "sqlite://"+filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := localfs.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	svc, err := files.New(files.Config{Store: st, Blobs: blobs, MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return svc, blobs
}

// TestCreateLimits: the size limit and empty content store nothing; the content's digest is recorded.
func TestCreateLimits(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t, 10)
	if _, err := svc.Create(t.Context(), "a", "", nil, bytes.NewReader(make([]byte, 11))); !errors.Is(err, files.ErrTooLarge) {
		t.Fatalf("11 bytes over a 10-byte limit: %v", err)
	}
	if _, err := svc.Create(t.Context(), "a", "", nil, bytes.NewReader(nil)); !errors.Is(err, files.ErrEmpty) {
		t.Fatalf("empty: %v", err)
	}
	f, err := svc.Create(t.Context(), "a.txt", "", nil, strings.NewReader("abc"))
	if err != nil {
		t.Fatal(err)
	}
	if f.SizeBytes != 3 || f.SHA256 != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" || f.MimeType != "text/plain" {
		t.Fatalf("created %+v", f)
	}
	if err := svc.Delete(t.Context(), f.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Open(t.Context(), f.ID); err == nil {
		t.Fatal("a deleted file opens")
	}
}

// TestSweepExpired: expired files go, bytes and metadata; the others stay.
func TestSweepExpired(t *testing.T) {
	t.Parallel()
	svc, blobs := newService(t, 1<<20)
	now := apitype.Now()
	create := func(expires *time.Time) string {
		meta := &apitype.File{Type: apitype.ObjectFile, ID: apitype.NewID(apitype.PrefixFile), Filename: "f", MimeType: "text/plain",
			CreatedAt: now, Downloadable: true, ExpiresAt: expires}
		c, err := svc.Put(t.Context(), meta.ID, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Record(t.Context(), meta, c); err != nil {
			t.Fatal(err)
		}
		return meta.ID
	}
	past, future := now.Add(-time.Second), now.Add(time.Hour)
	gone, kept, forever := create(&past), create(&future), create(nil)
	n, err := svc.SweepExpired(t.Context(), now)
	if err != nil || n != 1 {
		t.Fatalf("swept %d, %v; want 1", n, err)
	}
	if _, _, err := svc.Open(t.Context(), gone); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the expired file: %v", err)
	}
	if _, _, err := blobs.Open(t.Context(), "files/"+gone); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("the expired file's bytes: %v", err)
	}
	for _, id := range []string{kept, forever} {
		if _, rc, err := svc.Open(t.Context(), id); err != nil {
			t.Errorf("file %s: %v", id, err)
		} else {
			rc.Close()
		}
	}
}

// TestNewValidates: a service without its store or its blob store is refused at New.
func TestNewValidates(t *testing.T) {
	_, blobs := newService(t, 0)
	if _, err := files.New(files.Config{Blobs: blobs}); err == nil {
		t.Error("New without a store: no error")
	}
	if _, err := files.New(files.Config{}); err == nil {
		t.Error("New without a store and blobs: no error")
	}
}

// TestSpace: with a disk check (the sandboxes' reserve), a write fails with ErrNoSpace as soon as the check does,
// before or while the bytes are written, and nothing is stored; the check is asked of the blobs' directory.
func TestSpace(t *testing.T) {
	t.Parallel()
	svc, blobs := newService(t, 64<<20)
	var checks int
	var full bool
	svc.SetSpace(func(dir string) error {
		if dir != blobs.Dir() {
			t.Errorf("checked %s, not the blobs' directory %s", dir, blobs.Dir())
		}
		checks++
		if full {
			return errors.New("below the reserve")
		}
		return nil
	})
	if _, err := svc.Create(t.Context(), "small.txt", "", nil, strings.NewReader("abc")); err != nil || checks == 0 {
		t.Fatalf("a write with space: %v (%d checks)", err, checks)
	}
	full = true
	if _, err := svc.Create(t.Context(), "refused.txt", "", nil, strings.NewReader("abc")); !errors.Is(err, files.ErrNoSpace) {
		t.Fatalf("a write below the reserve: %v", err)
	}
	// The disk fills during a 16 MiB write: it stops at the next check and leaves nothing.
	full, checks = false, 0
	svc.SetSpace(func(string) error {
		if checks++; checks > 2 {
			return errors.New("below the reserve")
		}
		return nil
	})
	if _, err := svc.Create(t.Context(), "big.bin", "", nil, bytes.NewReader(make([]byte, 16<<20))); !errors.Is(err, files.ErrNoSpace) {
		t.Fatalf("a write that fills the disk: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(blobs.Dir(), "files", "*"))
	tmp, _ := filepath.Glob(filepath.Join(blobs.Dir(), ".tmp", "*"))
	if len(left) != 1 || len(tmp) != 0 {
		t.Fatalf("blobs left: %v, temporary files: %v; want only small.txt's", left, tmp)
	}
}
