package price

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCostExact(t *testing.T) {
	r, ok := Default().Rates("claude-sonnet-4-5")
	if !ok {
		t.Fatal("claude-sonnet-4-5 has no price")
	}
	// $3 / $15 / $3.75 / $6 / $0.30 per million tokens.
	if r.Input != 3_000_000 || r.Output != 15_000_000 || r.CacheWrite5m != 3_750_000 || r.CacheWrite1h != 6_000_000 || r.CacheRead != 300_000 {
		t.Fatalf("rates %+v", r)
	}
	cases := []struct {
		tok   Tokens
		pico  Pico
		cents int64
	}{
		{Tokens{}, 0, 0},
		{Tokens{Input: 1}, 3_000_000, 1},                      // $0.000003 shows as a cent
		{Tokens{Input: 1000, Output: 500}, 10_500_000_000, 2}, // 1.05 cents
		{Tokens{Input: 1_000_000}, 3 * PicoPerDollar, 300},    // exactly $3: no rounding up
		{Tokens{Input: 2000, Output: 400}, 12_000_000_000, 2}, // 1.2 cents
		{Tokens{CacheWrite5m: 1_000_000, CacheWrite1h: 1_000_000, CacheRead: 1_000_000}, 1005 * PicoPerCent, 1005},
		{Tokens{Input: -5, Output: 1}, 15_000_000, 1}, // a negative count counts as zero
	}
	for _, c := range cases {
		got := r.Cost(c.tok)
		if got != c.pico || got.Cents() != c.cents {
			t.Errorf("Cost(%+v) = %d pico (%d cents), want %d (%d cents)", c.tok, got, got.Cents(), c.pico, c.cents)
		}
	}
	// Many small requests add up exactly: 3 * 333_333 input tokens of $3/M is 999_999 * $0.000003.
	var sum Pico
	for range 3 {
		sum = Add(sum, r.Cost(Tokens{Input: 333_333}))
	}
	if sum != 999_999*3_000_000 || sum.Cents() != 300 {
		t.Errorf("sum %d (%d cents)", sum, sum.Cents())
	}
}

func TestCostSaturates(t *testing.T) {
	r := Rates{Input: 1_000_000_000_000}
	if got := r.Cost(Tokens{Input: math.MaxInt64}); got != math.MaxInt64 {
		t.Errorf("overflowing cost = %d, want saturation", got)
	}
	if got := Add(math.MaxInt64-1, 5); got != math.MaxInt64 {
		t.Errorf("Add saturates to %d", got)
	}
	if got := FromCents(MaxBudgetCents); got != MaxBudgetCents*PicoPerCent || got/PicoPerCent != MaxBudgetCents {
		t.Errorf("the largest budget is %d picodollars, not exact", got)
	}
	if FromCents(math.MaxInt64) != math.MaxInt64 {
		t.Error("FromCents does not saturate")
	}
}

func TestLookup(t *testing.T) {
	tab := Default()
	for _, id := range []string{"claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "claude-3-7-sonnet-latest", "claude-opus-4-6", "claude-haiku-4-5"} {
		if !tab.Priced(id) {
			t.Errorf("%s has no price", id)
		}
	}
	for _, id := range []string{"claude-test", "gpt-4o", "openai/gpt-4o", "", "claude-sonnet-4-5-2025"} {
		if tab.Priced(id) {
			t.Errorf("%s has a price", id)
		}
	}
	var nilTable *Table
	if nilTable.Priced("claude-sonnet-4-5") {
		t.Error("a nil table prices")
	}
}

