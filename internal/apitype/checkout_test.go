package apitype_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
)

func TestCheckoutValidate(t *testing.T) {
	sha1 := "0123456789abcdef0123456789abcdef01234567"
	sha256 := strings.Repeat("0123456789ABCDEF", 4)
	valid := []apitype.Checkout{
		{Type: apitype.CheckoutBranch, Name: "main"},
		{Type: apitype.CheckoutBranch, Name: "feature/x-1.2"},
		{Type: apitype.CheckoutBranch, Name: "v1.0"},
		{Type: apitype.CheckoutBranch, Name: "ünïcode"},
		{Type: apitype.CheckoutBranch, Name: strings.Repeat("é", apitype.MaxBranchName)},
		{Type: apitype.CheckoutCommit, SHA: sha1},
		{Type: apitype.CheckoutCommit, SHA: sha256},
	}
	for _, c := range valid {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	invalid := []struct {
		c           apitype.Checkout
		field, want string
	}{
		{apitype.Checkout{}, "type", `must be "branch" or "commit"`},
		{apitype.Checkout{Type: "tag", Name: "v1"}, "type", `must be "branch" or "commit"`},
		{apitype.Checkout{Type: apitype.CheckoutBranch}, "name", "required"},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "main", SHA: sha1}, "sha", "not allowed for a branch checkout"},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: strings.Repeat("a", apitype.MaxBranchName+1)}, "name", "longer than 255 characters"},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "--upload-pack=x"}, "name", `invalid branch name "--upload-pack=x": it may not start with "-"`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a..b"}, "name", `may not contain ".."`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a b"}, "name", `may not contain ' '`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a\tb"}, "name", "control characters"},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a\nb"}, "name", "control characters"},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a\x00b"}, "name", "control characters"},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a\x7fb"}, "name", "control characters"},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a~1"}, "name", `may not contain '~'`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a^"}, "name", `'^'`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a:b"}, "name", `':'`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a?"}, "name", `'?'`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a*"}, "name", `'*'`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a[b"}, "name", `'['`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: `a\b`}, "name", `'\\'`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a@{1}"}, "name", `"@{"`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "@"}, "name", `may not be "@"`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "/a"}, "name", `"/"`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a/"}, "name", `"/"`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a//b"}, "name", `"//"`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a."}, "name", `end with "."`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a/.b"}, "name", `start with "."`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: ".a"}, "name", `start with "."`},
		{apitype.Checkout{Type: apitype.CheckoutBranch, Name: "a.lock/b"}, "name", `end with ".lock"`},
		{apitype.Checkout{Type: apitype.CheckoutCommit}, "sha", "required"},
		{apitype.Checkout{Type: apitype.CheckoutCommit, SHA: sha1, Name: "main"}, "name", "not allowed for a commit checkout"},
		{apitype.Checkout{Type: apitype.CheckoutCommit, SHA: "abcdef1"}, "sha", "must be a full commit id"},
		{apitype.Checkout{Type: apitype.CheckoutCommit, SHA: sha1[:39]}, "sha", "must be a full commit id"},
		{apitype.Checkout{Type: apitype.CheckoutCommit, SHA: sha1 + "0"}, "sha", "must be a full commit id"},
		{apitype.Checkout{Type: apitype.CheckoutCommit, SHA: "g" + sha1[1:]}, "sha", "must be a full commit id"},
		{apitype.Checkout{Type: apitype.CheckoutCommit, SHA: "-" + sha1[1:]}, "sha", "must be a full commit id"},
	}
	for _, tc := range invalid {
		err := tc.c.Validate()
		var ce *apitype.CheckoutError
		if !errors.As(err, &ce) {
			t.Errorf("%+v: error %v, want a *CheckoutError", tc.c, err)
			continue
		}
		if ce.Field != tc.field || !strings.Contains(ce.Message, tc.want) {
			t.Errorf("%+v: error at %q: %q, want at %q containing %q", tc.c, ce.Field, ce.Message, tc.field, tc.want)
		}
		if got := err.Error(); got != "checkout."+ce.Field+": "+ce.Message {
			t.Errorf("%+v: Error() = %q", tc.c, got)
		}
	}
}
