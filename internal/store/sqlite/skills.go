package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var (
	skills = &table[apitype.Skill]{
		what: "skill", name: "skills", alias: "k",
		sel:  `SELECT k.doc FROM skills k`,
		scan: scanDoc[apitype.Skill]("skill", nil),
	}
	skillVersions = &table[store.SkillVersion]{
		what: "skill version", name: "skill_versions", alias: "v",
		sel:  `SELECT v.sha256, v.size, v.blob_key, v.doc FROM skill_versions v`,
		scan: scanSkillVersion,
	}
)

// SkillCreate stores a new skill and its first version.
func (s *Store) SkillCreate(ctx context.Context, sk *apitype.Skill, v *store.SkillVersion) error {
	doc, err := json.Marshal(sk)
	if err != nil {
		return writeErr(err, "create skill %s", sk.ID)
	}
	err = s.write(ctx, func(w *wtx) error {
		if _, err := w.exec(`INSERT INTO skills (id, created_at, doc) VALUES (?, ?, ?)`, sk.ID, micros(sk.CreatedAt), doc); err != nil {
			return err
		}
		return skillTx{w}.InsertVersion(v)
	}, nil)
	return writeErr(err, "create skill %s", sk.ID)
}

// SkillGet returns a skill.
func (s *Store) SkillGet(ctx context.Context, id string) (*apitype.Skill, error) {
	return skills.get(ctx, s, id, "k.id = ?", id)
}

// SkillList lists skills.
func (s *Store) SkillList(ctx context.Context, p *store.ListParams) ([]apitype.Skill, error) {
	return skills.list(ctx, s, &filter{}, p)
}

// SkillDelete removes a skill and its versions.
func (s *Store) SkillDelete(ctx context.Context, id string) ([]store.SkillVersion, error) {
	return writeResult(ctx, s, func(w *wtx) ([]store.SkillVersion, error) {
		rows, err := w.query(skillVersions.sel+` WHERE v.skill_id = ?`, id)
		if err != nil {
			return nil, err
		}
		out, err := collect(rows, scanSkillVersion)
		if err != nil {
			return nil, err
		}
		return out, skills.deleteIn(w, "id = ?", id) // the versions go by cascade
	}, "delete skill %s", id)
}

// SkillVersionCreate stores a new version under store.CreateSkillVersion's rule.
func (s *Store) SkillVersionCreate(ctx context.Context, v *store.SkillVersion) error {
	err := s.write(ctx, func(w *wtx) error { return store.CreateSkillVersion(skillTx{w}, v) }, nil)
	return writeErr(err, "create version of skill %s", v.SkillID)
}

// SkillVersionGet returns a version ("latest" is the skill's latest).
func (s *Store) SkillVersionGet(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	if version == "latest" {
		return skillVersions.one(ctx, s, skillID+"/latest", skillVersions.sel+
			` WHERE v.skill_id = ? ORDER BY v.created_at DESC, v.id DESC LIMIT 1`, skillID)
	}
	return skillVersions.get(ctx, s, skillID+"/"+version, "v.skill_id = ? AND v.id = ?", skillID, version)
}

// SkillVersionList lists a skill's versions, newest first.
func (s *Store) SkillVersionList(ctx context.Context, p *store.SkillVersionListParams) ([]store.SkillVersion, error) {
	if _, err := s.SkillGet(ctx, p.SkillID); err != nil {
		return nil, err
	}
	var f filter
	f.add("v.skill_id = ?", p.SkillID)
	if p.After != nil {
		f.add("(v.created_at, v.id) < (?, ?)", micros(p.After.CreatedAt), p.After.ID)
	}
	return skillVersions.rows(ctx, s, "list skill versions", skillVersions.sel+f.where()+
		` ORDER BY v.created_at DESC, v.id DESC LIMIT ?`, append(f.args, limitArg(p.Limit))...)
}

// SkillVersionDelete removes a version under store.DeleteSkillVersion's rule.
func (s *Store) SkillVersionDelete(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	return writeResult(ctx, s, func(w *wtx) (*store.SkillVersion, error) {
		return store.DeleteSkillVersion(skillTx{w}, skillID, version)
	}, "delete version %s of skill %s", version, skillID)
}

// skillTx is store.SkillTx over a write transaction.
type skillTx struct{ w *wtx }

func (t skillTx) Skill(id string) (*apitype.Skill, error) { return skills.read(t.w, "k.id = ?", id) }

func (t skillTx) PutSkill(sk *apitype.Skill) error {
	doc, err := json.Marshal(sk)
	if err != nil {
		return err
	}
	_, err = t.w.exec(`UPDATE skills SET doc = ? WHERE id = ?`, doc, sk.ID)
	return err
}

func (t skillTx) InsertVersion(v *store.SkillVersion) error {
	doc, err := json.Marshal(&v.SkillVersion)
	if err != nil {
		return err
	}
	_, err = t.w.exec(`INSERT INTO skill_versions (skill_id, id, created_at, sha256, size, blob_key, doc) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		v.SkillID, v.ID, micros(v.CreatedAt), v.SHA256, v.Size, v.BlobKey, doc)
	return err
}

func (t skillTx) Version(skillID, id string) (*store.SkillVersion, error) {
	return skillVersions.read(t.w, "v.skill_id = ? AND v.id = ?", skillID, id)
}

func (t skillTx) DeleteVersion(skillID, id string) error {
	return skillVersions.deleteIn(t.w, "skill_id = ? AND id = ?", skillID, id)
}

func (t skillTx) NewestVersion(skillID string) (string, error) {
	var id string
	err := t.w.queryRow(`SELECT id FROM skill_versions WHERE skill_id = ? ORDER BY created_at DESC, id DESC LIMIT 1`, skillID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, err
}

func scanSkillVersion(row scanner) (*store.SkillVersion, error) {
	var (
		v   store.SkillVersion
		doc []byte
	)
	if err := row.Scan(&v.SHA256, &v.Size, &v.BlobKey, &doc); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(doc, &v.SkillVersion); err != nil {
		return nil, fmt.Errorf("decode skill version: %w", err)
	}
	return &v, nil
}
