package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// List is an environment's package list in canonical form: per manager, trimmed, sorted and without
// duplicates. Identical lists have one layer.
type List map[string][]string

// byManager is p's lists by manager name.
func byManager(p *apitype.Packages) map[string][]string {
	if p == nil {
		return nil
	}
	return map[string][]string{Apt: p.Apt, Pip: p.Pip, Npm: p.Npm, Cargo: p.Cargo, Gem: p.Gem, Go: p.Go}
}

// Canonical returns p's canonical list; empty when p asks for nothing.
func Canonical(p *apitype.Packages) List {
	l := List{}
	for m, pkgs := range byManager(p) {
		var out []string
		for _, s := range pkgs {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		slices.Sort(out)
		if out = slices.Compact(out); len(out) > 0 {
			l[m] = out
		}
	}
	return l
}

// Empty reports whether the list asks for no package: its image is the base.
func (l List) Empty() bool { return len(l) == 0 }

// Managers are the managers the list uses, in build order.
func (l List) Managers() []string {
	var out []string
	for _, m := range Managers {
		if len(l[m]) > 0 {
			out = append(out, m)
		}
	}
	return out
}

// Key is the content address of the layer of l on the base baseID built with the Go toolchain goVersion and npm npmVersion:
// "img-" and 24 hex digits of a SHA-256.
func (l List) Key(baseID, goVersion, npmVersion string) string {
	b, _ := json.Marshal(l) // map keys are sorted: canonical
	h := sha256.New()
	fmt.Fprintf(h, "corral-layer/v1\x00%s\x00%s\x00%s\x00", baseID, goVersion, npmVersion)
	h.Write(b)
	return "img-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// Validate checks every package spec against its manager's grammar (specs.go): a registry package's name and,
// where one is given, its version in the manager's own syntax; never a path, a URL, a VCS source or an option,
// so that a build installs only what the managers' registries serve and nothing reaches its command line as an
// option or a second word.
func (l List) Validate() error {
	for _, m := range l.Managers() {
		for _, p := range l[m] {
			if err := validSpec(m, p); err != nil {
				return &BuildError{Manager: m, Package: p, Message: err.Error()}
			}
		}
	}
	return nil
}

// CheckPackages reports a package spec no build could install (an option, a second word, a go package without
// a version: List.Validate) and a manager with more than apitype.MaxPackages packages. The API answers it with a
// 400 when an environment's config has one (Service.Check); corral worker refuses its --package flags with it.
func CheckPackages(p *apitype.Packages) error {
	for _, m := range Managers {
		if n := len(byManager(p)[m]); n > apitype.MaxPackages {
			return fmt.Errorf("%d %s packages: at most %d", n, m, apitype.MaxPackages)
		}
	}
	if err := Canonical(p).Validate(); err != nil {
		var be *BuildError
		if errors.As(err, &be) {
			return fmt.Errorf("%s package %q cannot be installed: %s", be.Manager, be.Package, be.Message)
		}
		return err
	}
	return nil
}

// BuildError is a failed image build: which package of which manager, and why. Manager and Package are empty
// when the failure is no single package's (the base, the builder).
type BuildError struct {
	Manager string
	Package string
	Message string
}

func (e *BuildError) Error() string {
	switch {
	case e.Package != "":
		return fmt.Sprintf("image build: %s package %s: %s", e.Manager, e.Package, e.Message)
	case e.Manager != "":
		return fmt.Sprintf("image build: %s: %s", e.Manager, e.Message)
	}
	return "image build: " + e.Message
}
