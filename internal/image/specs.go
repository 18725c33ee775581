package image

import (
	"fmt"
	"regexp"
	"strings"
)

// The grammars of the package specs each manager accepts: a name as its registry spells one, and an optional
// version (or version constraint) in the manager's syntax. None admits a path, a URL, a VCS source, an alias or
// an option: the characters '/', ':' (outside apt's epoch and architecture and gem's separator), '@' (outside
// the version separators) and a leading '.' or '-' appear nowhere a registry name could not hold them.
var (
	// apt: a Debian package name (policy 5.6.1), an optional architecture, an optional version
	// ([epoch:]upstream[-revision], starting with a digit).
	aptSpec = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(:[a-z0-9][a-z0-9-]*)?(=[0-9]+:[0-9][A-Za-z0-9.+~-]*|=[0-9][A-Za-z0-9.+~-]*)?$`)
	// pip: a PEP 508 name, optional extras, optional comma-separated version clauses (PEP 440 operators);
	// no URL (name @ url), no environment marker.
	pipSpec = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(,[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)*\])?` +
		`((===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.*+!_-]+(,(===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.*+!_-]+)*)?$`)
	// npm: a name (lower case, URL-safe, not starting with '.' or '_'), optionally scoped, and an optional
	// version, range or dist-tag after '@' (no protocol: file:, git+https:, github:, npm: aliases, link:).
	npmSpec = regexp.MustCompile(`^(@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*(@[A-Za-z0-9.^~<>=*+_-]+)?$`)
	// cargo: a crate name and an optional version requirement after '@'.
	cargoSpec = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}(@[=^~<>]*[0-9][A-Za-z0-9.*+-]*)?$`)
	// gem: a gem name and an optional version requirement after ':' (passed to gem install --version).
	gemSpec = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(:[=<>~!]*[0-9][A-Za-z0-9.]*)?$`)
	// go: a package path (its first element a domain name) and a version after '@': latest, or v and a
	// semantic version (pseudo-versions and +incompatible included), or a CalVer-like tag of digits.
	goElem    = regexp.MustCompile(`^[A-Za-z0-9_~-][A-Za-z0-9._~-]*$`)
	goDomain  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$`)
	goVersion = regexp.MustCompile(`^(latest|v[0-9]+\.[0-9]+\.[0-9]+([-+][A-Za-z0-9.+-]+)?|[0-9]+(\.[0-9]+)+)$`)
)

// specHint is what each manager's specs look like, for the refusal's message.
var specHint = map[string]string{
	Apt:   "NAME or NAME=VERSION (jq=1.6-2.1+deb12u2)",
	Pip:   "NAME, NAME[EXTRAS] and version clauses (requests==2.32.3)",
	Npm:   "NAME or @SCOPE/NAME, with @VERSION (is-number@7.0.0)",
	Cargo: "NAME or NAME@VERSION (ripgrep@14.1.0)",
	Gem:   "NAME or NAME:VERSION (rake:13.2.1)",
	Go:    "PACKAGE@VERSION (golang.org/x/tools/cmd/stringer@v0.29.0)",
}

// validSpec checks spec against manager's grammar.
func validSpec(manager, spec string) error {
	if len(spec) > 256 {
		return fmt.Errorf("longer than 256 characters")
	}
	if strings.HasPrefix(spec, "-") {
		return fmt.Errorf("a package spec may not start with '-'")
	}
	for _, r := range spec {
		if r <= ' ' || r >= 0x7f || r == '\'' || r == '"' || r == '\\' || r == '`' || r == '$' || r == ';' || r == '|' || r == '&' {
			return fmt.Errorf("invalid character %q", r)
		}
	}
	var ok bool
	switch manager {
	case Apt:
		// apt installs a file named like a .deb or .dsc, or a source tree, from the working directory.
		name, _, _ := strings.Cut(spec, "=")
		ok = aptSpec.MatchString(spec) && !strings.HasSuffix(name, ".deb") && !strings.HasSuffix(name, ".dsc") && !strings.HasSuffix(name, ".changes")
	case Pip:
		ok = pipSpec.MatchString(spec)
	case Npm:
		ok = npmSpec.MatchString(spec)
	case Cargo:
		ok = cargoSpec.MatchString(spec)
	case Gem:
		ok = gemSpec.MatchString(spec)
	case Go:
		path, version, found := strings.Cut(spec, "@")
		if !found || version == "" {
			return fmt.Errorf("go packages are installed with go install and need a version: %s@VERSION (or @latest)", spec)
		}
		ok = validGoPath(path) && goVersion.MatchString(version)
	default:
		return fmt.Errorf("unknown package manager %q", manager)
	}
	if !ok {
		return fmt.Errorf("not a registry package: expected %s; paths, URLs and VCS sources are not accepted", specHint[manager])
	}
	return nil
}

// validGoPath reports whether p is a package path a module proxy serves: slash-separated elements, none empty,
// "." or "..", none starting with a dot, the first a domain name with a dot.
func validGoPath(p string) bool {
	elems := strings.Split(p, "/")
	if len(elems) < 2 || !goDomain.MatchString(elems[0]) {
		return false
	}
	for _, e := range elems[1:] {
		if !goElem.MatchString(e) {
			return false
		}
	}
	return true
}
