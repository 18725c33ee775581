// Package webfetch is the port of the web_fetch tool: what the brain asks (a URL under a session's rules) and
// what it gets back (a page as text, or a PDF). The brain runs web_fetch outside every sandbox, in its own
// process; an adapter (httpfetch) fetches under the egress rules of the sandboxes' proxy.
package webfetch

import (
	"context"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// Request is one web_fetch call.
type Request struct {
	// URL is the model's input: an absolute http or https URL.
	URL string
	// Limited, when set, restricts the hosts to AllowedHosts (the environment's limited networking, same syntax
	// as its allowed_hosts); unset, every public host may be reached. Internal addresses are never reached but
	// for the operator's own allow list, whatever these say.
	Limited      bool
	AllowedHosts []string
	// AllowedDomains xor BlockedDomains are the tool's own configuration: a domain matches itself and its
	// subdomains. Every hop of a redirect is checked against them.
	AllowedDomains []string
	BlockedDomains []string
}

// Page is what a fetch returned.
type Page struct {
	// URL is the page's URL after redirects.
	URL string
	// ContentType is the response's media type (without parameters).
	ContentType string
	// Title is the page's title, if it has one (HTML).
	Title string
	// Text is the page as text: HTML turned into Markdown, plain text and JSON as they came.
	Text string
	// PDF is a PDF document's bytes (ContentType application/pdf); Text is then empty.
	PDF []byte
}

// Fetcher fetches web pages for the web_fetch tool. An error's text is for the model: it says why the page was
// not fetched (a refused destination, a size or time limit, a type that cannot be read).
type Fetcher interface {
	Fetch(ctx context.Context, req *Request) (*Page, error)
}

// DomainAllowed reports whether host may be fetched under the tool's allowed_domains xor blocked_domains, and if
// not, why. A domain matches itself and its subdomains, case and a final dot aside.
func DomainAllowed(host string, allowed, blocked []string) (bool, string) {
	if len(allowed) > 0 {
		for _, d := range allowed {
			if apitype.MatchDomain(host, d) {
				return true, ""
			}
		}
		return false, "the domain " + host + " is not in this tool's allowed_domains (" + strings.Join(allowed, ", ") + ")"
	}
	for _, d := range blocked {
		if apitype.MatchDomain(host, d) {
			return false, "the domain " + host + " is in this tool's blocked_domains (" + d + ")"
		}
	}
	return true, ""
}
