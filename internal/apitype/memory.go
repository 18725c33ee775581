package apitype

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MemoryStore is a memory store as the API shows it («MemoryStore»): a directory of small text documents that
// sessions mount at MemoryMount/<slug> and that keeps every version of them.
type MemoryStore struct {
	Type        ObjectType        `json:"type"` // "memory_store"
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Metadata    map[string]string `json:"metadata"`
	CreatedAt   time.Time         `json:"created_at"`
	// UpdatedAt changes with the store's own fields and its archive, not with its memories.
	UpdatedAt  time.Time  `json:"updated_at"`
	ArchivedAt *time.Time `json:"archived_at"`
}

// Memory is one document of a memory store («Memory»). Content is nil in the basic view; its digest and size
// are always there.
type Memory struct {
	Type             ObjectType `json:"type"` // "memory"
	ID               string     `json:"id"`
	MemoryStoreID    string     `json:"memory_store_id"`
	Path             string     `json:"path"`
	Content          *string    `json:"content"`
	ContentSHA256    string     `json:"content_sha256"`
	ContentSizeBytes int64      `json:"content_size_bytes"`
	MemoryVersionID  string     `json:"memory_version_id"` // the current version
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

// MemoryPrefix is a list item that stands for the memories below Path (which ends in "/"), rolled up because
// they lie deeper than the list's depth («MemoryPrefix»).
type MemoryPrefix struct {
	Type ObjectType `json:"type"` // "memory_prefix"
	Path string     `json:"path"`
}

// MemoryOperation is what a memory version records.
type MemoryOperation string

// Memory operations.
const (
	MemoryCreated  MemoryOperation = "created"
	MemoryModified MemoryOperation = "modified"
	MemoryDeleted  MemoryOperation = "deleted"
)

// Valid reports whether o is a memory operation.
func (o MemoryOperation) Valid() bool {
	return o == MemoryCreated || o == MemoryModified || o == MemoryDeleted
}

// MemoryVersion is one change of a memory («MemoryVersion»). Path, ContentSHA256 and ContentSizeBytes are nil
// once redacted (and the last two for a deletion); Content also in the basic view.
type MemoryVersion struct {
	Type             ObjectType      `json:"type"` // "memory_version"
	ID               string          `json:"id"`
	MemoryID         string          `json:"memory_id"`
	MemoryStoreID    string          `json:"memory_store_id"`
	Operation        MemoryOperation `json:"operation"`
	CreatedAt        time.Time       `json:"created_at"`
	Path             *string         `json:"path"`
	Content          *string         `json:"content"`
	ContentSHA256    *string         `json:"content_sha256"`
	ContentSizeBytes *int64          `json:"content_size_bytes"`
	CreatedBy        *Actor          `json:"created_by"`
	RedactedAt       *time.Time      `json:"redacted_at"`
	RedactedBy       *Actor          `json:"redacted_by"`
}

// ActorType is who made a change («Actor»).
type ActorType string

// Actor types.
const (
	ActorAPI            ActorType = "api_actor"     // an API key
	ActorSession        ActorType = "session_actor" // an agent writing through its mount
	ActorUser           ActorType = "user_actor"
	ActorServiceAccount ActorType = "service_account_actor"
)

// Actor is who made a change: exactly the id field of its type is set.
type Actor struct {
	Type             ActorType `json:"type"`
	APIKeyID         string    `json:"api_key_id,omitempty"`
	SessionID        string    `json:"session_id,omitempty"`
	UserID           string    `json:"user_id,omitempty"`
	ServiceAccountID string    `json:"service_account_id,omitempty"`
}

// Memory limits.
const (
	// MaxMemoryBytes is the most content one memory holds.
	MaxMemoryBytes = 102400
	// MaxMemoryPathBytes is the longest path; MaxMemoryPathSegments the most segments in one.
	MaxMemoryPathBytes    = 1024
	MaxMemoryPathSegments = 20
	// MemoryMount is where a session's sandbox has its memory stores, each at MemoryMount/<slug>.
	MemoryMount = "/mnt/memory"
)

// ContentSHA256 is the lowercase hex SHA-256 of content's bytes, a memory's content_sha256.
func ContentSHA256(content string) string {
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:])
}

// ValidSHA256 reports whether s is 64 lowercase hex digits.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidateMemoryPath checks a memory's path against the API's rules: it starts with "/", has 1 to 20 segments,
// none empty, "." or "..", no control or format character nor U+2028/U+2029, is valid UTF-8 in Normalization
// Form C, and is at most 1,024 bytes. The error says which rule failed.
func ValidateMemoryPath(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case len(p) > MaxMemoryPathBytes:
		return fmt.Errorf("must be at most %d bytes (it has %d)", MaxMemoryPathBytes, len(p))
	case !strings.HasPrefix(p, "/"):
		return errors.New(`must start with "/"`)
	case !utf8.ValidString(p):
		return errors.New("must be valid UTF-8")
	}
	for _, r := range p {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("must not contain the character %U", r)
		}
	}
	if !norm.NFC.IsNormalString(p) {
		return errors.New("must be in Unicode Normalization Form C")
	}
	segs := strings.Split(p[1:], "/")
	if len(segs) > MaxMemoryPathSegments {
		return fmt.Errorf("must have at most %d segments (it has %d)", MaxMemoryPathSegments, len(segs))
	}
	for _, s := range segs {
		switch s {
		case "":
			return errors.New("must not have an empty segment")
		case ".", "..":
			return fmt.Errorf("must not have a %q segment", s)
		}
	}
	return nil
}

// ValidateMemoryContent checks a memory's content: UTF-8 text without NUL characters, at most MaxMemoryBytes.
func ValidateMemoryContent(content string) error {
	switch {
	case len(content) > MaxMemoryBytes:
		return fmt.Errorf("must be at most %d bytes (it has %d)", MaxMemoryBytes, len(content))
	case !utf8.ValidString(content):
		return errors.New("must be valid UTF-8 text")
	case strings.IndexByte(content, 0) >= 0:
		return errors.New("must not contain NUL characters")
	}
	return nil
}

// ValidateMemoryPrefix checks a list's path_prefix: "/" or a valid path followed by "/".
func ValidateMemoryPrefix(p string) error {
	if p == "/" {
		return nil
	}
	if !strings.HasSuffix(p, "/") {
		return errors.New(`must end with "/"`)
	}
	return ValidateMemoryPath(strings.TrimSuffix(p, "/"))
}

// MemorySlug is the directory a store named name is mounted at under MemoryMount: the name lowercased, every
// run of characters other than a-z and 0-9 turned into one "-", without a leading or trailing "-". A name with
// no such character gives the store's id, lowercased.
func MemorySlug(name, storeID string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	if b.Len() == 0 {
		return strings.ToLower(storeID)
	}
	return b.String()
}

// MemoryMountPath is where a store named name is mounted in a session's sandbox.
func MemoryMountPath(name, storeID string) string {
	return MemoryMount + "/" + MemorySlug(name, storeID)
}
