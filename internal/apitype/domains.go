package apitype

import (
	"net/url"
	"strings"
)

// The rule of web_fetch's and web_search's allowed_domains and blocked_domains (ToolConfig): one reading of a
// configured domain for both tools.

// MatchDomain reports whether host is domain or one of its subdomains ("docs.example.com" matches
// "example.com"; "badexample.com" does not). A domain written with a scheme or a leading "*." or "." is read as
// its host; a path after it is ignored here (MatchURL applies it).
func MatchDomain(host, domain string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	d, _ := splitDomain(domain)
	if d == "" || host == "" {
		return false
	}
	return host == d || strings.HasSuffix(host, "."+d)
}

// MatchURL reports whether u is under domain: its host matches (MatchDomain) and, when the domain has a path
// ("example.com/blog"), its path is that path or below it.
func MatchURL(u *url.URL, domain string) bool {
	if !MatchDomain(u.Hostname(), domain) {
		return false
	}
	_, prefix := splitDomain(domain)
	if prefix == "" {
		return true
	}
	p := u.EscapedPath()
	return p == prefix || strings.HasPrefix(p, strings.TrimSuffix(prefix, "/")+"/")
}

// DomainHost reduces a configured domain to its lower-case host name (a path it names dropped).
func DomainHost(d string) string {
	h, _ := splitDomain(d)
	return h
}

// splitDomain splits a configured domain into its lower-case host and its path ("" or starting with "/").
func splitDomain(d string) (host, path string) {
	d = strings.TrimSpace(d)
	if i := strings.Index(d, "://"); i >= 0 {
		d = d[i+3:]
	}
	if i := strings.IndexAny(d, "?#"); i >= 0 {
		d = d[:i]
	}
	host, path = d, ""
	if i := strings.Index(d, "/"); i >= 0 {
		host, path = d[:i], d[i:]
	}
	if path == "/" {
		path = ""
	}
	host = strings.ToLower(host)
	host = strings.TrimPrefix(host, "*.")
	host = strings.TrimPrefix(host, ".")
	return strings.TrimSuffix(host, "."), path
}
