package webfetch_test

import (
	"slices"
	"testing"

	"github.com/corralhq/corral/internal/webfetch"
)

func TestURLsIn(t *testing.T) {
	text := "See https://Example.com:443/a?b=1#frag, and [docs](https://docs.example.com/x_(y)). Also <http://h.example:80/>; " +
		"not ftp://x.example/ nor example.com/plain. Last: https://w.example/page."
	want := []string{"https://example.com/a?b=1", "https://docs.example.com/x_(y)", "http://h.example", "https://w.example/page"}
	if got := webfetch.URLsIn(text); !slices.Equal(got, want) {
		t.Errorf("URLsIn = %q, want %q", got, want)
	}
	for raw, want := range map[string]string{
		"HTTPS://EXAMPLE.COM/":      "https://example.com",
		"https://example.com:8443/": "https://example.com:8443",
		"https://[::1]:443/p":       "https://[::1]/p",
		"mailto:a@example.com":      "",
		"/relative":                 "",
	} {
		if got := webfetch.NormURL(raw); got != want {
			t.Errorf("NormURL(%q) = %q, want %q", raw, got, want)
		}
	}
}
