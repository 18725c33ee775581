package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/blob/blobtest"
	"github.com/corralhq/corral/internal/blob/s3"
	"github.com/corralhq/corral/internal/blob/s3/s3test"
)

// The suite runs against a real S3-compatible server (s3test: SeaweedFS's weed), started once for the package.
var (
	server      *s3test.Server
	unavailable error
)

func TestMain(m *testing.M) {
	server, unavailable = s3test.Start()
	code := m.Run()
	if server != nil {
		if err := server.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop weed:", err)
		}
	}
	os.Exit(code)
}

func require(t *testing.T) {
	t.Helper()
	s3test.Require(t, unavailable)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// openPrefix opens a store on the test bucket under a prefix of its own, so that each test's store starts
// empty. The smallest part size makes the suite's larger blobs multipart uploads of several parts.
func openPrefix(t *testing.T, partSize int64) (*s3.Store, string) {
	t.Helper()
	require(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "t" + hex.EncodeToString(b[:]) + "/"
	s, err := s3.Open(ctx(t), s3.Config{Endpoint: server.Endpoint, Bucket: server.Bucket, Prefix: prefix,
		AccessKey: server.AccessKey, SecretKey: server.SecretKey, PartSize: partSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, prefix
}

func TestConformance(t *testing.T) {
	require(t)
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, prefix := openPrefix(t, 5<<20)
		t.Cleanup(func() { noUploads(t, prefix) })
		return s
	})
}

// noUploads fails the test if a multipart upload under prefix was left neither completed nor aborted (its parts
// would take space for ever).
func noUploads(t *testing.T, prefix string) {
	t.Helper()
	c, err := server.Client()
	if err != nil {
		t.Fatal(err)
	}
	for u := range c.ListIncompleteUploads(ctx(t), server.Bucket, prefix, true) {
		if u.Err != nil {
			t.Fatalf("list incomplete uploads: %v", u.Err)
		}
		t.Errorf("upload of %s left incomplete (started %v)", u.Key, u.Initiated)
	}
}

// failAfter yields n zero bytes, then fails; or, with cancel set, cancels its caller's ctx and yields rest more
// bytes before io.EOF (the caller must notice the cancelled ctx on its own).
type failAfter struct {
	n, rest int64
	cancel  context.CancelFunc
}

var errBoom = errors.New("boom")

func (f *failAfter) Read(b []byte) (int, error) {
	if f.n == 0 {
		switch {
		case f.cancel != nil:
			f.cancel()
			f.cancel, f.n, f.rest = nil, f.rest, -1
		case f.rest < 0:
			return 0, io.EOF
		default:
			return 0, errBoom
		}
	}
	k := min(int64(len(b)), f.n)
	clear(b[:k])
	f.n -= k
	return int(k), nil
}

// TestAbortedMultipart: a reader failing, or ctx cancelled, after several parts were uploaded leaves no object
// and no incomplete upload (the upload is aborted), and a blob it would have replaced stays.
func TestAbortedMultipart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cancel bool
	}{{"FailingReader", false}, {"Cancelled", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, prefix := openPrefix(t, 5<<20)
			if _, err := s.Put(ctx(t), "kept", &failAfter{n: 3}); err == nil {
				t.Fatal("a failing reader's put succeeded")
			}
			putCtx, cancel := context.WithCancel(ctx(t))
			defer cancel()
			r := &failAfter{n: 12 << 20} // two parts of 5 MiB and some
			if tc.cancel {
				r.cancel, r.rest = cancel, 12<<20
			}
			_, err := s.Put(putCtx, "big", r)
			if want := map[bool]error{false: errBoom, true: context.Canceled}[tc.cancel]; !errors.Is(err, want) {
				t.Fatalf("put: %v, want %v", err, want)
			}
			if rc, _, err := s.Open(ctx(t), "big"); !errors.Is(err, blob.ErrNotFound) {
				if err == nil {
					rc.Close()
				}
				t.Fatalf("open after an aborted put: %v, want ErrNotFound", err)
			}
			noUploads(t, prefix)
		})
	}
}

