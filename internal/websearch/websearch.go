// Package websearch is the port to web search providers that serve the web_search tool of agent_toolset_20260401
// when the model's own provider does not run it: one Search call that takes a query with the tool's domain rules
// and user location and returns results (title, URL, snippet). Adapters: SearXNG (its JSON API). Every
// connection an adapter makes obeys Corral's egress rules (egress.Policy.DialContext): a provider on an internal
// address needs the operator's --egress-allow-internal.
package websearch

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
)

// Limits of one search.
const (
	// MaxResults is how many results a search returns at most.
	MaxResults = 10
	// MaxSnippet bounds one result's snippet, in bytes.
	MaxSnippet = 1000
	// MaxQuery bounds a query, in bytes.
	MaxQuery = 1000
)

// Query is one search.
type Query struct {
	Query string
	// AllowedDomains, when set, keep only results on these domains or their subdomains; BlockedDomains drop
	// results on them (the tool config holds one or the other).
	AllowedDomains []string
	BlockedDomains []string
	// Country is the user's ISO 3166-1 alpha-2 country (user_location.country), "" if unknown.
	Country string
	// Language is a BCP 47 language tag derived from Country where the provider wants one, "" if none.
	Language string
}

// Result is one search result.
type Result struct {
	Title   string
	URL     string
	Snippet string
}

// Searcher searches the web.
type Searcher interface {
	// Name names the provider in logs and messages ("searxng").
	Name() string
	// Search runs q and returns at most MaxResults results, already filtered by q's domain rules.
	Search(ctx context.Context, q Query) ([]Result, error)
}

// ErrEmptyQuery is a query with no text.
var ErrEmptyQuery = errors.New("the query is empty")

// Check validates q's text.
func (q Query) Check() error {
	if strings.TrimSpace(q.Query) == "" {
		return ErrEmptyQuery
	}
	if len(q.Query) > MaxQuery {
		return fmt.Errorf("the query is longer than %d bytes", MaxQuery)
	}
	return nil
}

// Keep reports whether a result's URL passes q's domain rules: an http(s) URL under an allowed domain (when there
// are any) and under no blocked one.
func (q Query) Keep(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return false
	}
	for _, d := range q.BlockedDomains {
		if apitype.MatchURL(u, d) {
			return false
		}
	}
	if len(q.AllowedDomains) == 0 {
		return true
	}
	for _, d := range q.AllowedDomains {
		if apitype.MatchURL(u, d) {
			return true
		}
	}
	return false
}

// Filter keeps the results that pass q's domain rules, at most MaxResults, with their snippets bounded and
// duplicated URLs dropped.
func Filter(q Query, rs []Result) []Result {
	var out []Result
	seen := map[string]bool{}
	for _, r := range rs {
		if len(out) == MaxResults {
			break
		}
		if seen[r.URL] || !q.Keep(r.URL) {
			continue
		}
		seen[r.URL] = true
		r.Title = clip(strings.TrimSpace(r.Title), 300)
		r.Snippet = clip(strings.TrimSpace(r.Snippet), MaxSnippet)
		out = append(out, r)
	}
	return out
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Format is the text of a tool result: the query (if not ""), then each result's title, URL and snippet, numbered.
func Format(query string, rs []Result) string {
	var b strings.Builder
	switch {
	case len(rs) == 0 && query == "":
		return "No results."
	case len(rs) == 0:
		return fmt.Sprintf("No results for %q.", query)
	case query == "":
		b.WriteString("Web search results:\n")
	default:
		fmt.Fprintf(&b, "Web search results for %q:\n", query)
	}
	for i, r := range rs {
		fmt.Fprintf(&b, "\n%d. %s\n   URL: %s\n", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", strings.ReplaceAll(r.Snippet, "\n", " "))
		}
	}
	return b.String()
}

// Languages maps a country to the language SearXNG's "language" parameter is given for it (the country's main
// language, with the region: "de-DE"); a country not listed gets no language parameter (SearXNG's default).
var languages = map[string]string{
	"US": "en-US", "GB": "en-GB", "CA": "en-CA", "AU": "en-AU", "NZ": "en-NZ", "IE": "en-IE", "IN": "en-IN",
	"DE": "de-DE", "AT": "de-AT", "CH": "de-CH", "FR": "fr-FR", "BE": "fr-BE", "ES": "es-ES", "MX": "es-MX",
	"AR": "es-AR", "IT": "it-IT", "PT": "pt-PT", "BR": "pt-BR", "NL": "nl-NL", "SE": "sv-SE", "NO": "nb-NO",
	"DK": "da-DK", "FI": "fi-FI", "PL": "pl-PL", "CZ": "cs-CZ", "JP": "ja-JP", "KR": "ko-KR", "CN": "zh-CN",
	"TW": "zh-TW", "RU": "ru-RU", "UA": "uk-UA", "TR": "tr-TR", "GR": "el-GR", "IL": "he-IL",
}

// LanguageFor is the language tag of a country ("" if not known).
func LanguageFor(country string) string { return languages[strings.ToUpper(country)] }
