package apitype_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/corralhq/corral/internal/apitype"
)

func TestValidateMemoryPath(t *testing.T) {
	ok := []string{"/a", "/notes/a.md", "/é.md", "/a b/c", "/" + strings.Repeat("x/", 19) + "y", "/" + strings.Repeat("x", 1023)}
	for _, p := range ok {
		if err := apitype.ValidateMemoryPath(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	bad := map[string]string{
		"":                                   "empty",
		"a.md":                               `start with "/"`,
		"/":                                  "empty segment",
		"/a//b":                              "empty segment",
		"/a/":                                "empty segment",
		"/a/./b":                             `"." segment`,
		"/a/../b":                            `".." segment`,
		"/a\x07b":                            "U+0007",
		"/a\u200bb":                          "U+200B",
		"/a\u2028b":                          "U+2028",
		"/a\u2029b":                          "U+2029",
		"/e\u0301":                           "Normalization Form C",
		"/\xff":                              "UTF-8",
		"/" + strings.Repeat("x/", 20) + "y": "at most 20 segments",
		"/" + strings.Repeat("x", 1024):      "at most 1024 bytes",
	}
	for p, want := range bad {
		err := apitype.ValidateMemoryPath(p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error saying %q", p, err, want)
		}
	}
	for p, want := range map[string]bool{"/": true, "/a/": true, "/a": false, "/a//": false, "/../": false} {
		if got := apitype.ValidateMemoryPrefix(p) == nil; got != want {
			t.Errorf("prefix %q valid = %v, want %v", p, got, want)
		}
	}
}

func TestMemorySlug(t *testing.T) {
	for name, want := range map[string]string{
		"User Preferences":     "user-preferences",
		"  --Team_Notes 2026!": "team-notes-2026",
		"ÜBER":                 "ber",
		"日本":                   "memstore_abc",
	} {
		if got := apitype.MemorySlug(name, "memstore_ABC"); got != want {
			t.Errorf("MemorySlug(%q) = %q, want %q", name, got, want)
		}
	}
	if got := apitype.MemoryMountPath("Notes", "x"); got != "/mnt/memory/notes" {
		t.Errorf("mount path %q", got)
	}
}

func TestContentSHA256(t *testing.T) {
	const emptySum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	if got := apitype.ContentSHA256(""); got != emptySum || !apitype.ValidSHA256(got) {
		t.Errorf("sha of empty = %q", got)
	}
	if apitype.ValidSHA256(strings.ToUpper(emptySum)) || apitype.ValidSHA256(emptySum[1:]) {
		t.Error("uppercase or short digests must be invalid")
	}
}

func TestValidateMemoryContent(t *testing.T) {
	if err := apitype.ValidateMemoryContent(strings.Repeat("é", apitype.MaxMemoryBytes/2)); err != nil {
		t.Errorf("102,400 bytes of text: %v", err)
	}
	for content, want := range map[string]string{
		strings.Repeat("x", apitype.MaxMemoryBytes+1): "at most 102400 bytes",
		"a\xffb": "UTF-8",
		"a\x00b": "NUL",
	} {
		if err := apitype.ValidateMemoryContent(content); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("content %.10q: got %v, want an error saying %q", content, err, want)
		}
	}
}

// FuzzValidateMemoryPath: an accepted path keeps every rule, checked here independently of the validator: it
// starts with "/", is at most 1,024 bytes of UTF-8 in NFC, has 1 to 20 segments, none empty, "." or "..", and no
// control or format character nor a line or paragraph separator. A prefix (other than "/") is accepted exactly
// when it is an accepted path with a trailing "/".
func FuzzValidateMemoryPath(f *testing.F) {
	for _, s := range []string{"/a", "/notes/a.md", "/é.md", "/e\u0301.md", "/a b/c", "/" + strings.Repeat("x/", 20) + "y",
		"/" + strings.Repeat("x", 1023), "/a/../b", "/./a", "//a", "/a/", "/a\x00b", "/a\u200bb", "/a\u2028", "/\xff",
		"/\ufeffa", "/a\u00adb", "/\U000E0001", "/Å", "/\u212b", "/한", "/\u1112\u1161\u11ab", "a", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := apitype.ValidateMemoryPath(p)
		if perr := apitype.ValidateMemoryPrefix(p + "/"); p != "" && (perr == nil) != (err == nil) {
			t.Fatalf("path %q: %v, but as a prefix %q: %v", p, err, p+"/", perr)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q refused without a reason", p)
			}
			return
		}
		switch {
		case len(p) > apitype.MaxMemoryPathBytes:
			t.Fatalf("accepted %q: %d bytes", p, len(p))
		case !strings.HasPrefix(p, "/"):
			t.Fatalf("accepted %q: not absolute", p)
		case !utf8.ValidString(p):
			t.Fatalf("accepted %q: not UTF-8", p)
		case norm.NFC.String(p) != p:
			t.Fatalf("accepted %q: not NFC (%q)", p, norm.NFC.String(p))
		}
		segs := strings.Split(p[1:], "/")
		if len(segs) < 1 || len(segs) > apitype.MaxMemoryPathSegments {
			t.Fatalf("accepted %q: %d segments", p, len(segs))
		}
		for _, s := range segs {
			if s == "" || s == "." || s == ".." {
				t.Fatalf("accepted %q: segment %q", p, s)
			}
		}
		for _, r := range p {
			if r < 0x20 || r >= 0x7f && r < 0xa0 || unicode.In(r, unicode.Cc, unicode.Cf) || r == '\u2028' || r == '\u2029' {
				t.Fatalf("accepted %q: character %U", p, r)
			}
		}
	})
}
