package image_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/image"
)

func TestRegistries(t *testing.T) {
	var r image.Registries
	if got := r.Hosts(image.Pip, image.Npm); !slices.Equal(got, []string{"pypi.org", "files.pythonhosted.org", "registry.npmjs.org"}) {
		t.Errorf("default hosts = %v", got)
	}
	if len(r.Env(image.Pip, image.Go)) != 0 {
		t.Errorf("defaults need no variables: %v", r.Env(image.Pip, image.Go))
	}
	if err := r.Set("pip=http://127.0.0.1:8081/simple/"); err != nil {
		t.Fatal(err)
	}
	if err := r.Set("go=https://goproxy.example"); err != nil {
		t.Fatal(err)
	}
	if got := r.Hosts(image.Pip, image.Go, image.Pip); !slices.Equal(got, []string{"127.0.0.1:8081", "goproxy.example:443"}) {
		t.Errorf("mirror hosts = %v", got)
	}
	env := r.Env(image.Pip, image.Go)
	if env["PIP_INDEX_URL"] != "http://127.0.0.1:8081/simple" || env["PIP_TRUSTED_HOST"] != "127.0.0.1" || env["GOPROXY"] != "https://goproxy.example" || env["GOSUMDB"] != "off" {
		t.Errorf("mirror env = %v", env)
	}
	if got := r.String(); got != "pip=http://127.0.0.1:8081/simple,go=https://goproxy.example" {
		t.Errorf("String = %q", got)
	}
	if err := r.Set("apt=http://mirror.example/debian"); err != nil {
		t.Fatal(err)
	}
	if f := r.Files("bookworm", image.Apt)["/etc/apt/sources.list"]; f != "deb http://mirror.example/debian bookworm main\n" {
		t.Errorf("sources.list = %q", f)
	}
	for _, bad := range []string{"pip", "yum=http://x", "npm=ftp://x", "npm=", "npm=http://"} {
		if err := r.Set(bad); err == nil {
			t.Errorf("%q: no error", bad)
		} else if !strings.Contains(err.Error(), "package registry") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
