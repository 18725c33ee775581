package image

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestBuilderCAFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cache")
	if path, err := BuilderCAFile(dir, nil); err != nil || path != "" {
		t.Fatalf("no extra CAs: %q, %v; want the host's bundle as it is", path, err)
	}
	extra := []byte("-----BEGIN CERTIFICATE-----\nOPERATOR\n-----END CERTIFICATE-----\n")
	path, err := BuilderCAFile(dir, extra)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "builder-ca.pem") {
		t.Errorf("path %s", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, extra) {
		t.Error("the bundle does not end with the operator's CAs")
	}
	if sys, err := os.ReadFile(hostCABundle); err == nil && !bytes.HasPrefix(b, sys) {
		t.Error("the bundle does not start with the host's CAs")
	}
}
