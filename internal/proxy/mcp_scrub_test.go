package proxy

import (
	"strings"
	"testing"
)

// TestScrubBody: a recorded answer never shows a secret, whole or in part, wherever the cut falls: a secret
// straddling the limit is replaced before the cut, and a cut that ends with the beginning of a secret drops it.
func TestScrubBody(t *testing.T) {
	t.Parallel()
	const secret = "tok-0123456789abcdef"
	for _, c := range []struct {
		name   string
		body   string
		limit  int
		cut    bool
		absent []string
	}{
		{"whole, short", "error: " + secret, 100, false, []string{secret}},
		{"straddles the limit", strings.Repeat("x", 10) + secret + "tail", 15, true, []string{"tok-0"}},
		{"cut inside the read", strings.Repeat("x", 10) + secret[:8], 15, true, []string{"tok-0"}},
		{"ends with its beginning", strings.Repeat("x", 12) + secret[:6], 16, true, []string{"tok-"}},
	} {
		got, cut := scrubBody([]byte(c.body), c.limit, []string{secret})
		if cut != c.cut || len(got) > c.limit {
			t.Errorf("%s: %q (cut %v), want at most %d bytes, cut %v", c.name, got, cut, c.limit, c.cut)
		}
		for _, a := range c.absent {
			if strings.Contains(got, a) {
				t.Errorf("%s: %q shows %q of the secret", c.name, got, a)
			}
		}
	}
	if got, _ := scrubBody([]byte("before "+secret+" after"), 100, []string{secret}); got != "before [redacted] after" {
		t.Errorf("replaced: %q", got)
	}
}
