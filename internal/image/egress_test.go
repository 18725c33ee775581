package image_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/sandbox"
)

func TestEnvironmentManagers(t *testing.T) {
	if got := image.EnvironmentManagers(nil); !slices.Equal(got, image.Managers) {
		t.Errorf("no packages: %v", got)
	}
	if got := image.EnvironmentManagers(&apitype.Packages{Apt: []string{}, Pip: []string{}}); !slices.Equal(got, image.Managers) {
		t.Errorf("empty lists: %v", got)
	}
	if got := image.EnvironmentManagers(&apitype.Packages{Pip: []string{"requests"}, Go: []string{"x@v1"}}); !slices.Equal(got, []string{image.Pip, image.Go}) {
		t.Errorf("pip and go: %v", got)
	}
}

// TestManagerEgress: the egress a sandbox gets from allow_package_managers (the sandbox suites check it
// through the real proxy: sandboxtest.RunRegistries).
func TestManagerEgress(t *testing.T) {
	var mirrored image.Registries
	if err := mirrored.Set("npm=http://127.0.0.1:4873/"); err != nil {
		t.Fatal(err)
	}
	yes, no := true, false
	limited := &apitype.Networking{Type: apitype.NetworkingLimited, AllowPackageManagers: &yes}
	for _, tc := range []struct {
		name  string
		reg   *image.Registries
		n     *apitype.Networking
		p     *apitype.Packages
		hosts string
		env   string
	}{
		{"unrestricted", nil, &apitype.Networking{Type: apitype.NetworkingUnrestricted}, nil, "", ""},
		{"no networking", nil, nil, nil, "", ""},
		{"limited, not allowed", nil, &apitype.Networking{Type: apitype.NetworkingLimited, AllowPackageManagers: &no}, &apitype.Packages{Pip: []string{"x"}}, "", ""},
		{"limited, unset", nil, &apitype.Networking{Type: apitype.NetworkingLimited}, nil, "", ""},
		{"limited, npm", nil, limited, &apitype.Packages{Npm: []string{"x"}}, "registry.npmjs.org", ""},
		{"limited, pip and go", nil, limited, &apitype.Packages{Pip: []string{"x"}, Go: []string{"y"}}, "pypi.org,files.pythonhosted.org,proxy.golang.org,sum.golang.org", ""},
		{"limited, npm mirror", &mirrored, limited, &apitype.Packages{Npm: []string{"x"}}, "127.0.0.1:4873", "http://127.0.0.1:4873"},
	} {
		eg, err := (&image.ManagerEgress{Registries: tc.reg}).Egress(context.Background(),
			&sandbox.Recipe{Environment: apitype.EnvConfig{Type: apitype.EnvironmentCloud, Networking: tc.n, Packages: tc.p}})
		if err != nil {
			t.Fatal(err)
		}
		if eg == nil {
			if tc.hosts != "" {
				t.Errorf("%s: no egress", tc.name)
			}
			continue
		}
		if got := strings.Join(eg.AllowHosts, ","); got != tc.hosts || eg.Env["npm_config_registry"] != tc.env {
			t.Errorf("%s: %+v", tc.name, eg)
		}
	}
}
