package proxy

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/corralhq/corral/internal/sandbox/egress"
)

// terminated returns a request as the egress proxy hands it to Rewrite from a TLS connection it terminated to
// hostport (the CONNECT target): URL https://hostport/, the TLS state with the client's SNI, Host as sent.
func terminated(t *testing.T, hostport, sni, host, auth string) *http.Request {
	t.Helper()
	req := request(t, "https://"+hostport+"/", auth, "")
	req.Host = host
	req.TLS = &tls.ConnectionState{HandshakeComplete: true, ServerName: sni}
	return req
}

// A secret goes only to the host the connection was opened for: a Host header (or an absolute-form URI's
// authority, which the server puts in req.Host) or an SNI the sandbox chose is refused, and nothing is
// substituted (issue 21, item 1: an upstream received Host: evil.example with the real secret).
func TestRewriteHostIsTheConnections(t *testing.T) {
	t.Parallel()
	s := newTestSecret("TOKEN", "value-of-token", true, false, "api.example.com")
	in := testInjector(t, s)
	ph := string(s.placeholder)
	for _, tc := range []struct {
		name, hostport, sni, host string
		ok                        bool
	}{
		{"same host", "api.example.com:443", "api.example.com", "api.example.com", true},
		{"same host, port and case", "api.example.com:443", "API.example.com.", "API.Example.COM:443", true},
		{"no Host, no SNI", "api.example.com:443", "", "", true},
		{"Host evil.example", "api.example.com:443", "api.example.com", "evil.example", false},
		{"Host evil.example:443", "api.example.com:443", "api.example.com", "evil.example:443", false},
		{"Host of another port", "api.example.com:443", "api.example.com", "api.example.com:8443", false},
		{"Host with userinfo", "api.example.com:443", "api.example.com", "evil.example@api.example.com", false},
		{"SNI evil.example", "api.example.com:443", "evil.example", "api.example.com", false},
	} {
		req := terminated(t, tc.hostport, tc.sni, tc.host, "Bearer "+ph)
		err := in.Rewrite(req)
		got := req.Header.Get("Authorization")
		if tc.ok {
			if err != nil || got != "Bearer value-of-token" {
				t.Errorf("%s: %v, Authorization %q; want the secret", tc.name, err, got)
			}
			continue
		}
		if !errors.Is(err, egress.ErrDenied) || got != "Bearer "+ph {
			t.Errorf("%s: %v, Authorization %q; want a refusal and the placeholder", tc.name, err, got)
		}
		if err != nil && (strings.Contains(err.Error(), "value-of-token") || strings.Contains(err.Error(), ph)) {
			t.Errorf("%s: the refusal shows a secret or a placeholder: %v", tc.name, err)
		}
	}
}

