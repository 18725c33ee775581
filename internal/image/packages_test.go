package image_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/image"
)

// TestPackageSpecs: a package spec names a registry package (and a version) in its manager's grammar, never a
// path, a URL, a VCS source or an option (issue 21, item 6).
func TestPackageSpecs(t *testing.T) {
	t.Parallel()
	valid := map[string][]string{
		image.Apt:   {"jq", "jq=1.6-2.1+deb12u2", "g++", "libc6:amd64", "libssl3=3.0.15-1~deb12u1", "tzdata=2024a-0+deb12u1", "python3.11", "bsdutils=1:2.38.1-5+deb12u3"},
		image.Pip:   {"requests", "requests==2.32.3", "Django>=4.2,<5", "requests[socks]==2.32.3", "zope.interface~=6.0", "ruamel.yaml", "corral-hello==1.0", "pkg!=1.0", "a===1.0", "torch==2.3.0+cpu", "x==1.*"},
		image.Npm:   {"is-number@7.0.0", "is-number", "@types/node@20.11.5", "@types/node", "lodash@^4.17.21", "react@latest", "left-pad@~1.3.0", "typescript@>=5.0.0", "x@1.0.0-beta.1"},
		image.Cargo: {"ripgrep@14.1.0", "ripgrep", "cargo-edit@0.12.2", "fd-find@=9.0.0", "tokio_util@0.7.10", "bat@^0.24"},
		image.Gem:   {"rake:13.2.1", "rake", "rails:~>7.1", "nokogiri:1.16.0", "activesupport:>=7.0", "net-http_ext"},
		image.Go:    {"golang.org/x/tools/cmd/stringer@v0.29.0", "golang.org/x/example/hello@latest", "github.com/junegunn/fzf@v0.54.3", "honnef.co/go/tools/cmd/staticcheck@2024.1.1", "example.com/a/b/v2@v2.0.0-20240101000000-abcdef123456", "mvdan.cc/gofumpt@v0.6.0+incompatible"},
	}
	hostile := map[string][]string{
		image.Apt:   {"/etc/passwd", "./x.deb", "../../x.deb", "x.deb", "http://evil/x.deb", "jq/bookworm-backports", "jq=../../x", "JQ", "j", "jq=", "jq==1", "-o", "jq=1.0/../x", "*", "jq*", "file:/x"},
		image.Pip:   {"git+https://github.com/x/y", "https://evil.example/x.tar.gz", "file:../../etc", "/etc/passwd", "./local", "../x", "x@https://evil", "x[a]@file:/x", "-e.", "x==1;y", "x==1/../y", "x==", ".x", "x-", "x==1,", "x[../y]", "x>=1#", "x:y"},
		image.Npm:   {"file:../../etc", "@scope/../../x", "git+https://github.com/x/y.git", "github:user/repo", "user/repo", "/etc/passwd", "./x", "../x", "x@file:../y", "x@git+https://evil/y", "x@npm:y@1", "npm:y@1", "x@https://evil/y.tgz", "https://evil/y.tgz", "@scope", "@/x", "@scope/x/y", ".x", "_x", "x@", "x@1/../../y", "x@link:../y", "@SCOPE/x", "@scope/..", "x@github:user/repo"},
		image.Cargo: {"../x", "/etc/passwd", "x@../y", "https://evil/y", "git+https://evil/y", "x@1/../y", "x/y", "x@", "1x", "x@1:2", ".x", "x@file:y"},
		image.Gem:   {"../../x.gem", "/etc/passwd", "./x.gem", "x:../1", "x:", "x:1/../y", "https://evil/x.gem", "x:1:2", ".x", "x/y"},
		image.Go:    {"../../x@v1.0.0", "/etc@latest", "./cmd@latest", "example.com/x@v1/../", "example.com/../x@v1.0.0", "example.com/./x@v1.0.0", "example.com/x", "example.com/x@", "example.com/x@master", "example.com/x@v1.0.0/y", "localhost/x@v1.0.0", "example.com//x@v1.0.0", "example.com/x/@v1.0.0", "https://example.com/x@v1.0.0", "example.com/.x@v1.0.0", "example.com/x@../v1", "example.com:8080/x@v1.0.0", "file:///x@v1.0.0"},
	}
	for m, specs := range valid {
		for _, s := range specs {
			if err := image.Canonical(pkgs(m, s)).Validate(); err != nil {
				t.Errorf("%s %q: refused: %v", m, s, err)
			}
		}
	}
	for m, specs := range hostile {
		for _, s := range specs {
			err := image.Canonical(pkgs(m, s)).Validate()
			var be *image.BuildError
			if !errors.As(err, &be) || be.Manager != m || be.Package != s {
				t.Errorf("%s %q: accepted (%v)", m, s, err)
			}
		}
	}
	// The API refuses them with a 400 through Service.Check, whose message names the package and the grammar.
	c := &apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: &apitype.Packages{Npm: []string{"file:../../etc"}}}
	if err := new(image.Service).Check(c); err == nil || !strings.Contains(err.Error(), `npm package "file:../../etc" cannot be installed: not a registry package`) {
		t.Errorf("Check: %v", err)
	}
	// corral worker's --package flags go through the same check, which also bounds a manager's list as the API does.
	if err := image.CheckPackages(c.Packages); err == nil || !strings.Contains(err.Error(), `npm package "file:../../etc" cannot be installed`) {
		t.Errorf("CheckPackages: %v", err)
	}
	many := make([]string, apitype.MaxPackages+1)
	for i := range many {
		many[i] = fmt.Sprintf("p%d", i)
	}
	if err := image.CheckPackages(&apitype.Packages{Pip: many}); err == nil || !strings.Contains(err.Error(), "257 pip packages: at most 256") {
		t.Errorf("CheckPackages of %d packages: %v", len(many), err)
	}
	if err := image.CheckPackages(&apitype.Packages{Apt: []string{"jq=1.6-2.1+deb12u2"}, Pip: many[:apitype.MaxPackages]}); err != nil {
		t.Errorf("CheckPackages of good lists: %v", err)
	}
	if err := image.CheckPackages(nil); err != nil {
		t.Errorf("CheckPackages(nil): %v", err)
	}
}

func pkgs(manager, spec string) *apitype.Packages {
	l := []string{spec}
	switch manager {
	case image.Apt:
		return &apitype.Packages{Apt: l}
	case image.Pip:
		return &apitype.Packages{Pip: l}
	case image.Npm:
		return &apitype.Packages{Npm: l}
	case image.Cargo:
		return &apitype.Packages{Cargo: l}
	case image.Gem:
		return &apitype.Packages{Gem: l}
	}
	return &apitype.Packages{Go: l}
}
