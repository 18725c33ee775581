// Package httpfetch is the web_fetch adapter: it fetches a page over HTTP(S) from the brain's process under the
// egress rules of the sandboxes' proxy (egress.Policy.DialContext: the environment's limited networking, and no
// internal address but the operator's --egress-allow-internal pairs, checked on the addresses dialed, so a DNS
// answer cannot rebind a name to an internal address), follows redirects itself re-checking every hop, bounds
// the time and the bytes read, and turns what it got into text: HTML into Markdown (the readable part of the
// page, found by go-readability), plain text and JSON as they are, PDFs as bytes for a document block.
package httpfetch

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/webfetch"
)

// Defaults of Config.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultMaxBytes     = 10 << 20
	DefaultMaxRedirects = 5
	// DefaultMaxHTMLBytes bounds the HTML a fetch converts: parsing costs tens of times the page's size in memory
	// (a 2 MiB page about 160 MB at its peak, a 10 MiB one 720 MB), and a gzip response of a few kilobytes can
	// inflate to the whole of MaxBytes.
	DefaultMaxHTMLBytes = 2 << 20
	// DefaultMaxConversions is how many pages the server converts at once, across every session.
	DefaultMaxConversions = 2
	defaultUserAgent      = "Corral-WebFetch/1 (+https://github.com/corralhq/corral)"
)

// Config configures a Fetcher.
type Config struct {
	// AllowInternal are the operator's --egress-allow-internal host:port pairs: the only internal addresses a
	// fetch may reach (where the session's networking allows their host).
	AllowInternal []string
	// RootCAs verify the servers' certificates (nil: the system's); the operator's --egress-ca-file adds to them.
	RootCAs *x509.CertPool
	// Timeout bounds one fetch, redirects and body included (default DefaultTimeout).
	Timeout time.Duration
	// MaxBytes bounds a response body (default DefaultMaxBytes).
	MaxBytes int64
	// MaxRedirects bounds the redirects followed (default DefaultMaxRedirects).
	MaxRedirects int
	// MaxHTMLBytes bounds the HTML converted to Markdown: a longer page is cut there first, and the text says so
	// (default DefaultMaxHTMLBytes).
	MaxHTMLBytes int
	// MaxConversions bounds the HTML conversions running at once in the process (default
	// DefaultMaxConversions): with MaxHTMLBytes, it bounds their memory whatever the pages and the sessions.
	MaxConversions int
	// UserAgent is sent with every request.
	UserAgent string
}

// Fetcher implements webfetch.Fetcher.
type Fetcher struct {
	cfg Config
	// conv holds a slot per conversion running (Config.MaxConversions).
	conv chan struct{}
}

var _ webfetch.Fetcher = (*Fetcher)(nil)

// New returns a Fetcher.
func New(cfg Config) *Fetcher {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxRedirects <= 0 {
		cfg.MaxRedirects = DefaultMaxRedirects
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = defaultUserAgent
	}
	if cfg.MaxHTMLBytes <= 0 {
		cfg.MaxHTMLBytes = DefaultMaxHTMLBytes
	}
	if cfg.MaxConversions <= 0 {
		cfg.MaxConversions = DefaultMaxConversions
	}
	cfg.AllowInternal = slices.Clone(cfg.AllowInternal)
	return &Fetcher{cfg: cfg, conv: make(chan struct{}, cfg.MaxConversions)}
}

// Fetch fetches req.URL. Its errors are for the model.
func (f *Fetcher) Fetch(ctx context.Context, req *webfetch.Request) (*webfetch.Page, error) {
	policy := egress.Policy{AllowAll: !req.Limited, AllowInternal: f.cfg.AllowInternal}
	if req.Limited {
		policy.Hosts = slices.Clone(req.AllowedHosts)
	}
	tr := policy.Transport(f.cfg.RootCAs, f.cfg.Timeout)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()

	u, err := checkURL(req.URL)
	for hop := 0; err == nil; hop++ {
		if ok, why := webfetch.DomainAllowed(u.Hostname(), req.AllowedDomains, req.BlockedDomains); !ok {
			return nil, fmt.Errorf("refused to fetch %s: %s", u.Redacted(), why)
		}
		var page *webfetch.Page
		var next *url.URL
		page, next, err = f.get(ctx, client, u)
		switch {
		case err != nil:
		case next == nil:
			return page, nil
		case hop >= f.cfg.MaxRedirects:
			err = fmt.Errorf("%s redirects more than %d times", req.URL, f.cfg.MaxRedirects)
		default:
			u, err = checkURL(next.String())
			if err != nil {
				err = fmt.Errorf("redirected to %s: %w", next.Redacted(), err)
			}
		}
	}
	if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("fetching %s timed out after %s", req.URL, f.cfg.Timeout)
	}
	return nil, err
}

