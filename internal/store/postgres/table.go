package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/corralhq/corral/internal/store"
)

// table is one entity's table: its SQL and its row decoder. Reading one row, listing, updating, deleting and
// stamping a time once (archive, revoke) run over it for every entity, so that an entity costs its SQL and its
// row type, and the rules in the port.
type table[T any] struct {
	what  string // the entity in errors: "vault"
	name  string // the table: "vaults"
	alias string // the table's alias in sel, for list conditions
	// sel selects the columns scan decodes: "SELECT v.doc, v.archived_at FROM vaults v" (or a join).
	sel  string
	scan func(pgx.Row) (*T, error)
	// archivable: the table has archived_at, and lists leave archived rows out unless asked.
	archivable bool
	// put writes next, as changed by update from cur, back (nil: the table is not updated).
	put func(ctx context.Context, tx pgx.Tx, next, cur *T) error
	// owner is the column of the id whose owner is a row's workspace (ListParams.Workspace): "" is the row's
	// own id; a deployment run's is its deployment's.
	owner string
}

// querier is what a pool and a transaction share.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// get reads the one row of sel that where selects; no row is ErrNotFound.
func (t *table[T]) get(ctx context.Context, s *Store, where string, args ...any) (*T, error) {
	return t.one(ctx, s, t.sel+" WHERE "+where, args...)
}

// one reads the one row query selects, with scan.
func (t *table[T]) one(ctx context.Context, s *Store, query string, args ...any) (*T, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	v, err := t.scan(s.pool.QueryRow(ctx, query, args...))
	if err != nil {
		return nil, s.dbErr(t.what+" get", err)
	}
	return v, nil
}

// read reads the one row of sel that where selects through q, with a lock clause (" FOR NO KEY UPDATE") or "".
func (t *table[T]) read(ctx context.Context, q querier, lock, where string, args ...any) (*T, error) {
	return t.scan(q.QueryRow(ctx, t.sel+" WHERE "+where+lock, args...))
}

// query starts a list: sel with a WHERE clause that conditions are added to.
func (t *table[T]) query() *query {
	var q query
	q.sql.WriteString(t.sel + " WHERE true")
	return &q
}

// list lists the rows of q (from t.query, with conditions) that p selects, in p's order.
func (t *table[T]) list(ctx context.Context, s *Store, q *query, p *store.ListParams) ([]T, error) {
	if p.Workspace != "" {
		q.sql.WriteString(" AND " + ownedBy(t.alias+"."+cmp.Or(t.owner, "id"), q.arg(p.Workspace)))
	}
	q.listFilter(p, t.alias, t.archivable)
	return t.rows(ctx, s, t.what+" list", q.sql.String(), q.args...)
}

// rows reads every row query selects; op names the read in errors.
func (t *table[T]) rows(ctx context.Context, s *Store, op, query string, args ...any) ([]T, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out, err := t.all(ctx, s.pool, query, args...)
	if err != nil {
		return nil, s.dbErr(op, err)
	}
	return out, nil
}

// all reads every row query selects through q (no rows: an empty slice).
func (t *table[T]) all(ctx context.Context, q querier, query string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	out := []T{}
	for rows.Next() {
		v, err := t.scan(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, *v)
	}
	return out, rows.Err()
}

// create runs the insert of a new row; a unique violation is ErrConflict.
func (t *table[T]) create(ctx context.Context, s *Store, insert string, args ...any) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, insert, args...)
	return s.dbErr(t.what+" create", err)
}

// update reads the row with the id under a row lock, changes it under the port's store.Update rule and writes
// it back, in one transaction.
func (t *table[T]) update(ctx context.Context, s *Store, id string, fn func(*T) error,
	keep func(next, cur *T)) (*T, error) {
	return txResult(ctx, s, t.what+" update", func(tx pgx.Tx) (*T, error) {
		cur, err := t.read(ctx, tx, " FOR NO KEY UPDATE", t.alias+".id = $1", id)
		if err != nil {
			return nil, err
		}
		next, err := store.Update(cur, fn, keep)
		if err != nil {
			return nil, err
		}
		return next, t.put(ctx, tx, next, cur)
	})
}

// delete removes the rows where selects (their dependent rows go by cascade); none is ErrNotFound.
func (t *table[T]) delete(ctx context.Context, s *Store, where string, args ...any) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.dbErr(t.what+" delete", t.deleteIn(ctx, s.pool, where, args...))
}

func (t *table[T]) deleteIn(ctx context.Context, q querier, where string, args ...any) error {
	tag, err := q.Exec(ctx, `DELETE FROM `+t.name+` WHERE `+where, args...)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return err
}

// stamp sets the time column (archived_at, revoked_at) of the rows where selects (its arguments from $2) to at,
// once: a row stamped before keeps its time. None is ErrNotFound.
func (t *table[T]) stamp(ctx context.Context, q querier, column string, at time.Time, where string, args ...any) error {
	tag, err := q.Exec(ctx, `UPDATE `+t.name+` SET `+column+` = COALESCE(`+column+`, $1) WHERE `+where,
		append([]any{at}, args...)...)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return err
}

// scanDoc returns the scan of a row that is one JSON document of a T (what names it in errors) and, with
// archived, its archived_at column, which archived sets on it.
func scanDoc[T any](what string, archived func(*T, *time.Time)) func(pgx.Row) (*T, error) {
	return func(row pgx.Row) (*T, error) {
		var doc []byte
		if archived == nil {
			if err := row.Scan(&doc); err != nil {
				return nil, err
			}
			return decodeDoc[T](what, doc)
		}
		var at *time.Time
		if err := row.Scan(&doc, &at); err != nil {
			return nil, err
		}
		v, err := decodeDoc[T](what, doc)
		if err == nil {
			archived(v, utc(at))
		}
		return v, err
	}
}

// putDoc writes the JSON document of v and its archived_at to the row of the table with the id.
func putDoc(ctx context.Context, q querier, table, id string, archived *time.Time, v any) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = q.Exec(ctx, `UPDATE `+table+` SET doc = $2, archived_at = $3 WHERE id = $1`, id, doc, archived)
	return err
}

func decodeDoc[T any](what string, doc []byte) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(doc, v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", what, err)
	}
	return v, nil
}
