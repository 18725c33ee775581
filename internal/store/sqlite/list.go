package sqlite

import (
	"database/sql"
	"strings"

	"github.com/corralhq/corral/internal/store"
)

// filter accumulates the conditions and arguments of a WHERE clause.
type filter struct {
	conds []string
	args  []any
}

func (f *filter) add(cond string, args ...any) {
	f.conds = append(f.conds, cond)
	f.args = append(f.args, args...)
}

func (f *filter) where() string {
	if len(f.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.conds, " AND ")
}

// addList adds the conditions of p for a table (or alias) t with created_at, id and archived_at columns, and
// returns the ORDER BY and LIMIT clauses; its LIMIT argument is appended last.
func (f *filter) addList(t string, p *store.ListParams) string {
	if !p.IncludeArchived {
		f.add(t + ".archived_at IS NULL")
	}
	if p.CreatedAfter != nil {
		f.add(t+".created_at > ?", micros(*p.CreatedAfter))
	}
	if p.CreatedFrom != nil {
		f.add(t+".created_at >= ?", micros(*p.CreatedFrom))
	}
	if p.CreatedBefore != nil {
		f.add(t+".created_at < ?", micros(*p.CreatedBefore))
	}
	if p.CreatedTo != nil {
		f.add(t+".created_at <= ?", micros(*p.CreatedTo))
	}
	dir, cmpOp := "ASC", ">"
	if p.Desc {
		dir, cmpOp = "DESC", "<"
	}
	if p.After != nil {
		f.add("("+t+".created_at, "+t+".id) "+cmpOp+" (?, ?)", micros(p.After.CreatedAt), p.After.ID)
	}
	return " ORDER BY " + t + ".created_at " + dir + ", " + t + ".id " + dir + " LIMIT ?"
}

// placeholders returns "?, ?, ..." for n arguments.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

type scanner interface{ Scan(dest ...any) error }

// collect scans every row of rows with scan and closes rows; no rows give an empty slice.
func collect[T any](rows *sql.Rows, scan func(scanner) (*T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, rows.Err()
}

// anys returns vs as arguments.
func anys[T any](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}
