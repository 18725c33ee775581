// Package blobtest is the conformance suite of the blob port: every adapter runs Run with a function that opens
// a fresh, empty store for one test.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/blob"
)

// Run runs every conformance test as a parallel subtest of t, each on a store of its own from open.
func Run(t *testing.T, open func(t *testing.T) blob.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s blob.Store)
	}{
		{"PutOpenDelete", testPutOpenDelete},
		{"Replace", testReplace},
		{"Empty", testEmpty},
		{"Large", testLarge},
		{"FailedReader", testFailedReader},
		{"Cancelled", testCancelled},
		{"InvalidKeys", testInvalidKeys},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func read(t *testing.T, s blob.Store, key string) []byte {
	t.Helper()
	rc, size, err := s.Open(ctx(t), key)
	if err != nil {
		t.Fatalf("open %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if int64(len(b)) != size {
		t.Fatalf("open %s: size %d, read %d bytes", key, size, len(b))
	}
	return b
}

func put(t *testing.T, s blob.Store, key string, data []byte) {
	t.Helper()
	n, err := s.Put(ctx(t), key, bytes.NewReader(data))
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	if n != int64(len(data)) {
		t.Fatalf("put %s: %d bytes, want %d", key, n, len(data))
	}
}

func notFound(t *testing.T, s blob.Store, key string) {
	t.Helper()
	rc, _, err := s.Open(ctx(t), key)
	if err == nil {
		rc.Close()
		t.Fatalf("open %s: found, want ErrNotFound", key)
	}
	if !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("open %s: %v, want ErrNotFound", key, err)
	}
}

func testPutOpenDelete(t *testing.T, s blob.Store) {
	notFound(t, s, "files/file_1")
	data := []byte("hello\x00\xff world")
	put(t, s, "files/file_1", data)
	if got := read(t, s, "files/file_1"); !bytes.Equal(got, data) {
		t.Fatalf("read %q, want %q", got, data)
	}
	put(t, s, "files/file_2", []byte("other"))
	if err := s.Delete(ctx(t), "files/file_1"); err != nil {
		t.Fatal(err)
	}
	notFound(t, s, "files/file_1")
	if err := s.Delete(ctx(t), "files/file_1"); err != nil {
		t.Fatalf("delete twice: %v", err)
	}
	if got := read(t, s, "files/file_2"); string(got) != "other" {
		t.Fatalf("the other blob reads %q", got)
	}
}

func testReplace(t *testing.T, s blob.Store) {
	put(t, s, "k", []byte("one"))
	put(t, s, "k", []byte("two, longer"))
	if got := read(t, s, "k"); string(got) != "two, longer" {
		t.Fatalf("read %q", got)
	}
}

func testEmpty(t *testing.T, s blob.Store) {
	put(t, s, "empty", nil)
	if got := read(t, s, "empty"); len(got) != 0 {
		t.Fatalf("read %d bytes", len(got))
	}
}

// pattern yields n pseudo-random bytes without holding them.
type pattern struct {
	n, off int64
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	for i := range b {
		x := uint64(p.off + int64(i))
		b[i] = byte((x * 2654435761) >> 13)
	}
	p.off += int64(len(b))
	return len(b), nil
}

func testLarge(t *testing.T, s blob.Store) {
	const size = 32 << 20
	want := sha256.New()
	_, _ = io.Copy(want, &pattern{n: size})
	n, err := s.Put(ctx(t), "big/one", &pattern{n: size})
	if err != nil || n != size {
		t.Fatalf("put: %d, %v", n, err)
	}
	rc, got, err := s.Open(ctx(t), "big/one")
	if err != nil || got != size {
		t.Fatalf("open: %d, %v", got, err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Fatal("the blob read back differs from what was put")
	}
}

// failing yields some bytes, then fails.
type failing struct{ n int }

var errBoom = errors.New("boom")

func (f *failing) Read(b []byte) (int, error) {
	if f.n <= 0 {
		return 0, errBoom
	}
	k := min(len(b), f.n)
	clear(b[:k])
	f.n -= k
	return k, nil
}

func testFailedReader(t *testing.T, s blob.Store) {
	if _, err := s.Put(ctx(t), "broken", &failing{n: 1 << 20}); !errors.Is(err, errBoom) {
		t.Fatalf("put from a failing reader: %v, want its error", err)
	}
	notFound(t, s, "broken")
	put(t, s, "kept", []byte("old"))
	if _, err := s.Put(ctx(t), "kept", &failing{n: 10}); err == nil {
		t.Fatal("put from a failing reader succeeded")
	}
	if got := read(t, s, "kept"); string(got) != "old" {
		t.Fatalf("a failed replacement left %q", got)
	}
}

func testCancelled(t *testing.T, s blob.Store) {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(c, "cancelled", &pattern{n: 1 << 20}); !errors.Is(err, context.Canceled) {
		t.Fatalf("put with a cancelled context: %v", err)
	}
	notFound(t, s, "cancelled")
}

func testInvalidKeys(t *testing.T, s blob.Store) {
	for _, k := range []string{"", "/abs", "../up", "a/../../b", "a//b", ".hidden", "a/.tmp/x", "a\\b", "a b", "é",
		string(bytes.Repeat([]byte("a"), blob.MaxKeyLen+1))} {
		if _, err := s.Put(ctx(t), k, bytes.NewReader([]byte("x"))); err == nil {
			t.Errorf("put %q succeeded", k)
		}
		if rc, _, err := s.Open(ctx(t), k); err == nil {
			rc.Close()
			t.Errorf("open %q succeeded", k)
		}
		if err := s.Delete(ctx(t), k); err == nil {
			t.Errorf("delete %q succeeded", k)
		}
	}
}

func testConcurrent(t *testing.T, s blob.Store) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			key := fmt.Sprintf("c/%d", i%4)
			data := bytes.Repeat([]byte{byte(i % 4)}, 64<<10)
			if _, err := s.Put(ctx(t), key, bytes.NewReader(data)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range 4 {
		got := read(t, s, fmt.Sprintf("c/%d", i))
		if !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 64<<10)) {
			t.Fatalf("blob c/%d is torn", i)
		}
	}
}
