package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/blob/s3/s3test"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestFilesS3: `corral serve --files-s3-*` keeps the Files API's bytes in the bucket (with the credentials from
// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), none under <data>/files: a 20 MiB upload through the official SDK
// becomes one object under the prefix (a multipart upload of two parts), downloads byte-identical, and is gone
// from the bucket once deleted.
func TestFilesS3(t *testing.T) {
	t.Parallel()
	srv, err := s3test.Start()
	s3test.Require(t, err)
	t.Cleanup(func() { srv.Stop() })
	model := modeltest.NewServer(t)
	data := t.TempDir()
	env := append(serverEnv(model, testKey), "AWS_ACCESS_KEY_ID="+srv.AccessKey,
		"AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
	s := startCorral(t, env, "corral: listening on ", "serve", "--listen", "127.0.0.1:0", "--data", data,
		"--sandbox", sandboxKind(), "--brains", "0", "--files-s3-endpoint", srv.Endpoint,
		"--files-s3-bucket", srv.Bucket, "--files-s3-prefix", "corral/")
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const size = 20 << 20
	want := sha256.New()
	up, err := c.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(io.TeeReader(&pattern{n: size}, want), "big.bin", "application/octet-stream")})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := srv.Objects(ctx, "corral/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("objects under corral/: %v, want one", objs)
	}
	for name, n := range objs {
		if n != size {
			t.Fatalf("object %s: %d bytes, want %d", name, n, size)
		}
	}
	_ = filepath.WalkDir(filepath.Join(data, filesDirName), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			t.Errorf("a file under <data>/files: %s", path)
		}
		return nil
	})

	resp, err := c.Beta.Files.Download(ctx, up.ID, anthropic.BetaFileDownloadParams{})
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	_, err = io.Copy(got, resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("download: %v, or its bytes differ from the upload", err)
	}

	if _, err := c.Beta.Files.Delete(ctx, up.ID, anthropic.BetaFileDeleteParams{}); err != nil {
		t.Fatal(err)
	}
	if objs, err := srv.Objects(ctx, "corral/"); err != nil || len(objs) != 0 {
		t.Fatalf("objects under corral/ after the delete: %v, %v", objs, err)
	}
}
