package apitype

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// CheckoutType is the type of a github_repository resource's checkout: what of the repository to check out.
type CheckoutType string

// Checkout types.
const (
	CheckoutBranch CheckoutType = "branch" // a branch (or tag) by name
	CheckoutCommit CheckoutType = "commit" // a commit by its full id
)

// MaxBranchName is the longest branch name a checkout may give, in characters.
const MaxBranchName = 255

// Checkout is a github_repository resource's checkout: {"type":"branch","name"} or {"type":"commit","sha"}.
// A resource without one is on the repository's default branch. The API validates a checkout when a resource
// is created and stores it in this form (Resource.Checkout); the workspace validates it again before git sees
// it, with the same Validate.
type Checkout struct {
	Type CheckoutType `json:"type"`
	Name string       `json:"name,omitempty"` // the branch, for type branch
	SHA  string       `json:"sha,omitempty"`  // the full commit id, for type commit
}

// CheckoutError is an invalid Checkout. Field is the checkout's field at fault (type, name or sha), so that
// the API can name it in its 400 (resources[0].checkout.name: ...).
type CheckoutError struct {
	Field   string
	Message string
}

func (e *CheckoutError) Error() string { return "checkout." + e.Field + ": " + e.Message }

// Validate reports whether c is a checkout git can be asked for, as a *CheckoutError. A branch name must be a
// valid git branch name (the rules of git check-ref-format --branch, and not an option: no leading "-"); a
// commit must be given by its full id, as the API's SDK documents it ("Full commit SHA to check out"): 40
// hexadecimal digits, or 64 in a SHA-256 repository. An abbreviated id is refused because it may become
// ambiguous as the repository grows, and because a commit on no branch can be fetched only by its full id.
func (c *Checkout) Validate() error {
	switch c.Type {
	case CheckoutBranch:
		if c.SHA != "" {
			return &CheckoutError{"sha", "not allowed for a branch checkout"}
		}
		if c.Name == "" {
			return &CheckoutError{"name", "required"}
		}
		if utf8.RuneCountInString(c.Name) > MaxBranchName {
			return &CheckoutError{"name", fmt.Sprintf("longer than %d characters", MaxBranchName)}
		}
		if why := badBranchName(c.Name); why != "" {
			return &CheckoutError{"name", fmt.Sprintf("invalid branch name %q: %s", c.Name, why)}
		}
	case CheckoutCommit:
		if c.Name != "" {
			return &CheckoutError{"name", "not allowed for a commit checkout"}
		}
		if c.SHA == "" {
			return &CheckoutError{"sha", "required"}
		}
		if (len(c.SHA) != 40 && len(c.SHA) != 64) || strings.Trim(c.SHA, "0123456789abcdefABCDEF") != "" {
			return &CheckoutError{"sha", fmt.Sprintf("invalid commit sha %q: must be a full commit id, 40 hexadecimal digits (64 in a SHA-256 repository)", c.SHA)}
		}
	default:
		return &CheckoutError{"type", `must be "branch" or "commit"`}
	}
	return nil
}

// badBranchName says why name is not a branch name git accepts (git check-ref-format --branch), or "" if it
// is. A leading "-" is refused too: git would read the name as an option.
func badBranchName(name string) string {
	switch {
	case strings.HasPrefix(name, "-"):
		return `it may not start with "-"`
	case name == "@":
		return `it may not be "@"`
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//"):
		return `it may not start or end with "/" or contain "//"`
	case strings.HasSuffix(name, "."):
		return `it may not end with "."`
	case strings.Contains(name, ".."):
		return `it may not contain ".."`
	case strings.Contains(name, "@{"):
		return `it may not contain "@{"`
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return "it may not contain control characters"
		}
		if strings.ContainsRune(" ~^:?*[\\", r) {
			return fmt.Sprintf("it may not contain %q", r)
		}
	}
	for part := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(part, ".") {
			return `no part of it may start with "."`
		}
		if strings.HasSuffix(part, ".lock") {
			return `no part of it may end with ".lock"`
		}
	}
	return ""
}
