// Package s3test runs a real S3-compatible server for tests: SeaweedFS's weed, a single node (master, volume,
// filer and S3 gateway) on 127.0.0.1 with one bucket. Its binary is CORRAL_TEST_S3_WEED or, where .ci/run
// installs it, /opt/corral-weed/weed; without one, tests skip with the reason (Require), or fail when
// CORRAL_REQUIRE_S3=1 or CI=true.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const (
	// WeedEnv names the weed binary.
	WeedEnv = "CORRAL_TEST_S3_WEED"
	// WeedDefault is where .ci/run installs weed.
	WeedDefault = "/opt/corral-weed/weed"
	// RequireEnv set to 1 makes a missing server a failure (as CI=true does).
	RequireEnv = "CORRAL_REQUIRE_S3"
)

// Server is a running weed.
type Server struct {
	Endpoint             string // http://127.0.0.1:port
	Bucket               string // exists, empty when Start returns
	AccessKey, SecretKey string // an admin identity

	dir    string
	cmd    *exec.Cmd
	exited chan error
}

// Start starts weed with its data in a new temporary directory, waits until its S3 gateway answers and
// creates the bucket. The error says why there is no server (no binary, or weed did not come up).
func Start() (*Server, error) {
	bin := os.Getenv(WeedEnv)
	if bin == "" {
		bin = WeedDefault
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no SeaweedFS weed binary (set %s; .ci/run builds one in %s): %w", WeedEnv,
			WeedDefault, err)
	}
	dir, err := os.MkdirTemp("", "corral-weed-")
	if err != nil {
		return nil, err
	}
	s := &Server{Bucket: "corral-test", AccessKey: "corraltest", SecretKey: "corraltest-secret-key", dir: dir,
		exited: make(chan error, 1)}
	if err := s.start(bin); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) start(bin string) error {
	p, err := freePorts(8)
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(s.dir, "weed.log"))
	if err != nil {
		return err
	}
	s.cmd = exec.Command(bin, "server", "-filer", "-s3",
		"-ip", "127.0.0.1", "-ip.bind", "127.0.0.1", "-dir", s.dir,
		"-master.port", strconv.Itoa(p[0]), "-master.port.grpc", strconv.Itoa(p[1]), "-master.telemetry=false",
		"-volume.port", strconv.Itoa(p[2]), "-volume.port.grpc", strconv.Itoa(p[3]),
		"-filer.port", strconv.Itoa(p[4]), "-filer.port.grpc", strconv.Itoa(p[5]),
		"-filer.localSocket", filepath.Join(s.dir, "filer.sock"),
		"-s3.port", strconv.Itoa(p[6]), "-s3.port.grpc", strconv.Itoa(p[7]),
		"-s3.localSocket", filepath.Join(s.dir, "s3.sock"), "-s3.port.iceberg", "0", "-s3.port.lance", "0")
	s.cmd.Dir = s.dir
	s.cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		s.cmd = nil
		return fmt.Errorf("start weed: %w", err)
	}
	go func() { s.exited <- s.cmd.Wait(); logf.Close() }()
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(p[6])
	fail := func(err error) error {
		b, _ := os.ReadFile(filepath.Join(s.dir, "weed.log"))
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		return fmt.Errorf("%w; weed's log ends:\n%s", err, b)
	}
	c, err := s.Client()
	if err != nil {
		return fail(err)
	}
	// weed's parts come up one after the other: the gateway answers before the filer behind it can create a
	// bucket, so retry until it can, for at most three minutes (a loaded machine).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
		if err == nil {
			return nil
		}
		select {
		case werr := <-s.exited:
			s.exited <- werr
			return fail(fmt.Errorf("weed exited: %v (last error: %v)", werr, err))
		case <-ctx.Done():
			return fail(fmt.Errorf("weed's S3 gateway did not come up: %w", err))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Client is an S3 client of the server with the admin identity.
func (s *Server) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint[len("http://"):],
		&minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
}

// Stop stops weed (SIGTERM, then SIGKILL after 20 s) and removes its data.
func (s *Server) Stop() error {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		s.cmd = nil
	}
	return os.RemoveAll(s.dir)
}

// Require skips the test when unavailable is not nil, or fails it when CORRAL_REQUIRE_S3=1 or CI=true.
func Require(tb testing.TB, unavailable error) {
	tb.Helper()
	if unavailable == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" || os.Getenv("CI") == "true" {
		tb.Fatalf("S3 required (%s=1 or CI=true) but unavailable: %v", RequireEnv, unavailable)
	}
	tb.Skipf("S3 unavailable: %v", unavailable)
}

// freePorts returns n ports free on 127.0.0.1 now (weed takes them a moment later).
func freePorts(n int) ([]int, error) {
	var ports []int
	var errs []error
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			errs = append(errs, err)
			break
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, errors.Join(errs...)
}

// Objects lists the names of the objects under prefix in the bucket, with their sizes.
func (s *Server) Objects(ctx context.Context, prefix string) (map[string]int64, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	objs := map[string]int64{}
	for o := range c.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		objs[o.Key] = o.Size
	}
	return objs, nil
}
