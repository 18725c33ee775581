package store

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
)

// EnvironmentStore keeps environments.
type EnvironmentStore interface {
	EnvironmentCreate(ctx context.Context, e *apitype.Environment) error
	EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error)
	// EnvironmentUpdate reads the environment, applies fn and writes the result, atomically.
	EnvironmentUpdate(ctx context.Context, id string, fn func(*apitype.Environment) error) (*apitype.Environment, error)
	EnvironmentList(ctx context.Context, p *ListParams) ([]apitype.Environment, error)
	EnvironmentDelete(ctx context.Context, id string) error
	// EnvironmentImageSet records the status of the environment's image build (SetImage's rule: only over a
	// status of the same image, so a build of a package list the environment no longer has cannot overwrite
	// the current one: ErrConflict). The environment's updated_at stays.
	EnvironmentImageSet(ctx context.Context, id string, img *apitype.EnvironmentImage) error
}

// SetImage is EnvironmentImageSet's rule, which both adapters apply: e gets img if it has no image status or
// one of the same image id; otherwise ErrConflict.
func SetImage(e *apitype.Environment, img *apitype.EnvironmentImage) error {
	if e.Image != nil && e.Image.ID != img.ID {
		return fmt.Errorf("environment %s: image %s is no longer its image (%s): %w", e.ID, img.ID, e.Image.ID, ErrConflict)
	}
	c := *img
	if img.Error != nil {
		be := *img.Error
		c.Error = &be
	}
	e.Image = &c
	return nil
}

// KeepEnvironment is what EnvironmentUpdate keeps of the environment read: its id.
func KeepEnvironment(next, cur *apitype.Environment) { next.ID = cur.ID }