// checkURL parses an absolute http(s) URL.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("invalid URL %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid URL %q: only http and https URLs can be fetched", raw)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("invalid URL %q: it has no host", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("invalid URL %s: URLs with credentials are not fetched", u.Redacted())
	}
	u.Fragment = ""
	return u, nil
}

// get makes one request. A redirect returns its target (resolved against u) and no page.
func (f *Fetcher) get(ctx context.Context, client *http.Client, u *url.URL) (*webfetch.Page, *url.URL, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid URL %s: %v", u.Redacted(), err)
	}
	hreq.Header.Set("User-Agent", f.cfg.UserAgent)
	hreq.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,application/pdf;q=0.9,*/*;q=0.5")
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, nil, describe(u, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		loc := resp.Header.Get("Location")
		if loc == "" {
			return nil, nil, fmt.Errorf("%s answered %s without a Location", u.Redacted(), resp.Status)
		}
		next, err := u.Parse(loc)
		if err != nil {
			return nil, nil, fmt.Errorf("%s redirects to an invalid URL %q", u.Redacted(), loc)
		}
		return nil, next, nil
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, nil, fmt.Errorf("%s answered HTTP %s", u.Redacted(), resp.Status)
	}
	if resp.ContentLength > f.cfg.MaxBytes {
		return nil, nil, fmt.Errorf("%s is too large: %d bytes (at most %d are fetched)", u.Redacted(), resp.ContentLength, f.cfg.MaxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err != nil {
		return nil, nil, describe(u, err)
	}
	if int64(len(body)) > f.cfg.MaxBytes {
		return nil, nil, fmt.Errorf("%s is too large: over %d bytes (at most %d are fetched)", u.Redacted(), f.cfg.MaxBytes, f.cfg.MaxBytes)
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = http.DetectContentType(body)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, nil, fmt.Errorf("%s has an invalid Content-Type %q", u.Redacted(), ct)
	}
	page := &webfetch.Page{URL: u.String(), ContentType: mt}
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		page.Title, page.Text, err = f.convert(ctx, body, params["charset"], u)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: reading the HTML: %v", u.Redacted(), err)
		}
	case mt == "application/pdf":
		page.PDF = body
	case textual(mt):
		page.Text, err = decodeText(body, params["charset"])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", u.Redacted(), err)
		}
	default:
		return nil, nil, fmt.Errorf("%s is of type %s, which web_fetch cannot read (it reads HTML, plain text, JSON, XML and PDF)", u.Redacted(), mt)
	}
	return page, nil, nil
}

// convert turns a page's HTML into Markdown within the Fetcher's bounds: at most MaxHTMLBytes of it (the text
// says where it was cut), in one of MaxConversions slots, waited for no longer than ctx allows.
func (f *Fetcher) convert(ctx context.Context, body []byte, charset string, u *url.URL) (title, text string, err error) {
	select {
	case f.conv <- struct{}{}:
		defer func() { <-f.conv }()
	case <-ctx.Done():
		return "", "", fmt.Errorf("waiting for a conversion slot: %w", ctx.Err())
	}
	cut := len(body) > f.cfg.MaxHTMLBytes
	n := len(body)
	if cut {
		body = body[:f.cfg.MaxHTMLBytes]
	}
	title, text, err = htmlToMarkdown(body, charset, u)
	if err == nil && cut {
		text += fmt.Sprintf("\n\n[web_fetch: the page's HTML is %d bytes; only its first %d were read]", n, f.cfg.MaxHTMLBytes)
	}
	return title, text, err
}

// textual reports whether a media type is passed to the model as text as it came.
func textual(mt string) bool {
	switch {
	case strings.HasPrefix(mt, "text/"):
		return true
	case mt == "application/json", strings.HasSuffix(mt, "+json"), mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript", mt == "application/x-ndjson", mt == "application/yaml":
		return true
	}
	return false
}

// describe turns a transport error into the model's reason: a destination the egress rules refuse says which
// rule (the environment's allowed_hosts, or an internal address and --egress-allow-internal).
func describe(u *url.URL, err error) error {
	switch {
	case errors.Is(err, egress.ErrDenied):
		return fmt.Errorf("refused to fetch %s: %v", u.Redacted(), unwrapURL(err))
	case errors.Is(err, context.DeadlineExceeded):
		return err
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return fmt.Errorf("could not resolve %s: %v", u.Hostname(), dnsErr)
	}
	return fmt.Errorf("fetching %s failed: %v", u.Redacted(), unwrapURL(err))
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
