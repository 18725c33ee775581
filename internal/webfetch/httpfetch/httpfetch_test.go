package httpfetch_test

import (
	"compress/gzip"
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/webfetch"
	"github.com/corralhq/corral/internal/webfetch/httpfetch"
)

const article = `<!doctype html><html><head><title>Corral field notes</title><script>var tracking = 1;</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article><h1>Corral field notes</h1>
<p>Herding agents is an <strong>old</strong> craft. The brain runs <em>outside</em> the sandbox, and the hands run inside it,
so that a crash of one never loses the other. This paragraph is long enough for a reader to take it for the article's body,
as readability scores paragraphs by their length and their commas, and a page of only a title would not be kept.</p>
<h2>Tools</h2>
<ul><li>bash runs commands</li><li>web_fetch reads <a href="/docs/web">the web</a></li></ul>
<p>Another paragraph, with more words, more commas, and more sentences, so that the article is plainly the content here.
It says nothing new, but it says it at length, which is what a scorer of readable text looks for in a page.</p>
<pre>go test ./...</pre>
</article><footer>Copyright nobody</footer></body></html>`

// pdf is a minimal PDF document.
const pdf = "%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"

// pages is a real HTTPS server on 127.0.0.1 serving the test's pages.
func pages(t *testing.T, internal string) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/article", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(article))
	})
	mux.HandleFunc("/index", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
		_, _ = w.Write([]byte("<html><head><title>Index</title></head><body><h1>Index</h1><ul><li><a href=\"/a\">Caf\xe9</a></li>" +
			"<li>B</li></ul><table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table><script>x()</script></body></html>"))
	})
	mux.HandleFunc("/data.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"answer":42}`))
	})
	mux.HandleFunc("/doc.pdf", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		_, _ = w.Write([]byte(pdf))
	})
	mux.HandleFunc("/image.png", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte("\x89PNG\r\n\x1a\n"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(strings.Repeat("x", 4096)))
	})
	mux.HandleFunc("/bomb", func(w http.ResponseWriter, r *http.Request) {
		// A few kilobytes of gzip that inflate to 8 MiB of HTML, which Go's transport decompresses itself.
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			http.Error(w, "gzip only", http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write([]byte("<html><body>" + strings.Repeat("<p>a ", 8<<20/5)))
		_ = zw.Close()
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		// Until the client gives up, and then no answer at all: returning would send an empty 200, which a
		// client that a loaded machine stalled could read as a page instead of its timeout (seen in CI).
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Minute):
		}
		panic(http.ErrAbortHandler)
	})
	mux.HandleFunc("/to-article", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/article", http.StatusFound)
	})
	mux.HandleFunc("/to-internal", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+internal+"/secret", http.StatusFound)
	})
	mux.HandleFunc("/to-blocked", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://tracker.example.com/", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

type fixture struct {
	srv      *httptest.Server
	internal *httptest.Server // an internal server the operator did not allow
	f        *httpfetch.Fetcher
}

func newFixture(t *testing.T, cfg httpfetch.Config) *fixture {
	t.Helper()
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("metadata secrets"))
	}))
	t.Cleanup(internal.Close)
	srv := pages(t, internal.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	cfg.RootCAs = roots
	// The page server is on 127.0.0.1: reached only because the operator allows exactly it.
	cfg.AllowInternal = []string{srv.Listener.Addr().String()}
	return &fixture{srv: srv, internal: internal, f: httpfetch.New(cfg)}
}

func (fx *fixture) fetch(t *testing.T, req webfetch.Request) (*webfetch.Page, error) {
	t.Helper()
	if strings.HasPrefix(req.URL, "/") {
		req.URL = fx.srv.URL + req.URL
	}
	return fx.f.Fetch(context.Background(), &req)
}

func TestHTMLToMarkdown(t *testing.T) {
	fx := newFixture(t, httpfetch.Config{})
	for _, path := range []string{"/article", "/to-article"} {
		p, err := fx.fetch(t, webfetch.Request{URL: path})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		t.Logf("%s:\n%s", path, p.Text)
		if p.ContentType != "text/html" || p.Title != "Corral field notes" || p.URL != fx.srv.URL+"/article" {
			t.Errorf("%s: page = %+v", path, p)
		}
		for _, want := range []string{"# Corral field notes", "an **old** craft", "runs _outside_ the sandbox", "## Tools",
			"- bash runs commands", "[the web](" + fx.srv.URL + "/docs/web)", "```\ngo test ./...\n```"} {
			if !strings.Contains(p.Text, want) {
				t.Errorf("%s: markdown lacks %q:\n%s", path, want, p.Text)
			}
		}
		for _, not := range []string{"tracking", "<p>", "About", "Copyright"} {
			if strings.Contains(p.Text, not) {
				t.Errorf("%s: markdown has %q:\n%s", path, not, p.Text)
			}
		}
	}
}

