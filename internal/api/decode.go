package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"
)

// decodeBody reads the request body, which must be one JSON object, and decodes it into v. Unknown fields are
// rejected (the request types model every field the SDK sends). Every failure is a 4xx naming the field.
func decodeBody(r *http.Request, v any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// readBody reads the whole (size-capped) request body.
func readBody(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errTooLarge(tooLarge.Limit)
		}
		return nil, invalid("", "reading request body: %v", err)
	}
	return buf.Bytes(), nil
}

// decodeJSON decodes one JSON object from body into v, strictly.
func decodeJSON(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return invalid("", "request body is required")
	}
	if body[0] != '{' {
		return invalid("", "request body must be a JSON object")
	}
	if !utf8.Valid(body) {
		return invalid("", "request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	// Not dec.More, which is false before a stray "}" or "]": the object must end the (trimmed) body.
	if dec.InputOffset() != int64(len(body)) {
		return invalid("", "malformed JSON: unexpected data after the top-level object")
	}
	return nil
}

// strictUnmarshal decodes raw into v rejecting unknown fields; errors name fields under p.
func strictUnmarshal(p string, raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonErrorAt(p, err)
	}
	return nil
}

// typeOf reads the "type" discriminator of a JSON object.
func typeOf(p string, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return "", invalid(p, "expected an object")
	}
	var t struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", invalid(path(p, "type"), "expected a string")
	}
	if t.Type == nil {
		return "", nil
	}
	return *t.Type, nil
}

// isNull reports whether a raw field is absent or null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// jsonError turns an encoding/json error into a 400 that names the field.
func jsonError(err error) error { return jsonErrorAt("", err) }

// jsonErrorAt is jsonError for a value decoded at path p of the body.
func jsonErrorAt(p string, err error) error {
	var ae *apiError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &syn):
		return invalid(p, "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		field := path(p, typ.Field)
		if field == "" {
			field = "body"
		}
		return invalid(field, "expected %s, got JSON %s", jsonTypeName(typ.Type), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return invalid(p, "malformed JSON: unexpected end of input")
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return invalid(path(p, strings.Trim(name, `"`)), "unknown field")
	}
	return invalid(p, "invalid JSON: %s", strings.TrimPrefix(msg, "json: "))
}

// jsonTypeName names a Go type the way a JSON client thinks of it: by its kind, so that a field of a named type
// (apitype.EnvironmentType) is "a string" like a field of type string.
func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// nullable is a request field that distinguishes omitted, null and a value: "omit to preserve, null to clear".
type nullable[T any] struct {
	Set   bool // present in the body (possibly null)
	Null  bool
	Value T
}

// UnmarshalJSON implements json.Unmarshaler; it is called for null too.
func (n *nullable[T]) UnmarshalJSON(b []byte) error {
	n.Set = true
	if string(bytes.TrimSpace(b)) == "null" {
		n.Null = true
		return nil
	}
	return json.Unmarshal(b, &n.Value)
}

// path joins a field path: path("events[0]", "content") = "events[0].content".
func path(parent, field string) string {
	if parent == "" {
		return field
	}
	return parent + "." + field
}

// index is parent[i].
func index(parent string, i int) string { return fmt.Sprintf("%s[%d]", parent, i) }

// Metadata limits, as the hosted service enforces them.
const (
	maxMetadataPairs = 16
	maxMetadataKey   = 64
	maxMetadataValue = 512
)

// validateMetadata checks a full metadata bag.
func validateMetadata(p string, m map[string]string) error {
	if len(m) > maxMetadataPairs {
		return invalid(p, "at most %d pairs", maxMetadataPairs)
	}
	for k, v := range m {
		if err := validateMetadataPair(p, k, v); err != nil {
			return err
		}
	}
	return nil
}

func validateMetadataPair(p, k, v string) error {
	if k == "" {
		return invalid(p, "keys must not be empty")
	}
	if utf8.RuneCountInString(k) > maxMetadataKey {
		return invalid(path(p, k), "key longer than %d characters", maxMetadataKey)
	}
	if utf8.RuneCountInString(v) > maxMetadataValue {
		return invalid(path(p, k), "value longer than %d characters", maxMetadataValue)
	}
	return nil
}

// patchMetadata applies a metadata patch: a string upserts, null or "" deletes (the Go SDK cannot send null),
// omitted keys are kept. The result is validated.
func patchMetadata(p string, cur map[string]string, patch map[string]*string) (map[string]string, error) {
	out := make(map[string]string, len(cur)+len(patch))
	for k, v := range cur {
		out[k] = v
	}
	for k, v := range patch {
		if v == nil || *v == "" {
			delete(out, k)
			continue
		}
		if err := validateMetadataPair(p, k, *v); err != nil {
			return nil, err
		}
		out[k] = *v
	}
	if err := validateMetadata(p, out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkString validates a required or optional string's length in characters, and refuses NUL characters: a
// name, an id or a setting with one would be cut short by whatever reads it later (a C string, a path, a log).
func checkString(p, v string, required bool, maxLen int) error {
	if err := checkText(p, v, required, maxLen); err != nil {
		return err
	}
	if strings.IndexByte(v, 0) >= 0 {
		return invalid(p, "must not contain NUL characters")
	}
	return nil
}

// checkText validates a required or optional string's length in characters. It is for content (message text,
// tool output), which may hold any character.
func checkText(p, v string, required bool, maxLen int) error {
	if v == "" {
		if required {
			return invalid(p, "required")
		}
		return nil
	}
	if n := utf8.RuneCountInString(v); maxLen > 0 && n > maxLen {
		return invalid(p, "longer than %d characters", maxLen)
	}
	return nil
}
