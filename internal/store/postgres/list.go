package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// query builds a statement with numbered arguments.
type query struct {
	sql  strings.Builder
	args []any
}

// arg adds an argument and returns its placeholder.
func (q *query) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

// listFilter adds the conditions of p on the created_at and id columns (of table alias t) and the archived_at
// column (if archivable), then the ordering and limit.
func (q *query) listFilter(p *store.ListParams, t string, archivable bool) {
	if p == nil {
		p = &store.ListParams{}
	}
	if archivable && !p.IncludeArchived {
		fmt.Fprintf(&q.sql, " AND %s.archived_at IS NULL", t)
	}
	timeCond := func(op string, v *time.Time) {
		if v != nil {
			fmt.Fprintf(&q.sql, " AND %s.created_at %s %s", t, op, q.arg(*v))
		}
	}
	timeCond(">", p.CreatedAfter)
	timeCond(">=", p.CreatedFrom)
	timeCond("<", p.CreatedBefore)
	timeCond("<=", p.CreatedTo)
	dir, op := "ASC", ">"
	if p.Desc {
		dir, op = "DESC", "<"
	}
	if p.After != nil {
		fmt.Fprintf(&q.sql, " AND (%s.created_at, %s.id) %s (%s, %s)",
			t, t, op, q.arg(p.After.CreatedAt), q.arg(p.After.ID))
	}
	fmt.Fprintf(&q.sql, " ORDER BY %s.created_at %s, %s.id %s", t, dir, t, dir)
	if p.Limit > 0 {
		fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(p.Limit))
	}
}

// exists returns ErrNotFound unless table has a row with the id.
func (s *Store) exists(ctx context.Context, table, id string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+table+" WHERE id = $1)", id).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return store.ErrNotFound
	}
	return nil
}
