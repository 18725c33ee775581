package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/blob/localfs"
	"github.com/corralhq/corral/internal/blob/s3"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/store"
)

// filesDirName is the directory of the data directory that holds the Files API's bytes (the blob store).
const filesDirName = "files"

// fileFlags configure the Files API's storage.
type fileFlags struct {
	maxBytes int64
	s3       s3.Config
}

func (f *fileFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&f.maxBytes, "max-file-bytes", envInt64("CORRAL_MAX_FILE_BYTES", files.DefaultMaxBytes),
		"largest file the Files API accepts, in `bytes` (default the hosted limit, 500 MiB; env CORRAL_MAX_FILE_BYTES)")
	fs.StringVar(&f.s3.Endpoint, "files-s3-endpoint", os.Getenv("CORRAL_FILES_S3_ENDPOINT"),
		"keep files and skills in an S3-compatible bucket at this `endpoint`, host[:port] or https://host[:port] "+
			"(http:// for plain HTTP on a trusted network), instead of <data>/files; credentials from "+
			"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (env CORRAL_FILES_S3_ENDPOINT)")
	fs.StringVar(&f.s3.Bucket, "files-s3-bucket", os.Getenv("CORRAL_FILES_S3_BUCKET"),
		"the S3 `bucket` (it must exist; env CORRAL_FILES_S3_BUCKET)")
	fs.StringVar(&f.s3.Prefix, "files-s3-prefix", os.Getenv("CORRAL_FILES_S3_PREFIX"),
		"put this `prefix`, ending with '/', before every object's name (env CORRAL_FILES_S3_PREFIX)")
	fs.StringVar(&f.s3.Region, "files-s3-region", os.Getenv("CORRAL_FILES_S3_REGION"),
		"the bucket's `region` (default: asked of the server; env CORRAL_FILES_S3_REGION)")
}

// open opens the file storage: metadata in the store, bytes in an S3-compatible bucket when --files-s3-endpoint
// is set, else in <data>/files on the local filesystem.
func (f *fileFlags) open(ctx context.Context, dataDir string, st store.Store) (*files.Service, error) {
	if f.maxBytes <= 0 {
		return nil, fmt.Errorf("--max-file-bytes must be > 0, got %d", f.maxBytes)
	}
	var blobs blob.Store
	if f.s3.Endpoint != "" || f.s3.Bucket != "" {
		if f.s3.Endpoint == "" || f.s3.Bucket == "" {
			return nil, fmt.Errorf("--files-s3-endpoint and --files-s3-bucket go together")
		}
		cfg := f.s3
		cfg.AccessKey, cfg.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		s, err := s3.Open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		blobs = s
	} else {
		s, err := localfs.Open(filepath.Join(dataDir, filesDirName))
		if err != nil {
			return nil, err
		}
		blobs = s
	}
	return files.New(files.Config{Store: st, Blobs: blobs, MaxBytes: f.maxBytes})
}

// envInt64 reads an integer from the environment: def when unset, -1 (refused by the flag's check) when it is
// not an integer.
func envInt64(name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
