package price

import (
	"cmp"
	"slices"
	"time"
)

// Model is a model of the table as the Models API lists it: its id, a name for people and its release date
// (the Unix epoch when unknown, as the Models API does).
type Model struct {
	ID          string
	DisplayName string
	Released    time.Time
}

// claude names the built-in table's models: one entry per model, under the id agents name it by (an alias the
// Messages API accepts), with the date of its first snapshot (that of its dated id, claude-opus-4-1-20250805)
// or, for the models published without one, of its release. The table's other ids are aliases of these
// (claude-opus-4 of claude-opus-4-0) and are not listed apart.
var claude = []Model{
	{"claude-opus-4-6", "Claude Opus 4.6", day(2026, 2, 5)},
	{"claude-sonnet-4-6", "Claude Sonnet 4.6", day(2026, 2, 17)},
	{"claude-opus-4-5", "Claude Opus 4.5", day(2025, 11, 1)},
	{"claude-haiku-4-5", "Claude Haiku 4.5", day(2025, 10, 1)},
	{"claude-sonnet-4-5", "Claude Sonnet 4.5", day(2025, 9, 29)},
	{"claude-opus-4-1", "Claude Opus 4.1", day(2025, 8, 5)},
	{"claude-opus-4-0", "Claude Opus 4", day(2025, 5, 14)},
	{"claude-sonnet-4-0", "Claude Sonnet 4", day(2025, 5, 14)},
	{"claude-3-7-sonnet", "Claude Sonnet 3.7", day(2025, 2, 19)},
	{"claude-3-5-haiku", "Claude Haiku 3.5", day(2024, 10, 22)},
	{"claude-3-haiku", "Claude Haiku 3", day(2024, 3, 7)},
}

// aliases are the built-in table's ids that name a model of claude under another id.
var aliases = map[string]string{"claude-opus-4": "claude-opus-4-0", "claude-sonnet-4": "claude-sonnet-4-0"}

func day(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// Models lists the table's models, most recently released first (ties by id): the built-in Claude models and
// each model a prices file added, under the display name the file gives it (its id if none).
func (t *Table) Models() []Model {
	if t == nil {
		return nil
	}
	known := make(map[string]Model, len(claude))
	for _, m := range claude {
		known[m.ID] = m
	}
	out := make([]Model, 0, len(t.rates))
	for id := range t.rates {
		if _, alias := aliases[id]; alias {
			continue
		}
		m, ok := known[id]
		if !ok {
			m = Model{ID: id, DisplayName: cmp.Or(t.names[id], id), Released: time.Unix(0, 0).UTC()}
		} else if name := t.names[id]; name != "" {
			m.DisplayName = name
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Model) int {
		return cmp.Or(b.Released.Compare(a.Released), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// Model returns the model of id: a listed one, or one the id names as an alias, with a date suffix
// (claude-sonnet-4-5-20250929) or -latest, under the id asked for.
func (t *Table) Model(id string) (Model, bool) {
	models := t.Models()
	find := func(id string) (Model, bool) {
		if a, ok := aliases[id]; ok {
			id = a
		}
		i := slices.IndexFunc(models, func(m Model) bool { return m.ID == id })
		if i < 0 {
			return Model{}, false
		}
		return models[i], true
	}
	if m, ok := find(id); ok {
		m.ID = id
		return m, true
	}
	if base, ok := undated(id); ok {
		if m, ok := find(base); ok {
			m.ID = id
			return m, true
		}
	}
	return Model{}, false
}
