package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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
		return fmt.Errorf("skill create: encode: %w", err)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO skills (id, created_at, doc) VALUES ($1, $2, $3)`, sk.ID, sk.CreatedAt, doc); err != nil {
			return err
		}
		return skillTx{ctx, tx}.InsertVersion(v)
	})
	return s.dbErr("skill create", err)
}

// SkillGet returns a skill.
func (s *Store) SkillGet(ctx context.Context, id string) (*apitype.Skill, error) {
	return skills.get(ctx, s, "k.id = $1", id)
}

// SkillList lists skills.
func (s *Store) SkillList(ctx context.Context, p *store.ListParams) ([]apitype.Skill, error) {
	return skills.list(ctx, s, skills.query(), p)
}

// SkillDelete removes a skill and its versions (by cascade).
func (s *Store) SkillDelete(ctx context.Context, id string) ([]store.SkillVersion, error) {
	return txResult(ctx, s, "skill delete", func(tx pgx.Tx) ([]store.SkillVersion, error) {
		if _, err := skills.read(ctx, tx, " FOR UPDATE", "k.id = $1", id); err != nil {
			return nil, err
		}
		out, err := skillVersions.all(ctx, tx, skillVersions.sel+` WHERE v.skill_id = $1`, id)
		if err != nil {
			return nil, err
		}
		return out, skills.deleteIn(ctx, tx, "id = $1", id) // the versions go by cascade
	})
}

// SkillVersionCreate stores a new version under store.CreateSkillVersion's rule.
func (s *Store) SkillVersionCreate(ctx context.Context, v *store.SkillVersion) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error { return store.CreateSkillVersion(skillTx{ctx, tx}, v) })
	return s.dbErr("skill version create", err)
}

// SkillVersionGet returns a version ("latest" is the skill's latest).
func (s *Store) SkillVersionGet(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	if version == "latest" {
		return skillVersions.one(ctx, s, skillVersions.sel+
			` WHERE v.skill_id = $1 ORDER BY v.created_at DESC, v.id DESC LIMIT 1`, skillID)
	}
	return skillVersions.get(ctx, s, "v.skill_id = $1 AND v.id = $2", skillID, version)
}

// SkillVersionList lists a skill's versions, newest first.
func (s *Store) SkillVersionList(ctx context.Context, p *store.SkillVersionListParams) ([]store.SkillVersion, error) {
	if _, err := s.SkillGet(ctx, p.SkillID); err != nil {
		return nil, err
	}
	q := skillVersions.query()
	fmt.Fprintf(&q.sql, " AND v.skill_id = %s", q.arg(p.SkillID))
	if p.After != nil {
		fmt.Fprintf(&q.sql, " AND (v.created_at, v.id) < (%s, %s)", q.arg(p.After.CreatedAt), q.arg(p.After.ID))
	}
	q.sql.WriteString(" ORDER BY v.created_at DESC, v.id DESC")
	if p.Limit > 0 {
		fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(p.Limit))
	}
	return skillVersions.rows(ctx, s, "skill version list", q.sql.String(), q.args...)
}

// SkillVersionDelete removes a version under store.DeleteSkillVersion's rule.
func (s *Store) SkillVersionDelete(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	return txResult(ctx, s, "skill version delete", func(tx pgx.Tx) (*store.SkillVersion, error) {
		return store.DeleteSkillVersion(skillTx{ctx, tx}, skillID, version)
	})
}

// skillTx is store.SkillTx over a transaction, which locks the skill it reads.
type skillTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t skillTx) Skill(id string) (*apitype.Skill, error) {
	return skills.read(t.ctx, t.tx, " FOR NO KEY UPDATE", "k.id = $1", id)
}

func (t skillTx) PutSkill(sk *apitype.Skill) error {
	doc, err := json.Marshal(sk)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = t.tx.Exec(t.ctx, `UPDATE skills SET doc = $2 WHERE id = $1`, sk.ID, doc)
	return err
}

func (t skillTx) InsertVersion(v *store.SkillVersion) error {
	doc, err := json.Marshal(&v.SkillVersion)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = t.tx.Exec(t.ctx, `INSERT INTO skill_versions (skill_id, id, created_at, sha256, size, blob_key, doc)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, v.SkillID, v.ID, v.CreatedAt, v.SHA256, v.Size, v.BlobKey, doc)
	return err
}

func (t skillTx) Version(skillID, id string) (*store.SkillVersion, error) {
	return skillVersions.read(t.ctx, t.tx, "", "v.skill_id = $1 AND v.id = $2", skillID, id)
}

func (t skillTx) DeleteVersion(skillID, id string) error {
	return skillVersions.deleteIn(t.ctx, t.tx, "skill_id = $1 AND id = $2", skillID, id)
}

func (t skillTx) NewestVersion(skillID string) (string, error) {
	var id string
	err := t.tx.QueryRow(t.ctx, `SELECT id FROM skill_versions WHERE skill_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1`,
		skillID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

func scanSkillVersion(row pgx.Row) (*store.SkillVersion, error) {
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
