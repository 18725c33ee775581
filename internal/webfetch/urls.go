package webfetch

import (
	"net/url"
	"regexp"
	"strings"
)

var urlPattern = regexp.MustCompile(`(?i)https?://[^\s<>"'\x60{}|\\^\[\]]+`)

// URLsIn returns the http(s) URLs written in text, normalised (NormURL), trailing punctuation and an unbalanced
// closing parenthesis (Markdown's "[label](url)") left out.
func URLsIn(text string) []string {
	var out []string
	for _, m := range urlPattern.FindAllString(text, -1) {
		m = strings.TrimRight(m, ".,;:!?*_")
		for strings.HasSuffix(m, ")") && strings.Count(m, ")") > strings.Count(m, "(") {
			m = strings.TrimRight(strings.TrimSuffix(m, ")"), ".,;:!?*_")
		}
		if n := NormURL(m); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// NormURL is the form in which two spellings of a URL compare equal: scheme and host lower case, the default
// port, the fragment and an empty path's "/" left out. It is "" for what is not an absolute http(s) URL.
func NormURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	u.Host, u.Fragment, u.RawFragment = strings.ToLower(u.Host), "", ""
	if p := u.Port(); (u.Scheme == "https" && p == "443") || (u.Scheme == "http" && p == "80") {
		u.Host = strings.TrimSuffix(u.Host, ":"+p)
	}
	if u.Path == "/" && u.RawQuery == "" {
		u.Path = ""
	}
	return u.String()
}
