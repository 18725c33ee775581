package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestParseResourceCheckout: a repository's checkout is validated by apitype.Checkout.Validate, its errors are
// 400s that name the checkout's field at fault, and a valid checkout is stored in its canonical form.
func TestParseResourceCheckout(t *testing.T) {
	now := time.Unix(1_800_000_000, 0).UTC()
	repo := func(checkout string) json.RawMessage {
		return json.RawMessage(`{"type":"github_repository","url":"https://github.com/a/b","checkout":` + checkout + `}`)
	}
	sha := "0123456789abcdef0123456789abcdef01234567"
	for checkout, want := range map[string]string{
		`{"type":"branch","name":"feature/x"}`:     `{"type":"branch","name":"feature/x"}`,
		`{"name":"main","type":"branch","sha":""}`: `{"type":"branch","name":"main"}`,
		`{"type":"commit","sha":"` + sha + `"}`:    `{"type":"commit","sha":"` + sha + `"}`,
		`null`:                                     ``,
	} {
		res, _, err := parseResource("resources[0]", repo(checkout), now, true)
		var stored []byte
		if res.Checkout != nil {
			stored, _ = json.Marshal(res.Checkout)
		}
		if err != nil || string(stored) != want {
			t.Errorf("checkout %s: stored %s, %v; want %s", checkout, stored, err, want)
		}
	}
	for checkout, want := range map[string]string{
		`{"type":"tag","name":"v1"}`:                       `resources[0].checkout.type: must be "branch" or "commit"`,
		`{"type":"branch"}`:                                `resources[0].checkout.name: required`,
		`{"type":"branch","name":"a..b"}`:                  `resources[0].checkout.name: invalid branch name "a..b": it may not contain ".."`,
		`{"type":"branch","name":"a\tb"}`:                  `resources[0].checkout.name: invalid branch name "a\tb": it may not contain control characters`,
		`{"type":"branch","name":"m","sha":"` + sha + `"}`: `resources[0].checkout.sha: not allowed for a branch checkout`,
		`{"type":"commit","sha":"abcdef1"}`:                `resources[0].checkout.sha: invalid commit sha "abcdef1": must be a full commit id, 40 hexadecimal digits (64 in a SHA-256 repository)`,
		`{"type":"commit","sha":"` + sha + `","name":"m"}`: `resources[0].checkout.name: not allowed for a commit checkout`,
		`{"type":"commit","sha":"` + sha + `","ref":"m"}`:  `resources[0].checkout.ref: unknown field`,
	} {
		_, _, err := parseResource("resources[0]", repo(checkout), now, true)
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.msg != want {
			t.Errorf("checkout %s: %v, want a 400 %q", checkout, err, want)
		}
	}
}
