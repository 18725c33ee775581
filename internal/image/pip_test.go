package image_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/image/imagetest"
)

// wheel is a pure-Python wheel of the package corral-hello at version, whose module greets.
func wheel(t *testing.T, version string) []byte {
	t.Helper()
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	files := [][2]string{
		{"corral_hello/__init__.py", "def greet():\n    return 'hello from corral-hello " + version + "'\n"},
		{"corral_hello-" + version + ".dist-info/METADATA", "Metadata-Version: 2.1\nName: corral-hello\nVersion: " + version + "\n"},
		{"corral_hello-" + version + ".dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: corral-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		w, err := z.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f[1]))
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	rec := "corral_hello-" + version + ".dist-info/RECORD"
	fmt.Fprintf(&record, "%s,,\n", rec)
	w, _ := z.Create(rec)
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pipIndex serves a PEP 503 simple index of corral-hello 1.0 on 127.0.0.1 and returns its URL and host:port.
func pipIndex(t *testing.T) (string, string) {
	t.Helper()
	whl := wheel(t, "1.0")
	name := "corral_hello-1.0-py3-none-any.whl"
	sum := sha256.Sum256(whl)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /simple/corral-hello/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>\n", name, hex.EncodeToString(sum[:]), name)
	})
	mux.HandleFunc("GET /files/"+name, func(w http.ResponseWriter, r *http.Request) { w.Write(whl) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/simple", ln.Addr().String()
}

// TestLayerPip installs a pip package (Debian's python3-pip comes with it) from a local simple index, the
// registry the operator's --package-registry pip=URL names, reached through the builder's proxy only because the
// operator trusts it (--egress-allow-internal); a version it does not have and a package it does not know fail
// naming the package.
func TestLayerPip(t *testing.T) {
	base := imagetest.Base(t)
	index, hostPort := pipIndex(t)
	cfg := layerConfig(t)
	cfg.Registries = &image.Registries{}
	if err := cfg.Registries.Set("pip=" + index); err != nil {
		t.Fatal(err)
	}
	cfg.AllowInternal = append(cfg.AllowInternal, hostPort)
	ctx := context.Background()
	l := image.Canonical(&apitype.Packages{Pip: []string{"corral-hello==1.0"}})
	layer, err := image.EnsureLayer(ctx, cfg, base, l)
	if err != nil {
		t.Fatal(err)
	}
	out, err := inImage(t, layer.RootFS, `cd /tmp && python3 -c 'import corral_hello; print(corral_hello.greet())' && python3 -m pip --version`)
	if err != nil || !strings.Contains(out, "hello from corral-hello 1.0") {
		t.Fatalf("the pip package in the image: %v: %s", err, out)
	}
	for _, tc := range []struct{ spec, why string }{
		{"corral-hello==2.0", "no such version"},
		{"corral-no-such-package", "unknown package"},
	} {
		_, err := image.EnsureLayer(ctx, cfg, base, image.Canonical(&apitype.Packages{Pip: []string{tc.spec}}))
		var be *image.BuildError
		if !errors.As(err, &be) || be.Manager != "pip" || be.Package != tc.spec || !strings.HasPrefix(be.Message, tc.why) {
			t.Errorf("%s: %v", tc.spec, err)
		}
	}
}

// TestLayerCargoGem says why cargo and gem builds are not tested against local registries here.
func TestLayerCargoGem(t *testing.T) {
	t.Skip("not covered: cargo (Debian's cargo 0.66 reads git indexes and compiles each crate; a local git index, a crate and a ~400 MB rustc install per run were not built) " +
		"and gem (a local gem source needs a gemspec marshalled by Ruby, which the host lacks); both run through the same builder, proxy and error mapping as pip, npm and go")
}
