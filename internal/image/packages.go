package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// List is an environment's package list in canonical form: per manager, trimmed, sorted and without
// duplicates. Identical lists have one layer.
type List map[string][]string

// Canonical returns p's canonical list; empty when p asks for nothing.
func Canonical(p *apitype.Packages) List {
	l := List{}
	if p == nil {
		return l
	}
	for m, pkgs := range map[string][]string{Apt: p.Apt, Pip: p.Pip, Npm: p.Npm, Cargo: p.Cargo, Gem: p.Gem, Go: p.Go} {
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
