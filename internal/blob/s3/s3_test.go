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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/blob/blobtest"
	"github.com/corralhq/corral/internal/blob/s3"
)

// The suite runs against a real S3-compatible server: SeaweedFS's weed, started once for the package. Its
// binary is CORRAL_TEST_S3_WEED or, where CI installs it, /opt/corral-weed/weed; without one the tests skip
// with the reason, or fail when CORRAL_REQUIRE_S3=1 or CI=true.
const (
	weedEnv     = "CORRAL_TEST_S3_WEED"
	weedDefault = "/opt/corral-weed/weed"
	requireEnv  = "CORRAL_REQUIRE_S3"
	bucket      = "corral-test"
	accessKey   = "corraltest"
	secretKey   = "corraltest-secret-key"
)

// server is the running weed's S3 endpoint, or why there is none.
var server struct {
	endpoint    string
	unavailable error
}

func TestMain(m *testing.M) {
	code, err := runWithWeed(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3 test:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// runWithWeed starts weed (when there is one), runs the tests and stops it.
func runWithWeed(m *testing.M) (int, error) {
	bin := os.Getenv(weedEnv)
	if bin == "" {
		bin = weedDefault
	}
	if _, err := os.Stat(bin); err != nil {
		server.unavailable = fmt.Errorf("no SeaweedFS weed binary (set %s; .ci/run builds one in %s): %w",
			weedEnv, weedDefault, err)
		return m.Run(), nil
	}
	dir, err := os.MkdirTemp("", "corral-weed-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	stop, endpoint, err := startWeed(bin, dir)
	if err != nil {
		server.unavailable = err
		return m.Run(), nil
	}
	server.endpoint = endpoint
	code := m.Run()
	return code, stop()
}

// freePorts returns n ports free on 127.0.0.1 now (weed takes them a moment later).
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startWeed starts a single-node weed (master, volume, filer and S3 gateway) on 127.0.0.1 with its data in dir,
// waits until its S3 gateway answers and creates the test bucket.
func startWeed(bin, dir string) (stop func() error, endpoint string, err error) {
	p, err := freePorts(8)
	if err != nil {
		return nil, "", err
	}
	logf, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "server", "-filer", "-s3",
		"-ip", "127.0.0.1", "-ip.bind", "127.0.0.1", "-dir", dir,
		"-master.port", strconv.Itoa(p[0]), "-master.port.grpc", strconv.Itoa(p[1]), "-master.telemetry=false",
		"-volume.port", strconv.Itoa(p[2]), "-volume.port.grpc", strconv.Itoa(p[3]),
		"-filer.port", strconv.Itoa(p[4]), "-filer.port.grpc", strconv.Itoa(p[5]),
		"-filer.localSocket", filepath.Join(dir, "filer.sock"),
		"-s3.port", strconv.Itoa(p[6]), "-s3.port.grpc", strconv.Itoa(p[7]),
		"-s3.localSocket", filepath.Join(dir, "s3.sock"), "-s3.port.iceberg", "0", "-s3.port.lance", "0")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start weed: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	stop = func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		return nil
	}
	endpoint = "http://127.0.0.1:" + strconv.Itoa(p[6])
	fail := func(err error) (func() error, string, error) {
		stop()
		b, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
		return nil, "", fmt.Errorf("%w; weed's log ends:\n%s", err, tail(b, 3000))
	}
	c, err := adminClient(endpoint)
	if err != nil {
		return fail(err)
	}
	// weed's parts come up one after the other: the gateway answers before the filer behind it can create a
	// bucket, so retry until it can, for at most two minutes (a loaded machine).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
		if err == nil {
			return stop, endpoint, nil
		}
		select {
		case werr := <-exited:
			exited <- werr
			return fail(fmt.Errorf("weed exited: %v (last error: %v)", werr, err))
		case <-ctx.Done():
			return fail(fmt.Errorf("weed's S3 gateway did not come up: %w", err))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func adminClient(endpoint string) (*minio.Client, error) {
	return minio.New(endpoint[len("http://"):], &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, "")})
}

// require skips the test when there is no server, or fails it when one is required.
func require(t *testing.T) {
	t.Helper()
	if server.unavailable == nil {
		return
	}
	if os.Getenv(requireEnv) == "1" || os.Getenv("CI") == "true" {
		t.Fatalf("S3 required (%s=1 or CI=true) but unavailable: %v", requireEnv, server.unavailable)
	}
	t.Skipf("S3 unavailable: %v", server.unavailable)
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
	s, err := s3.Open(ctx(t), s3.Config{Endpoint: server.endpoint, Bucket: bucket, Prefix: prefix,
		AccessKey: accessKey, SecretKey: secretKey, PartSize: partSize})
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
	c, err := adminClient(server.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	for u := range c.ListIncompleteUploads(ctx(t), bucket, prefix, true) {
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
		{Bucket: bucket},
		{Endpoint: "127.0.0.1:1"},
		{Endpoint: "127.0.0.1:1", Bucket: bucket, Prefix: "no-slash"},
		{Endpoint: "127.0.0.1:1", Bucket: bucket, Prefix: "../x/"},
		{Endpoint: "127.0.0.1:1", Bucket: bucket, PartSize: 1 << 20},
		{Endpoint: "127.0.0.1:1", Bucket: bucket, AccessKey: "only"},
		{Endpoint: "ftp://127.0.0.1:1", Bucket: bucket},
		{Endpoint: "http://127.0.0.1:1/path", Bucket: bucket},
	} {
		if _, err := s3.Open(ctx(t), cfg); err == nil {
			t.Errorf("open %+v succeeded", cfg)
		}
	}
	require(t)
	_, err := s3.Open(ctx(t), s3.Config{Endpoint: server.endpoint, Bucket: "no-such-bucket",
		AccessKey: accessKey, SecretKey: secretKey})
	if err == nil {
		t.Fatal("open of a missing bucket succeeded")
	}
	_, err = s3.Open(ctx(t), s3.Config{Endpoint: server.endpoint, Bucket: bucket,
		AccessKey: accessKey, SecretKey: "wrong"})
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