// TestHTMLBomb: a gzip page that inflates to 8 MiB of HTML is converted only up to MaxHTMLBytes, and the text
// says it was cut; the conversion's memory stays bounded by that (parsing the whole page took 720 MB at its
// peak for 10 MiB).
func TestHTMLBomb(t *testing.T) {
	fx := newFixture(t, httpfetch.Config{MaxHTMLBytes: 64 << 10})
	p, err := fx.fetch(t, webfetch.Request{URL: "/bomb"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Text, "only its first 65536 were read") || strings.Count(p.Text, "a") > 64<<10 {
		t.Errorf("the bomb's text: %d bytes, ends %q", len(p.Text), p.Text[max(0, len(p.Text)-120):])
	}
}

// TestShortPageConvertedWhole: a page with no article (an index) is converted whole, in its declared charset.
func TestShortPageConvertedWhole(t *testing.T) {
	fx := newFixture(t, httpfetch.Config{})
	p, err := fx.fetch(t, webfetch.Request{URL: "/index"})
	if err != nil {
		t.Fatal(err)
	}
	want := "# Index\n\n- [Café](" + fx.srv.URL + "/a)\n- B\n\nk | v\n1 | 2"
	if p.Title != "Index" || p.Text != want {
		t.Errorf("page = %+v\nwant text %q", p, want)
	}
}

func TestTextPDFAndRefusedTypes(t *testing.T) {
	fx := newFixture(t, httpfetch.Config{})
	if p, err := fx.fetch(t, webfetch.Request{URL: "/data.json"}); err != nil || p.Text != `{"answer":42}` || p.ContentType != "application/json" {
		t.Errorf("json = %+v, %v", p, err)
	}
	if p, err := fx.fetch(t, webfetch.Request{URL: "/doc.pdf"}); err != nil || string(p.PDF) != pdf || p.Text != "" || p.ContentType != "application/pdf" {
		t.Errorf("pdf = %+v, %v", p, err)
	}
	if _, err := fx.fetch(t, webfetch.Request{URL: "/image.png"}); err == nil || !strings.Contains(err.Error(), "image/png, which web_fetch cannot read") {
		t.Errorf("png: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	fx := newFixture(t, httpfetch.Config{MaxBytes: 1000, Timeout: 500 * time.Millisecond})
	host := fx.srv.Listener.Addr().String()
	ihost := fx.internal.Listener.Addr().String()
	for _, c := range []struct {
		name string
		req  webfetch.Request
		want string
	}{
		{"redirect to an internal address", webfetch.Request{URL: "/to-internal"},
			"refused to fetch http://" + ihost + "/secret: destination not allowed: " + ihost + " resolves to an internal address (an operator who trusts it allows it with --egress-allow-internal " + ihost + ")"},
		{"internal address directly", webfetch.Request{URL: fx.internal.URL}, "--egress-allow-internal " + ihost},
		{"blocked domain", webfetch.Request{URL: "https://tracker.example.com/x", BlockedDomains: []string{"example.com"}},
			"the domain tracker.example.com is in this tool's blocked_domains (example.com)"},
		{"redirect to a blocked domain", webfetch.Request{URL: "/to-blocked", BlockedDomains: []string{"tracker.example.com"}},
			"is in this tool's blocked_domains"},
		{"not in allowed_domains", webfetch.Request{URL: "/article", AllowedDomains: []string{"docs.example.com"}},
			"the domain 127.0.0.1 is not in this tool's allowed_domains (docs.example.com)"},
		{"limited networking without the host", webfetch.Request{URL: "/article", Limited: true, AllowedHosts: []string{"api.example.com"}},
			host + " is not in the environment's allowed_hosts"},
		{"too large", webfetch.Request{URL: "/big"}, "is too large"},
		{"timeout", webfetch.Request{URL: "/slow"}, "timed out after 500ms"},
		{"scheme", webfetch.Request{URL: "file:///etc/passwd"}, "only http and https URLs can be fetched"},
		{"no host", webfetch.Request{URL: "https:///x"}, "it has no host"},
		{"redirect loop", webfetch.Request{URL: "/loop"}, "redirects more than 5 times"},
		{"404", webfetch.Request{URL: "/nothing"}, "answered HTTP 404"},
	} {
		p, err := fx.fetch(t, c.req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: page %+v, err %v; want %q", c.name, p, err, c.want)
		}
	}
	// Limited networking that lists the host, and allowed_domains that list it, fetch it.
	if _, err := fx.fetch(t, webfetch.Request{URL: "/data.json", Limited: true, AllowedHosts: []string{host}, AllowedDomains: []string{"127.0.0.1"}}); err != nil {
		t.Errorf("limited with the host: %v", err)
	}
}

func TestMatchDomain(t *testing.T) {
	for _, c := range []struct {
		host, domain string
		want         bool
	}{
		{"example.com", "example.com", true}, {"docs.Example.com.", "example.com", true}, {"badexample.com", "example.com", false},
		{"example.com", "docs.example.com", false}, {"a.b.example.com", "*.example.com", true},
	} {
		if got := apitype.MatchDomain(c.host, c.domain); got != c.want {
			t.Errorf("MatchDomain(%q, %q) = %v", c.host, c.domain, got)
		}
	}
}
