package searxng_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/websearch"
	"github.com/corralhq/corral/internal/websearch/searxng"
)

// searxng is a local HTTPS server speaking SearXNG's documented JSON format (GET /search?q=...&format=json).
type instance struct {
	srv     *httptest.Server
	mu      sync.Mutex
	queries []url.Values
}

func newSearXNG(t *testing.T, results []map[string]string) *instance {
	s := &instance{}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.queries = append(s.queries, r.URL.Query())
		s.mu.Unlock()
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "number_of_results": len(results), "results": results})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *instance) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.srv.Certificate())
	return p
}

func (s *instance) sent() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.queries...)
}

func (s *instance) hostPort() string { u, _ := url.Parse(s.srv.URL); return u.Host }

func TestSearXNG(t *testing.T) {
	t.Parallel()
	s := newSearXNG(t, []map[string]string{
		{"url": "https://docs.example.com/a", "title": "Docs A", "content": "About A."},
		{"url": "https://www.spam.test/b", "title": "Spam B", "content": "Buy."},
		{"url": "https://notspam.test/c", "title": "Not spam C", "content": "Fine."},
		{"url": "https://docs.example.com/a", "title": "Docs A again", "content": "Duplicate."},
		{"url": "javascript:alert(1)", "title": "Bad scheme", "content": "x"},
	})
	ctx := context.Background()
	q := websearch.Query{Query: "corral agents", BlockedDomains: []string{"spam.test"}, Country: "DE"}

	// Without the operator's trust, the loopback instance is refused by the egress rules.
	closed, err := searxng.New(searxng.Config{BaseURL: s.srv.URL, RootCAs: s.roots()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Search(ctx, q); err == nil || !strings.Contains(err.Error(), "could not be reached") {
		t.Fatalf("untrusted loopback provider: err %v", err)
	}
	if len(s.sent()) != 0 {
		t.Fatalf("the provider was reached: %v", s.sent())
	}

	sx, err := searxng.New(searxng.Config{BaseURL: s.srv.URL, AllowInternal: []string{s.hostPort()}, RootCAs: s.roots()})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := sx.Search(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, r := range rs {
		urls = append(urls, r.URL)
	}
	if strings.Join(urls, " ") != "https://docs.example.com/a https://notspam.test/c" {
		t.Fatalf("results %v", urls)
	}
	got := s.sent()[0]
	if got.Get("q") != "corral agents -site:spam.test" || got.Get("format") != "json" || got.Get("language") != "de-DE" {
		t.Fatalf("query sent %v", got)
	}

	// allowed_domains: only the domain and its subdomains, asked for with site: terms.
	rs, err = sx.Search(ctx, websearch.Query{Query: "x", AllowedDomains: []string{"example.com"}})
	if err != nil || len(rs) != 1 || rs[0].URL != "https://docs.example.com/a" {
		t.Fatalf("allowed: %v %v", rs, err)
	}
	if q := s.sent()[1].Get("q"); q != "x site:example.com" {
		t.Fatalf("allowed query %q", q)
	}
	text := websearch.Format("x", rs)
	if !strings.Contains(text, "1. Docs A\n   URL: https://docs.example.com/a\n   About A.") {
		t.Fatalf("formatted %q", text)
	}
}

func TestMatchDomain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host, domain string
		want         bool
	}{
		{"example.com", "example.com", true},
		{"docs.example.com", "example.com", true},
		{"badexample.com", "example.com", false},
		{"example.com", "docs.example.com", false},
		{"Docs.Example.COM", "*.example.com", true},
		{"example.com", "https://example.com/path", true},
	} {
		if got := apitype.MatchDomain(c.host, c.domain); got != c.want {
			t.Errorf("MatchDomain(%q, %q) = %v", c.host, c.domain, got)
		}
	}
}

func TestSearXNGErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "forbidden", http.StatusForbidden) // an instance without json in search.formats
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	sx, _ := searxng.New(searxng.Config{BaseURL: srv.URL, AllowInternal: []string{u.Host}})
	if _, err := sx.Search(context.Background(), websearch.Query{Query: "q"}); err == nil || !strings.Contains(err.Error(), "search.formats") {
		t.Fatalf("403: %v", err)
	}
	if _, err := sx.Search(context.Background(), websearch.Query{Query: "  "}); err == nil {
		t.Fatal("an empty query was sent")
	}
}

func TestKeepPaths(t *testing.T) {
	t.Parallel()
	q := websearch.Query{AllowedDomains: []string{"example.com/blog"}}
	for u, want := range map[string]bool{
		"https://example.com/blog":         true,
		"https://www.example.com/blog/a":   true,
		"https://example.com/blogger":      false,
		"https://example.com/docs":         false,
		"ftp://example.com/blog":           false,
		"https://other.test/example.com/x": false,
	} {
		if got := q.Keep(u); got != want {
			t.Errorf("allowed example.com/blog: Keep(%q) = %v", u, got)
		}
	}
	q = websearch.Query{BlockedDomains: []string{"example.com/private"}}
	if q.Keep("https://example.com/private/x") || !q.Keep("https://example.com/public") {
		t.Error("blocked example.com/private")
	}
}
