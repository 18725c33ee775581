package image

import (
	"context"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// ManagerEgress is the sandbox.EgressSource of allow_package_managers: a sandbox whose environment has limited
// networking with allow_package_managers true may reach the registries of the environment's package managers
// (EnvironmentManagers), with the same rules as its allowed_hosts (an internal one only where the operator
// trusts it: --egress-allow-internal), and gets the variables that point their clients at the operator's
// mirrors. Any other sandbox gets nothing from it: unrestricted networking reaches the registries anyway, and
// limited networking without allow_package_managers does not.
type ManagerEgress struct {
	// Registries are the server's registries (nil: the managers' defaults).
	Registries *Registries
}

var _ sandbox.EgressSource = (*ManagerEgress)(nil)

// Egress returns the registries' hosts (sandbox.Egress.AllowHosts) and the mirrors' variables, or nil.
func (m *ManagerEgress) Egress(_ context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
	n := r.Environment.Networking
	if n == nil || n.Type != apitype.NetworkingLimited || n.AllowPackageManagers == nil || !*n.AllowPackageManagers {
		return nil, nil
	}
	managers := EnvironmentManagers(r.Environment.Packages)
	eg := &sandbox.Egress{AllowHosts: m.Registries.Hosts(managers...)}
	if env := m.Registries.Env(managers...); len(env) > 0 {
		eg.Env = env
	}
	return eg, nil
}

// EnvironmentManagers are the managers whose registries allow_package_managers opens to an environment's
// sandboxes: those its packages list, or every manager when it lists none (an agent may then install with any
// of them at run time). They are in build order (Managers).
func EnvironmentManagers(p *apitype.Packages) []string {
	var out []string
	if p != nil {
		for _, m := range Managers {
			if len(packagesOf(p, m)) > 0 {
				out = append(out, m)
			}
		}
	}
	if out == nil {
		return slices.Clone(Managers)
	}
	return out
}

// packagesOf is one manager's package list.
func packagesOf(p *apitype.Packages, manager string) []string {
	switch manager {
	case Apt:
		return p.Apt
	case Pip:
		return p.Pip
	case Npm:
		return p.Npm
	case Cargo:
		return p.Cargo
	case Gem:
		return p.Gem
	case Go:
		return p.Go
	}
	return nil
}
