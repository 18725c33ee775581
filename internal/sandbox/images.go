package sandbox

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
)

// Images gives each sandbox the root filesystem of its environment's image (PoolConfig.Images;
// internal/image builds them).
type Images interface {
	// Acquire returns the root filesystem (HostDirs.RootFS, a directory of this host) for a sandbox of an
	// environment with config env, waiting for its build if it is still building, and a release the Pool calls
	// once that sandbox is closed (a layer in use is never garbage-collected). A failed build is an *ImageError.
	Acquire(ctx context.Context, env *apitype.EnvConfig) (rootFS string, release func(), err error)
}

// ImageRefs is an Images whose images are also in a registry, for a Provider whose runtime pulls them
// (RootFSImageRef): the Pool passes the reference in HostDirs.Image.
type ImageRefs interface {
	// Ref returns the reference of the image of env, by digest, building and pushing it if it is not there yet
	// ("": env has no packages, and the Provider runs its own image). A failed build is an *ImageError.
	Ref(ctx context.Context, env *apitype.EnvConfig) (string, error)
}

// ImageStatus is an Images that can say, without waiting or starting anything, whether the image of env is
// built (image.Service): a provisioning that will wait for a build says so in its start report
// (ProvisionReport.Image), since a first start builds the base for minutes.
type ImageStatus interface {
	// Image is the status of the image of env as of now (nil: none, as for a self-hosted environment).
	Image(env *apitype.EnvConfig) *apitype.EnvironmentImage
}

// ImageError is a failed image build: the session's sandbox cannot be provisioned, and the brain reports it
// as a session.error of type apitype.SessionErrEnvironmentBuild.
type ImageError struct {
	apitype.ImageBuildError
}

func (e *ImageError) Error() string {
	switch {
	case e.Package != "":
		return fmt.Sprintf("the environment's image failed to build: %s package %s: %s", e.Manager, e.Package, e.Message)
	case e.Manager != "":
		return fmt.Sprintf("the environment's image failed to build: %s: %s", e.Manager, e.Message)
	}
	return "the environment's image failed to build: " + e.Message
}

// imageSandbox is a sandbox on an image: closing it releases the image.
type imageSandbox struct {
	Sandbox
	release func()
}

// Unwrap is the sandbox wrapped.
func (s *imageSandbox) Unwrap() Sandbox { return s.Sandbox }

func (s *imageSandbox) Close() error {
	err := s.Sandbox.Close()
	s.release()
	return err
}
