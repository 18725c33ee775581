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

// SkillCreate stores a new skill and its first version.
func (s *Store) SkillCreate(ctx context.Context, sk *apitype.Skill, v *store.SkillVersion) error {
	doc, err := json.Marshal(sk)
	if err != nil {
		return fmt.Errorf("sqlite: create skill %s: %w", sk.ID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		if _, err := w.exec(`INSERT INTO skills (id, created_at, doc) VALUES (?, ?, ?)`, sk.ID, micros(sk.CreatedAt), doc); err != nil {
			return err
		}
		return w.insertSkillVersion(v)
	}, nil)
	return writeErr(err, "create skill %s", sk.ID)
}

func (w *wtx) insertSkillVersion(v *store.SkillVersion) error {
	doc, err := json.Marshal(&v.SkillVersion)
	if err != nil {
		return err
	}
	_, err = w.exec(`INSERT INTO skill_versions (skill_id, id, created_at, sha256, size, blob_key, doc) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		v.SkillID, v.ID, micros(v.CreatedAt), v.SHA256, v.Size, v.BlobKey, doc)
	return err
}

func (w *wtx) skill(id string) (*apitype.Skill, error) {
	sk, err := scanSkill(w.queryRow(`SELECT doc FROM skills WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return sk, err
}

func (w *wtx) putSkill(sk *apitype.Skill) error {
	doc, err := json.Marshal(sk)
	if err != nil {
		return err
	}
	_, err = w.exec(`UPDATE skills SET doc = ? WHERE id = ?`, doc, sk.ID)
	return err
}

// SkillGet returns a skill.
func (s *Store) SkillGet(ctx context.Context, id string) (*apitype.Skill, error) {
	return getOne(ctx, s, "skill "+id, scanSkill, `SELECT doc FROM skills WHERE id = ?`, id)
}

// SkillList lists skills.
func (s *Store) SkillList(ctx context.Context, p *store.ListParams) ([]apitype.Skill, error) {
	var f filter
	lp := *p
	lp.IncludeArchived = true // skills have no archived_at
	tail := f.addList("k", &lp)
	rows, err := s.readQuery(ctx, `SELECT k.doc FROM skills k`+f.where()+tail, append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list skills", err)
	}
	out, err := collect(rows, scanSkill)
	if err != nil {
		return nil, s.readErr("list skills", err)
	}
	return out, nil
}

// SkillDelete removes a skill and its versions.
func (s *Store) SkillDelete(ctx context.Context, id string) ([]store.SkillVersion, error) {
	var out []store.SkillVersion
	err := s.write(ctx, func(w *wtx) error {
		rows, err := w.query(`SELECT sha256, size, blob_key, doc FROM skill_versions WHERE skill_id = ?`, id)
		if err != nil {
			return err
		}
		if out, err = collect(rows, scanSkillVersion); err != nil {
			return err
		}
		if _, err := w.exec(`DELETE FROM skill_versions WHERE skill_id = ?`, id); err != nil {
			return err
		}
		n, err := w.execN(`DELETE FROM skills WHERE id = ?`, id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: delete skill %s: %w", id, err)
	}
	return out, nil
}

// SkillVersionCreate stores a new version and makes it the skill's latest.
func (s *Store) SkillVersionCreate(ctx context.Context, v *store.SkillVersion) error {
	err := s.write(ctx, func(w *wtx) error {
		sk, err := w.skill(v.SkillID)
		if err != nil {
			return err
		}
		if err := w.insertSkillVersion(v); err != nil {
			if isConstraint(err) {
				return store.ErrConflict
			}
			return err
		}
		sk.LatestVersionID, sk.UpdatedAt = v.ID, v.CreatedAt
		return w.putSkill(sk)
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: create version of skill %s: %w", v.SkillID, err)
	}
	return nil
}

const skillVersionCols = `SELECT sha256, size, blob_key, doc FROM skill_versions`

// SkillVersionGet returns a version ("latest" is the skill's latest).
func (s *Store) SkillVersionGet(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	var row *sql.Row
	if version == "latest" {
		row = s.readRow(ctx, skillVersionCols+` WHERE skill_id = ? ORDER BY created_at DESC, id DESC LIMIT 1`, skillID)
	} else {
		row = s.readRow(ctx, skillVersionCols+` WHERE skill_id = ? AND id = ?`, skillID, version)
	}
	v, err := scanSkillVersion(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: get version %s of skill %s: %w", version, skillID, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr("get skill version", err)
	}
	return v, nil
}

// SkillVersionList lists a skill's versions, newest first.
func (s *Store) SkillVersionList(ctx context.Context, p *store.SkillVersionListParams) ([]store.SkillVersion, error) {
	if _, err := s.SkillGet(ctx, p.SkillID); err != nil {
		return nil, err
	}
	f := filter{}
	f.add("skill_id = ?", p.SkillID)
	if p.After != nil {
		f.add("(created_at, id) < (?, ?)", micros(p.After.CreatedAt), p.After.ID)
	}
	rows, err := s.readQuery(ctx, skillVersionCols+f.where()+` ORDER BY created_at DESC, id DESC LIMIT ?`,
		append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list skill versions", err)
	}
	out, err := collect(rows, scanSkillVersion)
	if err != nil {
		return nil, s.readErr("list skill versions", err)
	}
	return out, nil
}

// SkillVersionDelete removes a version; the skill's latest becomes its newest remaining one.
func (s *Store) SkillVersionDelete(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	var v *store.SkillVersion
	err := s.write(ctx, func(w *wtx) error {
		sk, err := w.skill(skillID)
		if err != nil {
			return err
		}
		if v, err = scanSkillVersion(w.queryRow(skillVersionCols+` WHERE skill_id = ? AND id = ?`, skillID, version)); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return store.ErrNotFound
			}
			return err
		}
		if _, err := w.exec(`DELETE FROM skill_versions WHERE skill_id = ? AND id = ?`, skillID, version); err != nil {
			return err
		}
		var latest string
		err = w.queryRow(`SELECT id FROM skill_versions WHERE skill_id = ? ORDER BY created_at DESC, id DESC LIMIT 1`, skillID).Scan(&latest)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		sk.LatestVersionID = latest
		return w.putSkill(sk)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: delete version %s of skill %s: %w", version, skillID, err)
	}
	return v, nil
}

var scanSkill = scanDoc[apitype.Skill]("skill")

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
