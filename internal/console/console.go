// Package console serves the web console: hand-written HTML, CSS and JavaScript modules embedded in the binary
// (no build step), which `corral serve` mounts at /console beside the API. The console is a client of the
// public HTTP API only: it holds the user's API key in the tab's sessionStorage and calls the same endpoints
// the SDKs call, so this package serves files and knows nothing of the server's internals.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
)

// Prefix is the path the console is served under.
const Prefix = "/console"

//go:embed static
var files embed.FS

// CSP is the Content-Security-Policy of every response: scripts, styles and connections from this origin only,
// no inline script or style, no frames, no forms posted anywhere, no plugins. The console builds its pages
// with DOM calls (textContent, never innerHTML), so hostile content in a transcript cannot run.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'"

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the console under Prefix: Prefix redirects to Prefix+"/", which answers index.html (the pages are routed in
// the browser, after the '#'), Prefix+"/<file>" the embedded file. Anything else under Prefix is a 404.
type Handler struct {
	assets map[string]asset
}

// New reads the embedded files once, with a content hash each for its ETag.
func New() (*Handler, error) {
	h := &Handler{assets: map[string]asset{}}
	err := fs.WalkDir(files, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // the host's mime table may lack these or name them differently
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		h.assets[strings.TrimPrefix(p, "static/")] = asset{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Size is the total size in bytes of the console's files: its page weight, uncompressed.
func (h *Handler) Size() int {
	n := 0
	for _, a := range h.assets {
		n += len(a.body)
	}
	return n
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if name == "" {
		// Relative URLs in the page resolve under the directory: /console/app.js, not /app.js.
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
		return
	}
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		name = "index.html"
	}
	a, ok := h.assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd.Set("Content-Type", a.ctype)
	hd.Set("ETag", a.etag)
	// Revalidate every time: a new binary serves new files under the same names.
	hd.Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && match == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Length", strconv.Itoa(len(a.body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(a.body)
}
