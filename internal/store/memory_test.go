package store_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// sliceScan is MemoryScan over a sorted slice of paths: the rule's contract, not an adapter.
func sliceScan(paths []string) store.MemoryScan {
	return func(prefix, from string, limit int, content bool) ([]apitype.Memory, error) {
		var out []apitype.Memory
		for _, p := range paths {
			if p >= from && strings.HasPrefix(p, prefix) && len(out) < limit {
				out = append(out, apitype.Memory{Path: p})
			}
		}
		return out, nil
	}
}

func itemPaths(items []store.MemoryItem) []string {
	var out []string
	for _, it := range items {
		if it.Memory != nil {
			out = append(out, it.Memory.Path)
		} else {
			out = append(out, it.Prefix)
		}
	}
	return out
}

func TestListMemoriesRollsUpAndPages(t *testing.T) {
	paths := []string{"/a-b.md", "/a.md", "/a/b.md", "/a/c/d.md", "/a/c/e.md", "/a0.md", "/aB.md", "/b/x/y/z.md", "/é.md"}
	slices.Sort(paths)
	cases := []struct {
		prefix string
		depth  int
		want   []string
	}{
		{"/", 0, paths},
		{"/", 1, []string{"/a-b.md", "/a.md", "/a/", "/a0.md", "/aB.md", "/b/", "/é.md"}},
		{"/", 2, []string{"/a-b.md", "/a.md", "/a/b.md", "/a/c/", "/a0.md", "/aB.md", "/b/x/", "/é.md"}},
		{"/a/", 1, []string{"/a/b.md", "/a/c/"}},
		{"/a/", 0, []string{"/a/b.md", "/a/c/d.md", "/a/c/e.md"}},
		{"/b/x/", 1, []string{"/b/x/y/"}},
		{"/nothing/", 1, nil},
	}
	for _, c := range cases {
		all, err := store.ListMemories(sliceScan(paths), &store.MemoryListParams{Prefix: c.prefix, Depth: c.depth, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if got := itemPaths(all); !slices.Equal(got, c.want) {
			t.Errorf("prefix %q depth %d: got %q, want %q", c.prefix, c.depth, got, c.want)
		}
		for limit := 1; limit <= 5; limit++ {
			var got []string
			after := ""
			for range 100 {
				page, err := store.ListMemories(sliceScan(paths), &store.MemoryListParams{Prefix: c.prefix, Depth: c.depth, Limit: limit, After: after})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit {
					t.Fatalf("page of %d items, limit %d", len(page), limit)
				}
				got = append(got, itemPaths(page)...)
				if len(page) < limit {
					break
				}
				after = got[len(got)-1]
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("prefix %q depth %d limit %d: paged %q, want %q", c.prefix, c.depth, limit, got, c.want)
			}
		}
	}
}
