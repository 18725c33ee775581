package image

import (
	"context"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// HostLayout is the images of a server that builds none (corral serve --images host, for machines without
// debootstrap): sandboxes run on the host's /usr, and an environment that asks for packages gets a failed
// image saying so, and its sessions a session.error when they need hands, rather than a silently missing
// package.
type HostLayout struct{}

var _ sandbox.Images = HostLayout{}

// errHostLayout is the failure of every package list under HostLayout.
var errHostLayout = apitype.ImageBuildError{Message: "this server runs sandboxes on the host's layout (corral serve --images host) and installs no packages: run it with --images debian (needs debootstrap) or remove the environment's packages"}

// Check accepts every spec: none is built.
func (HostLayout) Check(*apitype.EnvConfig) error { return nil }

// Image is nil without packages (the host's layout), failed with them.
func (HostLayout) Image(c *apitype.EnvConfig) *apitype.EnvironmentImage {
	if c.Type == apitype.EnvironmentSelfHosted || Canonical(c.Packages).Empty() {
		return nil
	}
	e := errHostLayout
	return &apitype.EnvironmentImage{Status: apitype.ImageFailed, ID: "host", Error: &e, UpdatedAt: apitype.Now()}
}

// Build builds nothing.
func (HostLayout) Build(*apitype.Environment) {}

// Acquire gives the host's layout ("") to an environment without packages, and an *ImageError to one with.
func (HostLayout) Acquire(_ context.Context, c *apitype.EnvConfig) (string, func(), error) {
	if Canonical(c.Packages).Empty() {
		return "", func() {}, nil
	}
	return "", nil, &sandbox.ImageError{ImageBuildError: errHostLayout}
}

// Start and Stop do nothing.
func (HostLayout) Start(context.Context) error { return nil }
func (HostLayout) Stop()                       {}