// A secret goes only inside TLS the proxy terminated (req.TLS set), never in plain HTTP, and on a port other
// than 443 only where the credential's host entry names it (issue 21, item 2).
func TestRewriteTLSAndPort(t *testing.T) {
	t.Parallel()
	s := newTestSecret("TOKEN", "value-of-token", true, true, "api.example.com", "named.example.com:8443")
	in := testInjector(t, s)
	ph := string(s.placeholder)

	// Plain HTTP (no req.TLS): never substituted, whatever the scheme says; on a port the credential is for,
	// the placeholder in a header is refused with a message that says why.
	for _, u := range []string{"http://api.example.com/", "https://api.example.com/"} {
		req := request(t, u, "Bearer "+ph, "a="+ph)
		req.TLS = nil
		err := in.Rewrite(req)
		b, _ := io.ReadAll(req.Body)
		if got := req.Header.Get("Authorization"); got != "Bearer "+ph || strings.Contains(string(b), "value-of-token") {
			t.Errorf("%s without TLS: %v; Authorization %q, body %q: the secret was substituted", u, err, got, b)
		}
		if strings.HasPrefix(u, "https") && (!errors.Is(err, egress.ErrDenied) || !strings.Contains(err.Error(), "HTTPS")) {
			t.Errorf("%s without TLS: %v, want a refusal saying why", u, err)
		}
	}

	for _, tc := range []struct {
		host, port string
		want       bool
	}{
		{"api.example.com", "443", true},
		{"api.example.com", "8443", false}, // no entry names the port
		{"api.example.com", "80", false},
		{"named.example.com", "8443", true}, // the entry names it
		{"named.example.com", "443", false}, // ... and only it
	} {
		if got := in.Intercepts(tc.host, tc.port); got != tc.want {
			t.Errorf("Intercepts(%s, %s) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
		hp := tc.host + ":" + tc.port
		req := terminated(t, hp, tc.host, hp, "Bearer "+ph)
		_ = in.Rewrite(req)
		if got := req.Header.Get("Authorization") == "Bearer value-of-token"; got != tc.want {
			t.Errorf("Rewrite at %s substituted: %v, want %v", hp, got, tc.want)
		}
	}
}

// secretForms are the encodings of a secret an upstream may echo, as the test builds them itself.
func secretForms(secret string) map[string]string {
	b := []byte(secret)
	return map[string]string{
		"base64":             base64.StdEncoding.EncodeToString(b),
		"base64 raw":         base64.RawStdEncoding.EncodeToString(b),
		"base64url":          base64.URLEncoding.EncodeToString(b),
		"base64url raw":      base64.RawURLEncoding.EncodeToString(b),
		"hex":                hex.EncodeToString(b),
		"HEX":                strings.ToUpper(hex.EncodeToString(b)),
		"query escape":       url.QueryEscape(secret),
		"path escape":        url.PathEscape(secret),
		"query escape lower": lowerHexEscapes(url.QueryEscape(secret)),
	}
}

// lowerHexEscapes writes the hex digits of s's percent escapes in lower case.
func lowerHexEscapes(s string) string {
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			out.WriteString("%" + strings.ToLower(s[i+1:i+3]))
			i += 2
			continue
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// decodeLoose decodes as much of s as the encoding takes (padding dropped, a tail that is no whole quantum
// cut), so that a scrubbed string whose length changed still shows what it holds.
func decodeLoose(enc *base64.Encoding, s string) []byte {
	s = strings.TrimRight(s, "=")
	for len(s) > 0 {
		if b, err := enc.DecodeString(s); err == nil {
			return b
		}
		s = s[:len(s)-1]
	}
	return nil
}

// The encodings of a secret an upstream echoes are scrubbed like the secret itself: base64 (standard and
// URL-safe, padded or not, and inside a longer base64 string at each of the 3 alignments), hex in either case,
// percent-encoding (issue 21, item 7: a base64 echo reached the sandbox).
func TestScrubEncodings(t *testing.T) {
	t.Parallel()
	const value = "s3cr3t/with+special=chars?&x" // every encoding differs from it
	s := newTestSecret("TOKEN", value, true, false, "api.example.com")
	in := testInjector(t, s)
	ph := string(s.placeholder)
	forms, phForms := secretForms(value), secretForms(ph)

	var body strings.Builder
	for name, f := range forms {
		body.WriteString(name + ": " + f + "\n")
	}
	// Inside longer base64: 0, 1 or 2 bytes before the secret (and some after), in both alphabets.
	embedded := 0
	for k := range 3 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			s := enc.EncodeToString([]byte("{\"k\":\"" + "ab"[:k] + value + "\",\"n\":1}"))
			embedded++
			body.WriteString("embedded: " + s + "\n")
		}
	}
	req := request(t, "https://api.example.com/", "", "")
	resp := &http.Response{Header: http.Header{"X-Echo": {forms["base64"]}, "X-Hex": {forms["hex"]}},
		ContentLength: int64(body.Len()), Body: io.NopCloser(iotest.OneByteReader(strings.NewReader(body.String())))}
	in.ScrubResponse(req, resp)
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range forms {
		if bytes.Contains(got, []byte(f)) {
			t.Errorf("the %s of the secret reached the sandbox", name)
		}
		// The whole forms become the same form of the placeholder.
		if !bytes.Contains(got, []byte(name+": "+phForms[name]+"\n")) {
			t.Errorf("the %s of the secret was not replaced by the %[1]s of the placeholder", name)
		}
	}
	for line := range strings.SplitSeq(string(got), "\n") {
		rest, ok := strings.CutPrefix(line, "embedded: ")
		if !ok {
			continue
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			if dec := decodeLoose(enc, rest); bytes.Contains(dec, []byte(value)) || bytes.Contains(dec, []byte(value[2:len(value)-2])) {
				t.Errorf("a longer base64 string still holds the secret: %q decodes to %q", rest, dec)
			}
		}
	}
	if n := strings.Count(string(got), "embedded: "); n != embedded {
		t.Fatalf("the embedded forms are missing from the answer: %q", got)
	}
	if h := resp.Header.Get("X-Echo"); h != phForms["base64"] {
		t.Errorf("X-Echo header = %q, want the base64 of the placeholder", h)
	}
	if h := resp.Header.Get("X-Hex"); h != phForms["hex"] {
		t.Errorf("X-Hex header = %q, want the hex of the placeholder", h)
	}
	// The literal secret is still scrubbed, and the rest of the answer is left alone.
	resp = &http.Response{Header: http.Header{}, Body: io.NopCloser(strings.NewReader("a " + value + " b QUJD 414243"))}
	in.ScrubResponse(req, resp)
	if b, _ := io.ReadAll(resp.Body); string(b) != "a "+ph+" b QUJD 414243" {
		t.Errorf("literal echo: %q", b)
	}
}
