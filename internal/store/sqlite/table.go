package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// table is one entity's table: its SQL and its row decoder. Reading one row, listing, updating, deleting and
// stamping a time once (archive, revoke) run over it for every entity, so that an entity costs its SQL and its
// row type, and the rules in the port.
type table[T any] struct {
	what  string // the entity in errors: "vault"
	name  string // the table: "vaults"
	alias string // the table's alias in sel, for list conditions
	// sel selects the columns scan decodes: "SELECT v.doc FROM vaults v" (or a join).
	sel  string
	scan func(scanner) (*T, error)
	// archivable: the table has archived_at, and lists leave archived rows out unless asked.
	archivable bool
	// put writes next, as changed by update from cur, back (nil: the table is not updated).
	put func(w *wtx, next, cur *T) error
	// owner is the column of the id whose owner is a row's workspace (ListParams.Workspace): "" is the row's
	// own id; a deployment run's is its deployment's.
	owner string
}

// get reads the one row of sel that where selects; no row is ErrNotFound. key names it in errors.
func (t *table[T]) get(ctx context.Context, s *Store, key, where string, args ...any) (*T, error) {
	return t.one(ctx, s, key, t.sel+" WHERE "+where, args...)
}

// one reads the one row query selects, with scan.
func (t *table[T]) one(ctx context.Context, s *Store, key, query string, args ...any) (*T, error) {
	v, err := t.scan(s.readRow(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: get %s %s: %w", t.what, key, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr("get "+t.what+" "+key, err)
	}
	return v, nil
}

// read reads the one row of sel that where selects in a write transaction; no row is ErrNotFound.
func (t *table[T]) read(w *wtx, where string, args ...any) (*T, error) {
	v, err := t.scan(w.queryRow(t.sel+" WHERE "+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", t.what, store.ErrNotFound)
	}
	return v, err
}

// list lists the rows of sel that f and p select, in p's order.
func (t *table[T]) list(ctx context.Context, s *Store, f *filter, p *store.ListParams) ([]T, error) {
	lp := *p
	lp.IncludeArchived = lp.IncludeArchived || !t.archivable
	if lp.Workspace != "" {
		f.add(ownedBy(t.alias+"."+cmp.Or(t.owner, "id")), lp.Workspace)
	}
	tail := f.addList(t.alias, &lp)
	return t.rows(ctx, s, "list "+t.name, t.sel+f.where()+tail, append(f.args, limitArg(p.Limit))...)
}

// rows reads every row query selects; op names the read in errors.
func (t *table[T]) rows(ctx context.Context, s *Store, op, query string, args ...any) ([]T, error) {
	rows, err := s.readQuery(ctx, query, args...)
	if err != nil {
		return nil, s.readErr(op, err)
	}
	out, err := collect(rows, t.scan)
	if err != nil {
		return nil, s.readErr(op, err)
	}
	return out, nil
}

// create runs the insert of a new row; a constraint violation is ErrConflict.
func (t *table[T]) create(ctx context.Context, s *Store, id, insert string, args ...any) error {
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(insert, args...)
		return err
	}, nil)
	return writeErr(err, "create %s %s", t.what, id)
}

// update reads the row with the id, changes it under the port's store.Update rule and writes it back, in one
// transaction.
func (t *table[T]) update(ctx context.Context, s *Store, id string, fn func(*T) error,
	keep func(next, cur *T)) (*T, error) {
	return writeResult(ctx, s, func(w *wtx) (*T, error) {
		cur, err := t.read(w, t.alias+".id = ?", id)
		if err != nil {
			return nil, err
		}
		next, err := store.Update(cur, fn, keep)
		if err != nil {
			return nil, err
		}
		return next, t.put(w, next, cur)
	}, "update %s %s", t.what, id)
}

// delete removes the rows where selects (their dependent rows go by cascade); none is ErrNotFound.
func (t *table[T]) delete(ctx context.Context, s *Store, key, where string, args ...any) error {
	err := s.write(ctx, func(w *wtx) error { return t.deleteIn(w, where, args...) }, nil)
	return writeErr(err, "delete %s %s", t.what, key)
}

func (t *table[T]) deleteIn(w *wtx, where string, args ...any) error {
	n, err := w.execN(`DELETE FROM `+t.name+` WHERE `+where, args...)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	return err
}

// stamp sets the time column (archived_at, revoked_at) of the rows where selects to at, once: a row stamped
// before keeps its time. None is ErrNotFound.
func (t *table[T]) stamp(w *wtx, column string, at time.Time, where string, args ...any) error {
	n, err := w.execN(`UPDATE `+t.name+` SET `+column+` = coalesce(`+column+`, ?) WHERE `+where,
		append([]any{micros(at)}, args...)...)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	return err
}

// scanDoc returns the scan of a row that is one JSON document of a T (what names it in errors) and, with
// archived, its archived_at column, which set sets on it.
func scanDoc[T any](what string, archived func(*T, *time.Time)) func(scanner) (*T, error) {
	return func(row scanner) (*T, error) {
		var doc []byte
		if archived == nil {
			if err := row.Scan(&doc); err != nil {
				return nil, err
			}
			return decodeDoc[T](what, doc)
		}
		var at sql.NullInt64
		if err := row.Scan(&doc, &at); err != nil {
			return nil, err
		}
		v, err := decodeDoc[T](what, doc)
		if err == nil {
			archived(v, timePtr(at))
		}
		return v, err
	}
}

// putDoc writes the JSON document of v and its archived_at to the row of the table with the id.
func putDoc(w *wtx, table, id string, archived *time.Time, v any) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.exec(`UPDATE `+table+` SET archived_at = ?, doc = ? WHERE id = ?`, nullMicros(archived), doc, id)
	return err
}

func decodeDoc[T any](what string, doc []byte) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(doc, v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", what, err)
	}
	return v, nil
}
