package image

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Package managers of an environment's packages (apitype.Packages), in the order a build installs them: apt
// first, since the others' toolchains come from it.
const (
	Apt   = "apt"
	Pip   = "pip"
	Npm   = "npm"
	Cargo = "cargo"
	Gem   = "gem"
	Go    = "go"
)

// Managers are the package managers, in build order.
var Managers = []string{Apt, Pip, Npm, Cargo, Gem, Go}

// Registry is where one package manager fetches packages: the URL its client is pointed at (empty: the
// client's own default) and the hosts it reaches, as egress.Policy.Hosts entries.
type Registry struct {
	Manager string
	// URL is the operator's mirror (corral serve --package-registry MANAGER=URL), or empty for the default.
	URL string
	// Hosts are the destinations the manager's client reaches: the mirror's host:port, or the defaults.
	Hosts []string
}

// defaultHosts are the registries each manager reaches without a mirror. apt's is Debian's mirror of the base
// (DefaultMirror); go's are the Go module proxy and checksum database (the toolchain comes from the proxy too).
var defaultHosts = map[string][]string{
	Apt:   {"deb.debian.org"},
	Pip:   {"pypi.org", "files.pythonhosted.org"},
	Npm:   {"registry.npmjs.org"},
	Cargo: {"index.crates.io", "static.crates.io", "crates.io"},
	Gem:   {"rubygems.org", "index.rubygems.org"},
	Go:    {"proxy.golang.org", "sum.golang.org"},
}

// Registries are the package registries of a server, per manager: the one table both the image builds and a
// sandbox's allow_package_managers rule read. The zero value is Debian's, PyPI, npm's, crates.io, RubyGems
// and the Go proxy.
type Registries struct {
	mirrors map[string]string
}

// SetMirror points manager at a mirror URL (the --package-registry flag's MANAGER=URL). For apt the URL is a Debian
// mirror (as in sources.list), for pip a simple index, for npm a registry, for cargo a sparse or git index, for
// gem a gem source, for go a GOPROXY (the checksum database is then off: a mirror is trusted as the proxy).
func (r *Registries) SetMirror(manager, rawURL string) error {
	if !slices.Contains(Managers, manager) {
		return fmt.Errorf("package registry: unknown package manager %q (one of %s)", manager, strings.Join(Managers, ", "))
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("package registry %s: %q is not an http(s) URL", manager, rawURL)
	}
	if r.mirrors == nil {
		r.mirrors = map[string]string{}
	}
	r.mirrors[manager] = strings.TrimSuffix(rawURL, "/")
	return nil
}

// Set sets one MANAGER=URL pair (flag.Value: --package-registry).
func (r *Registries) Set(v string) error {
	m, u, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("package registry %q: want MANAGER=URL", v)
	}
	return r.SetMirror(strings.TrimSpace(m), strings.TrimSpace(u))
}

// String lists the mirrors as MANAGER=URL pairs (flag.Value).
func (r *Registries) String() string {
	if r == nil {
		return ""
	}
	var out []string
	for _, m := range Managers {
		if u := r.mirrors[m]; u != "" {
			out = append(out, m+"="+u)
		}
	}
	return strings.Join(out, ",")
}

// Get returns manager's registry. An unknown manager has no hosts.
func (r *Registries) Get(manager string) Registry {
	reg := Registry{Manager: manager}
	if r != nil {
		reg.URL = r.mirrors[manager]
	}
	if reg.URL == "" {
		reg.Hosts = slices.Clone(defaultHosts[manager])
		return reg
	}
	u, _ := url.Parse(reg.URL)
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	reg.Hosts = []string{host}
	return reg
}

// Hosts are the destinations of the given managers' registries, deduplicated, as egress.Policy.Hosts entries.
func (r *Registries) Hosts(managers ...string) []string {
	var out []string
	for _, m := range managers {
		for _, h := range r.Get(m).Hosts {
			if !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out
}

// Env are the environment variables that point the given managers' clients at their mirrors (none for a
// manager without one; apt's mirror is in sources.list, cargo's in its config: see Files).
func (r *Registries) Env(managers ...string) map[string]string {
	env := map[string]string{}
	for _, m := range managers {
		u := r.Get(m).URL
		if u == "" {
			continue
		}
		switch m {
		case Pip:
			env["PIP_INDEX_URL"] = u
			if pu, err := url.Parse(u); err == nil && pu.Scheme == "http" {
				env["PIP_TRUSTED_HOST"] = pu.Hostname()
			}
		case Npm:
			env["npm_config_registry"] = u
		case Go:
			env["GOPROXY"] = u
			env["GOSUMDB"] = "off"
		case Gem:
			env["GEM_SOURCE"] = u // read by the build's gem command (--source); gem itself reads ~/.gemrc
		}
	}
	return env
}

// Files are the configuration files (path in the root filesystem → content) that point the given managers at
// their mirrors where no variable does: apt's sources.list, cargo's source replacement, gem's sources.
func (r *Registries) Files(suite string, managers ...string) map[string]string {
	files := map[string]string{}
	for _, m := range managers {
		u := r.Get(m).URL
		if u == "" {
			continue
		}
		switch m {
		case Apt:
			files["/etc/apt/sources.list"] = fmt.Sprintf("deb %s %s main\n", u, suite)
		case Cargo:
			// Debian's cargo (1.65) reads git indexes; a newer one also takes "sparse+URL".
			files["/usr/local/cargo/config.toml"] = fmt.Sprintf("[source.crates-io]\nreplace-with = \"corral-mirror\"\n\n[source.corral-mirror]\nregistry = %q\n\n[net]\ngit-fetch-with-cli = true\n", u)
		case Gem:
			files["/etc/gemrc"] = fmt.Sprintf("---\n:sources:\n- %s/\n", u)
		}
	}
	return files
}
