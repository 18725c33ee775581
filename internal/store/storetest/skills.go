package storetest

import (
	"strconv"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func newSkillVersion(skillID string, created time.Time) *store.SkillVersion {
	id := strconv.FormatInt(created.UnixMicro(), 10)
	return &store.SkillVersion{SkillVersion: apitype.SkillVersion{Type: apitype.ObjectSkillVersion, ID: id, SkillID: skillID,
		Name: "my-skill", Description: "Does things.", CreatedAt: created},
		BlobKey: "skills/" + skillID + "/" + id + ".zip", SHA256: "ab", Size: 10}
}

func versionID(v *store.SkillVersion) string { return v.ID }
func skillID(s *apitype.Skill) string        { return s.ID }

func testSkill(t *testing.T, h Harness) {
	s := h.open(t)
	sk := &apitype.Skill{Type: apitype.ObjectSkill, ID: apitype.NewID(apitype.PrefixSkill), DisplayName: "My skill",
		Source: apitype.SkillSource{Type: apitype.SkillSourceCustom}, CreatedAt: base, UpdatedAt: base}
	v1 := newSkillVersion(sk.ID, base)
	sk.LatestVersionID = v1.ID
	must(t, s.SkillCreate(ctxBg, sk, v1), "create skill")
	mustIs(t, s.SkillCreate(ctxBg, sk, v1), store.ErrConflict, "create skill twice")
	got, err := s.SkillGet(ctxBg, sk.ID)
	must(t, err, "get skill")
	equal(t, got.DisplayName, "My skill", "display name")
	equal(t, got.LatestVersionID, v1.ID, "latest version")
	equal(t, got.Source.Type, "custom", "source")
	_, err = s.SkillGet(ctxBg, "skill_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown skill")

	v2 := newSkillVersion(sk.ID, base.Add(time.Minute))
	v2.Description = "Does more."
	must(t, s.SkillVersionCreate(ctxBg, v2), "create version")
	mustIs(t, s.SkillVersionCreate(ctxBg, v2), store.ErrConflict, "create version twice")
	mustIs(t, s.SkillVersionCreate(ctxBg, newSkillVersion("skill_missing", base)), store.ErrNotFound, "version of unknown skill")
	got, err = s.SkillGet(ctxBg, sk.ID)
	must(t, err, "get skill")
	equal(t, got.LatestVersionID, v2.ID, "latest after a new version")
	sameTime(t, got.UpdatedAt, v2.CreatedAt, "updated_at")
	latest, err := s.SkillVersionGet(ctxBg, sk.ID, "latest")
	must(t, err, "get latest")
	equal(t, latest.ID, v2.ID, "latest alias")
	equal(t, latest.Description, "Does more.", "description")
	equal(t, latest.BlobKey, v2.BlobKey, "blob key")
	equal(t, latest.Size, int64(10), "size")
	one, err := s.SkillVersionGet(ctxBg, sk.ID, v1.ID)
	must(t, err, "get v1")
	equal(t, one.ID, v1.ID, "v1")
	_, err = s.SkillVersionGet(ctxBg, sk.ID, "123")
	mustIs(t, err, store.ErrNotFound, "get unknown version")

	list, err := s.SkillVersionList(ctxBg, &store.SkillVersionListParams{SkillID: sk.ID, Limit: 10})
	must(t, err, "list versions")
	equal(t, ids(list, versionID), v2.ID+","+v1.ID, "versions newest first")
	list, err = s.SkillVersionList(ctxBg, &store.SkillVersionListParams{SkillID: sk.ID, Limit: 10,
		After: &store.Cursor{CreatedAt: v2.CreatedAt, ID: v2.ID}})
	must(t, err, "list versions after")
	equal(t, ids(list, versionID), v1.ID, "versions after the newest")
	_, err = s.SkillVersionList(ctxBg, &store.SkillVersionListParams{SkillID: "skill_missing", Limit: 10})
	mustIs(t, err, store.ErrNotFound, "versions of unknown skill")

	other := &apitype.Skill{Type: apitype.ObjectSkill, ID: apitype.NewID(apitype.PrefixSkill), CreatedAt: base.Add(time.Second), UpdatedAt: base}
	must(t, s.SkillCreate(ctxBg, other, newSkillVersion(other.ID, base)), "create other skill")
	skills, err := s.SkillList(ctxBg, &store.ListParams{Limit: 10, Desc: true})
	must(t, err, "list skills")
	equal(t, ids(skills, skillID), other.ID+","+sk.ID, "skills newest first")

	del, err := s.SkillVersionDelete(ctxBg, sk.ID, v2.ID)
	must(t, err, "delete v2")
	equal(t, del.BlobKey, v2.BlobKey, "deleted version's blob")
	got, err = s.SkillGet(ctxBg, sk.ID)
	must(t, err, "get skill")
	equal(t, got.LatestVersionID, v1.ID, "latest falls back")
	_, err = s.SkillVersionDelete(ctxBg, sk.ID, v2.ID)
	mustIs(t, err, store.ErrNotFound, "delete v2 twice")

	gone, err := s.SkillDelete(ctxBg, sk.ID)
	must(t, err, "delete skill")
	equal(t, ids(gone, versionID), v1.ID, "versions removed with the skill")
	_, err = s.SkillGet(ctxBg, sk.ID)
	mustIs(t, err, store.ErrNotFound, "get deleted skill")
	_, err = s.SkillVersionGet(ctxBg, sk.ID, "latest")
	mustIs(t, err, store.ErrNotFound, "versions of a deleted skill")
	_, err = s.SkillDelete(ctxBg, sk.ID)
	mustIs(t, err, store.ErrNotFound, "delete skill twice")
}
