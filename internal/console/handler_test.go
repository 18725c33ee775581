package console_test

import (
	"bytes"
	"compress/gzip"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/console"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	h, err := console.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(method, path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/console/", 200, "text/html; charset=utf-8"},
		{"GET", "/console/index.html", 200, "text/html; charset=utf-8"},
		{"GET", "/console/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/console/console.css", 200, "text/css; charset=utf-8"},
		{"HEAD", "/console/session.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/console", 301, ""},
		{"GET", "/console/nope.js", 404, ""},
		{"GET", "/console/../go.mod", 404, ""},
		{"POST", "/console/", 405, ""},
	} {
		resp := get(c.method, c.path)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		if c.ctype != "" && resp.Header.Get("Content-Type") != c.ctype {
			t.Errorf("%s %s: Content-Type %q, want %q", c.method, c.path, resp.Header.Get("Content-Type"), c.ctype)
		}
		// Every answer carries the policy, errors too.
		if got := resp.Header.Get("Content-Security-Policy"); got != console.CSP {
			t.Errorf("%s %s: CSP %q", c.method, c.path, got)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" ||
			resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s %s: security headers %v", c.method, c.path, resp.Header)
		}
	}
	if loc := get("GET", "/console").Header.Get("Location"); loc != "/console/" {
		t.Errorf("redirect to %q", loc)
	}
	etag := get("GET", "/console/app.js").Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	if s := get("GET", "/console/app.js", "If-None-Match", etag).StatusCode; s != http.StatusNotModified {
		t.Errorf("If-None-Match: %d, want 304", s)
	}
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "require-trusted-types-for 'script'"} {
		if !strings.Contains(console.CSP, d) {
			t.Errorf("CSP lacks %q", d)
		}
	}
}

// TestStaticRules: the files obey what the CSP and the escaping rule need: no inline script or style, no HTML
// parsing of strings, no resource from another origin. (The CSP would block the first and the browser test
// would see it; this says which line.)
func TestStaticRules(t *testing.T) {
	t.Parallel()
	bad := []struct {
		re   *regexp.Regexp
		why  string
		exts string
	}{
		{regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\(`), "parses strings as HTML or code", ".js"},
		{regexp.MustCompile(`setAttribute\(\s*['"]style`), "inline style", ".js"},
		{regexp.MustCompile(`\sstyle=|<script>|<style|\son[a-z]+=`), "inline script or style", ".html"},
		{regexp.MustCompile(`https?://`), "a resource from another origin", ".html .css"},
		{regexp.MustCompile(`localStorage`), "the key belongs in sessionStorage", ".js"},
	}
	n := 0
	err := fs.WalkDir(os.DirFS("static"), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join("static", p))
		if err != nil {
			return err
		}
		n++
		for i, line := range strings.Split(string(b), "\n") {
			for _, r := range bad {
				if strings.Contains(r.exts, filepath.Ext(p)) && r.re.MatchString(line) {
					t.Errorf("%s:%d: %s: %s", p, i+1, r.why, strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Fatalf("checked only %d files", n)
	}
}

// TestPageWeight logs the console's weight and keeps it under a budget: everything a first visit loads.
func TestPageWeight(t *testing.T) {
	t.Parallel()
	h, err := console.New()
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	zw := gzip.NewWriter(&all)
	err = fs.WalkDir(os.DirFS("static"), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join("static", p))
		if err == nil {
			_, err = zw.Write(b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	zw.Close()
	t.Logf("console: %d bytes, %d gzipped together", h.Size(), all.Len())
	// 160 KiB until issue 22: a multi-agent session's threads (their table, a thread's page, the thread events in
	// the transcript) brought it to 168 KiB. Issue 24's memory stores (a store's memories by directory, a
	// memory's view and edit, the versions and their redaction) and dreams (their list and page) brought it to
	// 185 KiB. Issue 28's management leftovers (an agent's multiagent and execution identity in its form,
	// Delete on four pages, Validate for MCP credentials) came to 5 KiB, of which the helpers fact, crumbs, mono
	// and meta (dom.js), replacing the markup repeated on every page, won back 2.2 KiB: 188 KiB. The
	// deployments (list, form, a deployment's page with its runs, a run's page) and webhooks (list and form, an
	// endpoint's page with its deliveries), sharing the lists, pagers, links and the secret shown once with the
	// other pages, came to 17.5 KiB: 206 KiB. The tunnels (list and form, a tunnel's page with its token and its
	// certificates) came to 5.3 KiB: 211 KiB. Issue 27's workspaces (list and form, a workspace's page with its
	// keys, the workspace the console acts in), sharing the webhooks' reader of Page lists, came to 4.8 KiB: 216 KiB.
	const budget = 216 << 10
	if h.Size() > budget {
		t.Errorf("the console weighs %d bytes, over its budget of %d", h.Size(), budget)
	}
}
