// This file is the scrubbing of the secrets an upstream echoes (Injector.ScrubResponse).

package proxy

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// ScrubResponse replaces, in an answer from host, the secrets that may be sent there (and the encodings of
// them Rewrite made) with their placeholders: in the header values and, streaming, in the body (the body then
// has no Content-Length). A host that echoes a request back thus does not show the sandbox the secret it was
// sent. The common encodings of a secret an upstream may choose are replaced too, each by the same encoding
// of the placeholder (scrubForms): base64 (standard and URL-safe, padded or not, and the secret's part of a
// longer base64 string at each of its 3 alignments, where the rest of that string may no longer decode), hex
// in either case and percent-encoding. Any other transformation (reversed, JSON-escaped, split, encrypted,
// encoded twice) is not recognised and reaches the sandbox.
func (in *Injector) ScrubResponse(req *http.Request, resp *http.Response) {
	creds, revoked := in.forHost(req.URL.Hostname(), "")
	creds = append(creds, revoked...) // an upstream may still echo a secret it was sent before it was revoked
	var old, nw [][]byte
	for _, c := range creds {
		if len(c.value) >= minScrubLen {
			o, n := scrubForms(c.value, c.placeholder)
			old, nw = append(old, o...), append(nw, n...)
		}
	}
	in.mu.Lock()
	for _, d := range in.derived {
		if slices.ContainsFunc(creds, func(c *secret) bool { return c.id == d.credID }) {
			old, nw = append(old, d.value), append(nw, d.ph)
		}
	}
	in.mu.Unlock()
	if len(old) == 0 {
		return
	}
	keep := 0
	for _, o := range old {
		keep = max(keep, len(o)-1)
	}
	for _, vs := range resp.Header {
		for i, v := range vs {
			b, _ := io.ReadAll(&replaceReader{src: strings.NewReader(v), old: old, new: nw, keep: keep})
			vs[i] = string(b)
		}
	}
	if resp.Body == nil || resp.Body == http.NoBody || req.Method == http.MethodHead {
		return
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{&replaceReader{src: resp.Body, old: old, new: nw, keep: keep}, resp.Body}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
}

// scrubForms returns the forms of value an upstream may echo (value itself first), each with the same form
// of ph: value, its base64 (standard and URL-safe, padded or not), the part of a longer base64 string that
// only value's bits determine at each of the 3 alignments, its hex (lower and upper case) and its
// percent-encodings (query and path escaping, hex digits in either case). Forms equal to an earlier one are
// left out.
func scrubForms(value, ph []byte) (old, nw [][]byte) {
	add := func(f func([]byte) string) {
		o := f(value)
		if !slices.ContainsFunc(old, func(b []byte) bool { return string(b) == o }) {
			old, nw = append(old, []byte(o)), append(nw, []byte(f(ph)))
		}
	}
	add(func(b []byte) string { return string(b) })
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		add(enc.EncodeToString)
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := range 3 {
			add(func(b []byte) string { return base64Core(enc, b, k) })
		}
	}
	add(hex.EncodeToString)
	add(func(b []byte) string { return strings.ToUpper(hex.EncodeToString(b)) })
	for _, esc := range []func(string) string{url.QueryEscape, url.PathEscape} {
		add(func(b []byte) string { return esc(string(b)) })
		add(func(b []byte) string { return lowerEscapes(esc(string(b))) })
	}
	return old, nw
}

// base64Core returns the characters of the base64 (enc, unpadded) of a string in which b follows k bytes (k
// in 0..2, b's alignment in the 3-byte groups) that depend on b's bits alone: neither on the bytes before nor
// on those after.
func base64Core(enc *base64.Encoding, b []byte, k int) string {
	s := enc.EncodeToString(append(make([]byte, k), b...))
	from, to := (8*k+5)/6, (8*k+8*len(b))/6
	return s[from:to]
}

// lowerEscapes writes the hex digits of the percent escapes of s in lower case.
func lowerEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = toLower(b[i+1]), toLower(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func toLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// replaceReader replaces every old[i] in src with new[i], streaming: it holds back the last keep bytes read
// (keep = the longest old minus one) until more arrive, so that a match split across reads is still found.
// Where several olds match at one place, the longest is replaced. Its memory is bounded by keep and its read
// buffer, whatever src holds.
type replaceReader struct {
	src      io.Reader
	old, new [][]byte
	keep     int
	in, out  []byte
	err      error
	next     []int // flush's next match of each old in in: -1 none, -2 not searched yet
}

func (r *replaceReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			if len(r.in) > 0 {
				r.flush(len(r.in))
				continue
			}
			return 0, r.err
		}
		var buf [32 << 10]byte
		n, err := r.src.Read(buf[:])
		r.in = append(r.in, buf[:n]...)
		r.err = err
		if safe := len(r.in) - r.keep; safe > 0 {
			r.flush(safe)
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// flush moves r.in[:upTo] (and the whole of a match that starts before upTo) to r.out, replaced. Each old is
// searched again only once its last match found is passed, so that many matches cost one pass per old.
func (r *replaceReader) flush(upTo int) {
	r.next = r.next[:0]
	for range r.old {
		r.next = append(r.next, -2)
	}
	i := 0
	for i < upTo {
		at, which := -1, -1
		for k, o := range r.old {
			if n := r.next[k]; n == -2 || n >= 0 && n < i {
				r.next[k] = -1
				if j := bytes.Index(r.in[i:], o); j >= 0 {
					r.next[k] = i + j
				}
			}
			if n := r.next[k]; n >= 0 && (at < 0 || n < at || n == at && len(o) > len(r.old[which])) {
				at, which = n, k
			}
		}
		if at < 0 || at >= upTo {
			r.out = append(r.out, r.in[i:upTo]...)
			i = upTo
			break
		}
		r.out = append(r.out, r.in[i:at]...)
		r.out = append(r.out, r.new[which]...)
		i = at + len(r.old[which])
	}
	r.in = append(r.in[:0], r.in[i:]...)
}
