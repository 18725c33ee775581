// Package price is Corral's one table of model list prices and the exact arithmetic of what a session costs.
//
// Costs are integers of picodollars (1e-12 USD): a list rate in US dollars per million tokens with up to six
// decimals ($3, $3.75, $0.075) is a whole number of picodollars per token, so a request's cost is a sum of
// integer products, exact whatever the order of the additions. A cost is rounded up to the cent only where it
// is shown (Cents). Sums saturate at the largest int64 (about $9.2 million) instead of wrapping.
package price

import (
	"math"
	"math/bits"
	"strings"
)

// Pico is an amount of US dollars in picodollars (1e-12 USD).
type Pico int64

// Amounts in picodollars.
const (
	PicoPerCent   Pico = 10_000_000_000
	PicoPerDollar      = 100 * PicoPerCent
	maxPico       Pico = math.MaxInt64
)

// MaxBudgetCents is the largest budget Corral accepts, in US cents ($1,000,000): every cost up to it is exact.
const MaxBudgetCents = 100_000_000

// Rates are a model's list prices, in picodollars per token (equal to US dollars per million tokens times
// 1e6).
type Rates struct {
	Input        Pico
	Output       Pico
	CacheWrite5m Pico // prompt-cache writes with the default 5-minute lifetime
	CacheWrite1h Pico // prompt-cache writes with the 1-hour lifetime
	CacheRead    Pico
}

// Tokens are the tokens of one model request (or of many), by kind. CacheWrite5m and CacheWrite1h are apart
// from Input, as the Messages API reports them.
type Tokens struct {
	Input, Output, CacheWrite5m, CacheWrite1h, CacheRead int64
}

// Cost is what the tokens cost at these rates, exactly (saturating at about $9.2 million). Negative counts
// count as zero.
func (r Rates) Cost(t Tokens) Pico {
	var sum Pico
	for _, x := range [...]struct {
		n    int64
		rate Pico
	}{{t.Input, r.Input}, {t.Output, r.Output}, {t.CacheWrite5m, r.CacheWrite5m}, {t.CacheWrite1h, r.CacheWrite1h},
		{t.CacheRead, r.CacheRead}} {
		sum = Add(sum, mul(x.n, x.rate))
	}
	return sum
}

// WebSearchRequest is the list price of one search of Anthropic's web search server tool ($10 per 1,000), which
// the Messages API reports in usage.server_tool_use.web_search_requests, whatever the model.
const WebSearchRequest Pico = PicoPerCent

// WebSearchCost is what n server-side web searches cost (zero for n <= 0).
func WebSearchCost(n int64) Pico { return mul(n, WebSearchRequest) }

// mul is n*rate, saturating; zero for a negative operand.
func mul(n int64, rate Pico) Pico {
	if n <= 0 || rate <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(n), uint64(rate))
	if hi != 0 || lo > uint64(maxPico) {
		return maxPico
	}
	return Pico(lo)
}

// Add is a+b for non-negative amounts, saturating.
func Add(a, b Pico) Pico {
	if a > maxPico-b {
		return maxPico
	}
	return a + b
}

// Cents is the amount rounded up to the whole cent: what is shown.
func (p Pico) Cents() int64 {
	if p <= 0 {
		return 0
	}
	c := int64(p / PicoPerCent)
	if p%PicoPerCent != 0 {
		c++
	}
	return c
}

// FromCents is an amount of whole cents in picodollars (saturating).
func FromCents(c int64) Pico { return mul(c, PicoPerCent) }

// Table maps model ids to their rates.
type Table struct {
	rates map[string]Rates
	names map[string]string // display names a prices file gave
}

// perM is a rate given in US dollars per million tokens, with up to six decimals.
func perM(s string) Pico {
	p, err := parseRate(s)
	if err != nil {
		panic(err)
	}
	return p
}

