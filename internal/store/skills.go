package store

import (
	"context"

	"github.com/corralhq/corral/internal/apitype"
)

// SkillStore keeps the Skills API's skills and their immutable versions. A version's archive (a zip) is in a
// blob store under SkillVersion.BlobKey.
type SkillStore interface {
	// SkillCreate stores a new skill with its first version, in one transaction; ErrConflict if an id exists.
	SkillCreate(ctx context.Context, s *apitype.Skill, v *SkillVersion) error
	// SkillGet returns a skill; ErrNotFound if there is none.
	SkillGet(ctx context.Context, id string) (*apitype.Skill, error)
	// SkillList lists skills by (created_at, id).
	SkillList(ctx context.Context, p *ListParams) ([]apitype.Skill, error)
	// SkillDelete removes a skill with its versions and returns the versions it removed (whose blobs the caller
	// deletes); ErrNotFound if there is none.
	SkillDelete(ctx context.Context, id string) ([]SkillVersion, error)
	// SkillVersionCreate stores a new version of an existing skill and makes it the skill's latest, in one
	// transaction; ErrNotFound if the skill does not exist, ErrConflict if the version id exists.
	SkillVersionCreate(ctx context.Context, v *SkillVersion) error
	// SkillVersionGet returns a version of a skill; version "latest" is the skill's latest. ErrNotFound if
	// there is none.
	SkillVersionGet(ctx context.Context, skillID, version string) (*SkillVersion, error)
	// SkillVersionList lists a skill's versions, newest first; ErrNotFound if the skill does not exist.
	SkillVersionList(ctx context.Context, p *SkillVersionListParams) ([]SkillVersion, error)
	// SkillVersionDelete removes a version and returns it; the skill's latest becomes its newest remaining
	// version (or "" if none). ErrNotFound if there is no such version.
	SkillVersionDelete(ctx context.Context, skillID, version string) (*SkillVersion, error)
}

// SkillVersion is a skill version as the store keeps it.
type SkillVersion struct {
	apitype.SkillVersion
	// BlobKey is where the blob store keeps the version's zip, SHA256 its hex digest, Size its length.
	BlobKey, SHA256 string
	Size            int64
}

// SkillVersionListParams pages a skill's versions, newest first (by created_at, id).
type SkillVersionListParams struct {
	SkillID string
	Limit   int
	After   *Cursor
}

// SkillTx is what the rules of SkillStore need of an adapter's write transaction. The rows it reads are locked
// against concurrent writers until the transaction ends (where the adapter has any).
type SkillTx interface {
	// Skill reads a skill (ErrNotFound).
	Skill(id string) (*apitype.Skill, error)
	PutSkill(sk *apitype.Skill) error
	InsertVersion(v *SkillVersion) error
	// Version reads a version of a skill (ErrNotFound); DeleteVersion removes it.
	Version(skillID, id string) (*SkillVersion, error)
	DeleteVersion(skillID, id string) error
	// NewestVersion returns the id of the skill's newest version, "" if it has none.
	NewestVersion(skillID string) (string, error)
}

// CreateSkillVersion is SkillVersionCreate's rule: a new version of an existing skill becomes its latest.
func CreateSkillVersion(tx SkillTx, v *SkillVersion) error {
	sk, err := tx.Skill(v.SkillID)
	if err != nil {
		return err
	}
	if err := tx.InsertVersion(v); err != nil {
		return err
	}
	sk.LatestVersionID, sk.UpdatedAt = v.ID, v.CreatedAt
	return tx.PutSkill(sk)
}

// DeleteSkillVersion is SkillVersionDelete's rule: the skill's latest becomes its newest remaining version.
func DeleteSkillVersion(tx SkillTx, skillID, version string) (*SkillVersion, error) {
	sk, err := tx.Skill(skillID)
	if err != nil {
		return nil, err
	}
	v, err := tx.Version(skillID, version)
	if err != nil {
		return nil, err
	}
	if err := tx.DeleteVersion(skillID, version); err != nil {
		return nil, err
	}
	if sk.LatestVersionID, err = tx.NewestVersion(skillID); err != nil {
		return nil, err
	}
	return v, tx.PutSkill(sk)
}
