package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/corralhq/corral/internal/blob/localfs"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/store"
)

// filesDirName is the directory of the data directory that holds the Files API's bytes (the blob store).
const filesDirName = "files"

// fileFlags configure the Files API's storage.
type fileFlags struct {
	maxBytes int64
}

func (f *fileFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&f.maxBytes, "max-file-bytes", envInt64("CORRAL_MAX_FILE_BYTES", files.DefaultMaxBytes),
		"largest file the Files API accepts, in `bytes` (default the hosted limit, 500 MiB; env CORRAL_MAX_FILE_BYTES)")
}

// open opens the file storage: metadata in the store, bytes in <data>/files on the local filesystem.
func (f *fileFlags) open(dataDir string, st store.Store) (*files.Service, error) {
	if f.maxBytes <= 0 {
		return nil, fmt.Errorf("--max-file-bytes must be > 0, got %d", f.maxBytes)
	}
	blobs, err := localfs.Open(filepath.Join(dataDir, filesDirName))
	if err != nil {
		return nil, err
	}
	return files.New(st, blobs, f.maxBytes), nil
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