// rates builds Rates from dollars per million tokens: input, output, 5-minute and 1-hour cache writes, reads.
func rates(in, out, w5m, w1h, read string) Rates {
	return Rates{Input: perM(in), Output: perM(out), CacheWrite5m: perM(w5m), CacheWrite1h: perM(w1h), CacheRead: perM(read)}
}

// anthropic are Anthropic's public list rates for the Claude models, in US dollars per million tokens, as
// published on https://docs.anthropic.com/en/docs/about-claude/pricing (read 2026-03-21): base input, output,
// 5-minute cache writes (1.25x input), 1-hour cache writes (2x input), cache hits (0.1x input). Long-context
// (over 200K input tokens) surcharges of older Sonnet models are not modelled: those requests are priced at the
// base rates. Ids with a date suffix (claude-sonnet-4-5-20250929) or -latest take their family's rates.
var anthropic = map[string]Rates{
	"claude-opus-4-6":   rates("5", "25", "6.25", "10", "0.50"),
	"claude-opus-4-5":   rates("5", "25", "6.25", "10", "0.50"),
	"claude-opus-4-1":   rates("15", "75", "18.75", "30", "1.50"),
	"claude-opus-4-0":   rates("15", "75", "18.75", "30", "1.50"),
	"claude-opus-4":     rates("15", "75", "18.75", "30", "1.50"),
	"claude-sonnet-4-6": rates("3", "15", "3.75", "6", "0.30"),
	"claude-sonnet-4-5": rates("3", "15", "3.75", "6", "0.30"),
	"claude-sonnet-4-0": rates("3", "15", "3.75", "6", "0.30"),
	"claude-sonnet-4":   rates("3", "15", "3.75", "6", "0.30"),
	"claude-3-7-sonnet": rates("3", "15", "3.75", "6", "0.30"),
	"claude-haiku-4-5":  rates("1", "5", "1.25", "2", "0.10"),
	"claude-3-5-haiku":  rates("0.80", "4", "1", "1.6", "0.08"),
	"claude-3-haiku":    rates("0.25", "1.25", "0.30", "0.50", "0.03"),
}

// Default is the built-in table: Anthropic's list rates for the Claude models.
func Default() *Table {
	t := &Table{rates: make(map[string]Rates, len(anthropic))}
	for id, r := range anthropic {
		t.rates[id] = r
	}
	return t
}

// Rates returns the model's rates: its own entry, else that of its id without a date or -latest suffix. A model
// with no entry has no price (false), which is never zero.
func (t *Table) Rates(model string) (Rates, bool) {
	if t == nil {
		return Rates{}, false
	}
	if r, ok := t.rates[model]; ok {
		return r, true
	}
	if base, ok := undated(model); ok {
		r, ok := t.rates[base]
		return r, ok
	}
	return Rates{}, false
}

// undated is the model id without its -YYYYMMDD or -latest suffix, if it has one.
func undated(model string) (string, bool) {
	if base, ok := strings.CutSuffix(model, "-latest"); ok {
		return base, true
	}
	i := len(model) - 9
	if i < 0 || model[i] != '-' {
		return "", false
	}
	for _, c := range model[i+1:] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return model[:i], true
}

// Priced reports whether the model has a list price.
func (t *Table) Priced(model string) bool {
	_, ok := t.Rates(model)
	return ok
}

// parseRate parses a non-negative decimal number of US dollars per million tokens, up to six decimals, into
// picodollars per token.
func parseRate(s string) (Pico, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(frac) > 6 || strings.Contains(s, ".") && frac == "" {
		return 0, errRate(s)
	}
	var p Pico
	for _, c := range whole + frac + strings.Repeat("0", 6-len(frac)) {
		if c < '0' || c > '9' {
			return 0, errRate(s)
		}
		if p > (maxPico-9)/10 {
			return 0, errRate(s)
		}
		p = p*10 + Pico(c-'0')
	}
	if p > 1_000_000*1_000_000 { // $1,000,000 per million tokens: a typo, not a price
		return 0, errRate(s)
	}
	return p, nil
}