func TestParse(t *testing.T) {
	tab, err := Parse([]byte(`{"models": {"openai/gpt-4o": {"input": "2.50", "output": 10, "cache_read": "1.25"},
		"claude-sonnet-4-5": {"input": "0.000001", "output": "1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := tab.Rates("openai/gpt-4o")
	want := Rates{Input: 2_500_000, Output: 10_000_000, CacheWrite5m: 2_500_000, CacheWrite1h: 2_500_000, CacheRead: 1_250_000}
	if !ok || r != want {
		t.Errorf("gpt-4o %+v, want %+v", r, want)
	}
	if r, _ := tab.Rates("claude-sonnet-4-5"); r.Input != 1 || r.Output != 1_000_000 {
		t.Errorf("the file does not replace a built-in entry: %+v", r)
	}
	if !tab.Priced("claude-haiku-4-5") {
		t.Error("the built-in entries are gone")
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`not json`, "not a prices object"},
		{`{"gpt-4o": {"input": 1, "output": 2}}`, "not a prices object"},
		{`{"models": {}}`, "no models"},
		{`{"models": {"m": {"input": "1"}}}`, `model "m": input and output are required`},
		{`{"models": {"m": {"input": "-1", "output": "1"}}}`, `model "m": input: price "-1"`},
		{`{"models": {"m": {"input": "1.0000001", "output": "1"}}}`, "at most six decimals"},
		{`{"models": {"m": {"input": "1e3", "output": "1"}}}`, `price "1e3"`},
		{`{"models": {"m": {"input": "1.", "output": "1"}}}`, `price "1."`},
		{`{"models": {"m": {"input": "1", "output": "1", "cache_write": "1"}}}`, "unknown field"},
		{`{"models": {"m": {"input": "1", "output": "99999999999"}}}`, `output: price`},
		{`{"models": {"": {"input": "1", "output": "1"}}}`, "empty id"},
		{`{"models": {"m": {"input": "1", "output": "1"}}} {}`, "trailing data"},
	} {
		_, err := Parse([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want an error with %q", c.in, err, c.want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "prices file") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"models": {"m": {"input": "x", "output": "1"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `model "m": input`) {
		t.Errorf("bad file: %v", err)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"models": {"local/llama": {"input": "0.1", "output": "0.2"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tab, err := Load(good)
	if err != nil || !tab.Priced("local/llama") {
		t.Fatalf("good file: %v", err)
	}
}

// TestModels: every built-in model is listed once with a display name and a release date, newest first; a
// prices file's models are listed under the name it gives; aliases and dated ids resolve to their model.
func TestModels(t *testing.T) {
	t.Parallel()
	def := Default()
	listed := map[string]bool{}
	for _, m := range def.Models() {
		listed[m.ID] = true
		if m.DisplayName == "" || m.DisplayName == m.ID || m.Released.Year() < 2024 {
			t.Errorf("built-in model %+v: want a display name and a release date", m)
		}
	}
	for id := range anthropic {
		if !listed[id] && aliases[id] == "" {
			t.Errorf("built-in model %q is neither listed nor an alias of a listed one", id)
		}
	}
	models := def.Models()
	if len(models) != len(claude) || models[0].ID != "claude-sonnet-4-6" || models[len(models)-1].ID != "claude-3-haiku" {
		t.Errorf("models are not listed newest first: %v", models)
	}
	tab, err := Parse([]byte(`{"models": {"openai/gpt-4o": {"input": "2.50", "output": "10", "display_name": "GPT-4o"}, "local/x": {"input": 0, "output": 0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Model{}
	for _, m := range tab.Models() {
		got[m.ID] = m
	}
	if m := got["openai/gpt-4o"]; m.DisplayName != "GPT-4o" || !m.Released.Equal(time.Unix(0, 0)) {
		t.Errorf("openai/gpt-4o: %+v", m)
	}
	if m := got["local/x"]; m.DisplayName != "local/x" {
		t.Errorf("local/x: %+v", m)
	}
	for id, want := range map[string]string{"claude-sonnet-4-5-20250929": "Claude Sonnet 4.5", "claude-opus-4": "Claude Opus 4",
		"claude-haiku-4-5-latest": "Claude Haiku 4.5", "claude-opus-4-6": "Claude Opus 4.6"} {
		if m, ok := def.Model(id); !ok || m.ID != id || m.DisplayName != want {
			t.Errorf("Model(%q) = %+v, %v; want %q", id, m, ok, want)
		}
	}
	if m, ok := def.Model("gpt-4o"); ok {
		t.Errorf("Model(gpt-4o) = %+v", m)
	}
}

func TestWebSearchCost(t *testing.T) {
	if WebSearchCost(1000) != 10*PicoPerDollar || WebSearchCost(0) != 0 || WebSearchCost(-3) != 0 {
		t.Fatalf("1,000 searches cost %d picodollars", WebSearchCost(1000))
	}
}
