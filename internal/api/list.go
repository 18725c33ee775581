package api

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// Page sizes.
const (
	defaultLimit       = 20
	maxLimit           = 100
	defaultEventLimit  = 100
	maxEventLimit      = 1000
	maxResourceLimit   = 1000
	defaultVersionList = 20
)

// listPage is the PageCursor response: {"data":[...],"next_page":string|null}.
type listPage[T any] struct {
	Data     []T     `json:"data"`
	NextPage *string `json:"next_page"`
}

// biPage is the BidirectionalPageCursor response of GET /v1/sessions.
type biPage[T any] struct {
	Data     []T     `json:"data"`
	NextPage *string `json:"next_page"`
	PrevPage *string `json:"prev_page"`
}

// cursor is the decoded form of a page token. Tokens are opaque to clients: base64url of this JSON.
type cursor struct {
	T    int64  `json:"t,omitempty"` // created_at, Unix microseconds
	ID   string `json:"i,omitempty"`
	Seq  int64  `json:"s,omitempty"` // events: sequence number; agent versions: version
	Back bool   `json:"b,omitempty"` // a prev_page token: the page before this position
}

func (c cursor) encode() *string {
	b, _ := json.Marshal(c) // a cursor always encodes
	s := base64.RawURLEncoding.EncodeToString(b)
	return &s
}

func itemCursor(createdAt time.Time, id string, back bool) *string {
	return cursor{T: createdAt.UnixMicro(), ID: id, Back: back}.encode()
}

func seqCursor(seq int64) *string { return cursor{Seq: seq}.encode() }

// query reads list parameters from a URL query. Unknown parameters are ignored; malformed known ones are 400s.
type query struct {
	v url.Values
}

func newQuery(u *url.URL) query { return query{v: u.Query()} }

// list returns every value of a repeatable parameter, in either the bracketed (key[]=a) or plain (key=a) form,
// with comma-separated values split.
func (q query) list(key string) []string { return listOf[string](q, key) }

// listOf is list for a parameter whose values are of a vocabulary type (event types).
func listOf[T ~string](q query, key string) []T {
	var out []T
	for _, k := range []string{key + "[]", key} {
		for _, v := range q.v[k] {
			for _, part := range strings.Split(v, ",") {
				if part = strings.TrimSpace(part); part != "" {
					out = append(out, T(part))
				}
			}
		}
	}
	return out
}

func (q query) str(key string) string { return q.v.Get(key) }

// limit parses "limit": default def, between 1 and max.
func (q query) limit(def, maxN int) (int, error) {
	s := q.v.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxN {
		return 0, invalid("limit", "must be an integer between 1 and %d", maxN)
	}
	return n, nil
}

// intParam parses an optional integer >= 1.
func (q query) intParam(key string) (int, error) {
	s := q.v.Get(key)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, invalid(key, "must be an integer >= 1")
	}
	return n, nil
}

func (q query) boolean(key string) (bool, error) {
	s := q.v.Get(key)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, invalid(key, "must be true or false")
	}
	return b, nil
}

// desc parses "order" (asc|desc) with a default.
func (q query) desc(defDesc bool) (bool, error) {
	switch q.v.Get("order") {
	case "":
		return defDesc, nil
	case "asc":
		return false, nil
	case "desc":
		return true, nil
	}
	return false, invalid("order", `must be "asc" or "desc"`)
}

// createdFilters parses created_at[gt|gte|lt|lte] into p.
func (q query) createdFilters(p *store.ListParams) error {
	for _, f := range []struct {
		key string
		dst **time.Time
	}{
		{"created_at[gt]", &p.CreatedAfter},
		{"created_at[gte]", &p.CreatedFrom},
		{"created_at[lt]", &p.CreatedBefore},
		{"created_at[lte]", &p.CreatedTo},
	} {
		t, err := q.time(f.key)
		if err != nil {
			return err
		}
		*f.dst = t
	}
	return nil
}

func (q query) time(key string) (*time.Time, error) {
	s := q.v.Get(key)
	if s == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, invalid(key, "must be an RFC 3339 timestamp")
	}
	t = t.UTC()
	return &t, nil
}

// page decodes the "page" token.
func (q query) page() (*cursor, error) {
	s := q.v.Get("page")
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, invalid("page", "invalid page token")
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, invalid("page", "invalid page token")
	}
	return &c, nil
}

// listParams reads the common list parameters: limit, page, include_archived and the created_at filters.
func listParams(q query, def, maxN int) (store.ListParams, int, *cursor, error) {
	var p store.ListParams
	limit, err := q.limit(def, maxN)
	if err != nil {
		return p, 0, nil, err
	}
	c, err := q.page()
	if err != nil {
		return p, 0, nil, err
	}
	if p.IncludeArchived, err = q.boolean("include_archived"); err != nil {
		return p, 0, nil, err
	}
	if err := q.createdFilters(&p); err != nil {
		return p, 0, nil, err
	}
	return p, limit, c, nil
}

// itemPage reads a created_at/id cursor into p, rejecting tokens of another kind.
func itemPageInto(c *cursor, p *store.ListParams) error {
	if c == nil {
		return nil
	}
	if c.ID == "" || c.T == 0 {
		return invalid("page", "invalid page token")
	}
	p.After = &store.Cursor{CreatedAt: time.UnixMicro(c.T).UTC(), ID: c.ID}
	return nil
}

// trim cuts a limit+1 fetch to limit items and reports whether there were more.
func trim[T any](items []T, limit int) ([]T, bool) {
	if len(items) > limit {
		return items[:limit], true
	}
	return items, false
}

// listByCreated pages a (created_at, id) ordered list: it fetches limit+1 items to know whether another page
// exists, so a page never chains into an empty one. With a Back cursor it walks the other way and returns the
// page that precedes the cursor, in the requested order. prev is only computed when bidi is set.
func listByCreated[T any](p store.ListParams, limit int, c *cursor, bidi bool,
	fetch func(*store.ListParams) ([]T, error), key func(*T) (time.Time, string),
) (data []T, next, prev *string, err error) {
	if err := itemPageInto(c, &p); err != nil {
		return nil, nil, nil, err
	}
	p.Limit = limit + 1
	back := c != nil && c.Back
	if back {
		p.Desc = !p.Desc
	}
	items, err := fetch(&p)
	if err != nil {
		return nil, nil, nil, err
	}
	items, more := trim(items, limit)
	if items == nil {
		items = []T{}
	}
	if back {
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
		if len(items) > 0 {
			if more && bidi {
				t, id := key(&items[0])
				prev = itemCursor(t, id, true)
			}
			t, id := key(&items[len(items)-1])
			next = itemCursor(t, id, false)
		}
		return items, next, prev, nil
	}
	if len(items) > 0 {
		if more {
			t, id := key(&items[len(items)-1])
			next = itemCursor(t, id, false)
		}
		if c != nil && bidi {
			t, id := key(&items[0])
			prev = itemCursor(t, id, true)
		}
	}
	return items, next, prev, nil
}
