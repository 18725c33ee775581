// Package searxng is the websearch port's adapter to a SearXNG instance's JSON API, reached under the egress
// rules of the sandboxes' proxy.
package searxng

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/websearch"
)

// Defaults of Config.
const (
	DefaultTimeout   = 30 * time.Second
	maxResponseBytes = 4 << 20
	userAgent        = "Corral-WebSearch/1"
	// siteTerms bound how many domains of a tool config become site: terms of the query sent.
	maxAllowedSites = 4
	maxBlockedSites = 8
)

// Config configures a SearXNG adapter.
type Config struct {
	// BaseURL is the instance's URL ("https://search.example.com" or with a path prefix); searches are
	// GET {BaseURL}/search?q=...&format=json, which the instance must allow (search.formats: [html, json] in its
	// settings.yml).
	BaseURL string
	// AllowInternal are the operator's --egress-allow-internal host:port pairs: the only internal, loopback,
	// private or host addresses the instance may resolve to.
	AllowInternal []string
	// RootCAs verify the instance's certificate; nil means the system roots.
	RootCAs *x509.CertPool
	// Timeout bounds one search, from the connection to the last byte read; default 30s.
	Timeout time.Duration
}

// Client searches through a SearXNG instance's JSON API.
type Client struct {
	base    *url.URL
	client  *http.Client
	timeout time.Duration
}

// New returns a SearXNG adapter whose every connection is checked by the egress rules with
// cfg.AllowInternal.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(cfg.BaseURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("searxng: URL %q is not an http(s) URL", cfg.BaseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	s := &Client{base: u, timeout: cfg.Timeout}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	policy := egress.Policy{AllowAll: true, AllowInternal: slices.Clone(cfg.AllowInternal)}
	tr := policy.Transport(cfg.RootCAs, s.timeout)
	tr.IdleConnTimeout, tr.MaxIdleConns = 90*time.Second, 16
	s.client = &http.Client{Transport: tr}
	return s, nil
}

// Name is "searxng".
func (s *Client) Name() string { return "searxng" }

// URL is the search URL of q: the query with the domain rules as site: terms (a handful: the results are
// filtered anyway), and the language of the user's country when known.
func (s *Client) URL(q websearch.Query) string {
	text := strings.TrimSpace(q.Query)
	if n := len(q.AllowedDomains); n > 0 && n <= maxAllowedSites {
		sites := make([]string, n)
		for i, d := range q.AllowedDomains {
			sites[i] = "site:" + apitype.DomainHost(d)
		}
		text += " " + strings.Join(sites, " OR ")
	}
	for i, d := range q.BlockedDomains {
		if i == maxBlockedSites {
			break
		}
		text += " -site:" + apitype.DomainHost(d)
	}
	v := url.Values{"q": {text}, "format": {"json"}, "pageno": {"1"}}
	lang := q.Language
	if lang == "" {
		lang = websearch.LanguageFor(q.Country)
	}
	if lang != "" {
		v.Set("language", lang)
	}
	u := *s.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/search"
	u.RawQuery = v.Encode()
	return u.String()
}

// Search runs q on the instance.
func (s *Client) Search(ctx context.Context, q websearch.Query) ([]websearch.Result, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL(q), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("the search provider did not answer within %v", s.timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL holds the query: the message need not repeat it
		}
		return nil, fmt.Errorf("the search provider could not be reached: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the search provider's answer: %v", err)
	}
	switch {
	case resp.StatusCode == http.StatusForbidden:
		return nil, errors.New("the search provider refused the JSON format (HTTP 403): the SearXNG instance must list json in search.formats")
	case resp.StatusCode == http.StatusTooManyRequests:
		return nil, errors.New("the search provider is rate limiting searches (HTTP 429)")
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("the search provider answered HTTP %d", resp.StatusCode)
	case len(body) > maxResponseBytes:
		return nil, fmt.Errorf("the search provider's answer is larger than %d bytes", maxResponseBytes)
	}
	var out struct {
		Results []struct {
			URL     string `json:"url"`
			Title   string `json:"title"`
			Content string `json:"content"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("the search provider's answer is not SearXNG JSON: %v", err)
	}
	rs := make([]websearch.Result, 0, len(out.Results))
	for _, r := range out.Results {
		rs = append(rs, websearch.Result{Title: r.Title, URL: r.URL, Snippet: r.Content})
	}
	return websearch.Filter(q, rs), nil
}
