package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func insertSkillVersion(ctx context.Context, tx pgx.Tx, v *store.SkillVersion) error {
	doc, err := json.Marshal(&v.SkillVersion)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO skill_versions (skill_id, id, created_at, sha256, size, blob_key, doc) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		v.SkillID, v.ID, v.CreatedAt, v.SHA256, v.Size, v.BlobKey, doc)
	return err
}

func getSkill(ctx context.Context, q querier, id, lock string) (*apitype.Skill, error) {
	var doc []byte
	if err := q.QueryRow(ctx, `SELECT doc FROM skills WHERE id = $1`+lock, id).Scan(&doc); err != nil {
		return nil, err
	}
	var sk apitype.Skill
	if err := json.Unmarshal(doc, &sk); err != nil {
		return nil, fmt.Errorf("decode skill: %w", err)
	}
	return &sk, nil
}

func putSkill(ctx context.Context, tx pgx.Tx, sk *apitype.Skill) error {
	doc, err := json.Marshal(sk)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = tx.Exec(ctx, `UPDATE skills SET doc = $2 WHERE id = $1`, sk.ID, doc)
	return err
}

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
		return insertSkillVersion(ctx, tx, v)
	})
	return s.dbErr("skill create", err)
}

// SkillGet returns a skill.
func (s *Store) SkillGet(ctx context.Context, id string) (*apitype.Skill, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	sk, err := getSkill(ctx, s.pool, id, "")
	if err != nil {
		return nil, s.dbErr("skill get", err)
	}
	return sk, nil
}

// SkillList lists skills.
func (s *Store) SkillList(ctx context.Context, p *store.ListParams) ([]apitype.Skill, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q query
	q.sql.WriteString(`SELECT k.doc, NULL::timestamptz FROM skills k WHERE true`)
	q.listFilter(p, "k", false)
	out, err := collectDocs(ctx, s, &q, func(doc []byte, _ *time.Time) (apitype.Skill, error) {
		var sk apitype.Skill
		err := json.Unmarshal(doc, &sk)
		return sk, err
	})
	if err != nil {
		return nil, s.dbErr("skill list", err)
	}
	return out, nil
}

const skillVersionCols = `SELECT sha256, size, blob_key, doc FROM skill_versions`

func collectSkillVersions(rows pgx.Rows) ([]store.SkillVersion, error) {
	var (
		v   store.SkillVersion
		doc []byte
	)
	out := []store.SkillVersion{}
	_, err := pgx.ForEachRow(rows, []any{&v.SHA256, &v.Size, &v.BlobKey, &doc}, func() error {
		got := store.SkillVersion{SHA256: v.SHA256, Size: v.Size, BlobKey: v.BlobKey}
		if err := json.Unmarshal(doc, &got.SkillVersion); err != nil {
			return fmt.Errorf("decode skill version: %w", err)
		}
		out = append(out, got)
		return nil
	})
	return out, err
}

func getSkillVersion(ctx context.Context, q querier, skillID, version string) (*store.SkillVersion, error) {
	var (
		v   store.SkillVersion
		doc []byte
	)
	var row pgx.Row
	if version == "latest" {
		row = q.QueryRow(ctx, skillVersionCols+` WHERE skill_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1`, skillID)
	} else {
		row = q.QueryRow(ctx, skillVersionCols+` WHERE skill_id = $1 AND id = $2`, skillID, version)
	}
	if err := row.Scan(&v.SHA256, &v.Size, &v.BlobKey, &doc); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(doc, &v.SkillVersion); err != nil {
		return nil, fmt.Errorf("decode skill version: %w", err)
	}
	return &v, nil
}

// SkillDelete removes a skill and its versions.
func (s *Store) SkillDelete(ctx context.Context, id string) ([]store.SkillVersion, error) {
	var out []store.SkillVersion
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := getSkill(ctx, tx, id, " FOR UPDATE"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, skillVersionCols+` WHERE skill_id = $1`, id)
		if err != nil {
			return err
		}
		if out, err = collectSkillVersions(rows); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM skill_versions WHERE skill_id = $1`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM skills WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return nil, s.dbErr("skill delete", err)
	}
	return out, nil
}

// SkillVersionCreate stores a new version and makes it the skill's latest.
func (s *Store) SkillVersionCreate(ctx context.Context, v *store.SkillVersion) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		sk, err := getSkill(ctx, tx, v.SkillID, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		if err := insertSkillVersion(ctx, tx, v); err != nil {
			return err
		}
		sk.LatestVersionID, sk.UpdatedAt = v.ID, v.CreatedAt
		return putSkill(ctx, tx, sk)
	})
	return s.dbErr("skill version create", err)
}

// SkillVersionGet returns a version ("latest" is the skill's latest).
func (s *Store) SkillVersionGet(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	v, err := getSkillVersion(ctx, s.pool, skillID, version)
	if err != nil {
		return nil, s.dbErr("skill version get", err)
	}
	return v, nil
}

// SkillVersionList lists a skill's versions, newest first.
func (s *Store) SkillVersionList(ctx context.Context, p *store.SkillVersionListParams) ([]store.SkillVersion, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.exists(ctx, "skills", p.SkillID); err != nil {
		return nil, s.dbErr("skill version list", err)
	}
	var q query
	q.sql.WriteString(skillVersionCols)
	fmt.Fprintf(&q.sql, " WHERE skill_id = %s", q.arg(p.SkillID))
	if p.After != nil {
		fmt.Fprintf(&q.sql, " AND (created_at, id) < (%s, %s)", q.arg(p.After.CreatedAt), q.arg(p.After.ID))
	}
	q.sql.WriteString(" ORDER BY created_at DESC, id DESC")
	if p.Limit > 0 {
		fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(p.Limit))
	}
	rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
	if err != nil {
		return nil, s.dbErr("skill version list", err)
	}
	out, err := collectSkillVersions(rows)
	if err != nil {
		return nil, s.dbErr("skill version list", err)
	}
	return out, nil
}

// SkillVersionDelete removes a version; the skill's latest becomes its newest remaining one.
func (s *Store) SkillVersionDelete(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	var v *store.SkillVersion
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		sk, err := getSkill(ctx, tx, skillID, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		if v, err = getSkillVersion(ctx, tx, skillID, version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM skill_versions WHERE skill_id = $1 AND id = $2`, skillID, version); err != nil {
			return err
		}
		var latest string
		err = tx.QueryRow(ctx, `SELECT id FROM skill_versions WHERE skill_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1`, skillID).Scan(&latest)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		sk.LatestVersionID = latest
		return putSkill(ctx, tx, sk)
	})
	if err != nil {
		return nil, s.dbErr("skill version delete", err)
	}
	return v, nil
}