// TestConfig: a bad configuration is refused before any request, and a missing bucket when opening.
func TestConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []s3.Config{
		{Bucket: "b"},
		{Endpoint: "127.0.0.1:1"},
		{Endpoint: "127.0.0.1:1", Bucket: "b", Prefix: "no-slash"},
		{Endpoint: "127.0.0.1:1", Bucket: "b", Prefix: "../x/"},
		{Endpoint: "127.0.0.1:1", Bucket: "b", PartSize: 1 << 20},
		{Endpoint: "127.0.0.1:1", Bucket: "b", AccessKey: "only"},
		{Endpoint: "ftp://127.0.0.1:1", Bucket: "b"},
		{Endpoint: "http://127.0.0.1:1/path", Bucket: "b"},
	} {
		if _, err := s3.Open(ctx(t), cfg); err == nil {
			t.Errorf("open %+v succeeded", cfg)
		}
	}
	require(t)
	_, err := s3.Open(ctx(t), s3.Config{Endpoint: server.Endpoint, Bucket: "no-such-bucket",
		AccessKey: server.AccessKey, SecretKey: server.SecretKey})
	if err == nil {
		t.Fatal("open of a missing bucket succeeded")
	}
	_, err = s3.Open(ctx(t), s3.Config{Endpoint: server.Endpoint, Bucket: server.Bucket,
		AccessKey: server.AccessKey, SecretKey: "wrong"})
	if err == nil {
		t.Fatal("open with a wrong secret key succeeded")
	}
}

// stream yields n deterministic bytes without holding them.
type stream struct{ n, off int64 }

func (p *stream) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	for i := range b {
		b[i] = byte(uint64(p.off+int64(i)) * 2654435761 >> 13)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// heapWatch samples the heap's live objects until stopped, and reports the peak growth over the heap when it
// started, and the bytes allocated meanwhile.
func heapWatch() (stop func() (peak, allocated uint64)) {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	runtime.GC()
	metrics.Read(samples)
	base, allocs0 := samples[0].Value.Uint64(), samples[1].Value.Uint64()
	var max uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		s := slices.Clone(samples)
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > max {
				max = v
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() (uint64, uint64) {
		close(done)
		<-finished
		metrics.Read(samples)
		return max - min(max, base), samples[1].Value.Uint64() - allocs0
	}
}

// TestStreamMemory: a 100 MiB blob goes up through the adapter and comes back with a bounded heap: the peak
// growth of the live heap stays below three parts of the default 16 MiB, and so do the bytes allocated, where
// a copy of the blob would need 100 MiB. Not parallel: the heap is the whole process's.
func TestStreamMemory(t *testing.T) {
	s, _ := openPrefix(t, 0)
	const size = 100 << 20
	const bound = 3 * s3.DefaultPartSize
	want := sha256.New()
	stop := heapWatch()
	n, err := s.Put(ctx(t), "hundred", io.TeeReader(&stream{n: size}, want))
	peak, allocated := stop()
	if err != nil || n != size {
		t.Fatalf("put: %d, %v", n, err)
	}
	t.Logf("put of %d MiB: peak heap growth %.1f MiB, allocated %.1f MiB", size>>20, mib(peak), mib(allocated))
	if peak > bound || allocated > bound {
		t.Errorf("put of %d MiB: peak heap growth %.1f MiB, allocated %.1f MiB; want both under %d MiB",
			size>>20, mib(peak), mib(allocated), bound>>20)
	}

	stop = heapWatch()
	rc, got, err := s.Open(ctx(t), "hundred")
	if err != nil || got != size {
		t.Fatalf("open: %d, %v", got, err)
	}
	h := sha256.New()
	_, err = io.Copy(h, rc)
	rc.Close()
	peak, allocated = stop()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Fatal("the blob read back differs from what was put")
	}
	t.Logf("read of %d MiB: peak heap growth %.1f MiB, allocated %.1f MiB", size>>20, mib(peak), mib(allocated))
	if peak > bound || allocated > bound {
		t.Errorf("read of %d MiB: peak heap growth %.1f MiB, allocated %.1f MiB; want both under %d MiB",
			size>>20, mib(peak), mib(allocated), bound>>20)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
