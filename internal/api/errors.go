package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// apiError is an error with its place in the Anthropic error envelope. Handlers return it (or a store sentinel,
// or any other error) and serveErr writes the response: the one place where errors become HTTP.
type apiError struct {
	status int
	typ    apitype.ErrorType
	msg    string // safe to show the client
	code   string // error.details.error_code, optional
	// details are more fields of error.details, optional
	details map[string]any
}

func (e *apiError) Error() string { return e.msg }

// invalid is a 400 invalid_request_error naming the offending field: "path: message".
func invalid(path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	return &apiError{status: http.StatusBadRequest, typ: apitype.ErrInvalidRequest, msg: msg}
}

// invalidCode is a 400 with an error_code in the details.
func invalidCode(code, format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, typ: apitype.ErrInvalidRequest, msg: fmt.Sprintf(format, args...),
		code: code}
}

// notFound is a 404 for a resource kind and id.
func notFound(kind, id string) error {
	return &apiError{status: http.StatusNotFound, typ: apitype.ErrNotFound, msg: fmt.Sprintf("%s %q not found", kind, id)}
}

// conflict is a 409 that clients must not retry.
func conflict(format string, args ...any) error {
	return &apiError{status: http.StatusConflict, typ: apitype.ErrConflict, msg: fmt.Sprintf(format, args...)}
}

func errTooLarge(limit int64) error {
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: apitype.ErrRequestTooLarge,
		msg: fmt.Sprintf("request body exceeds %d bytes", limit)}
}

// lookup maps a store error from reading the resource kind/id: ErrNotFound becomes a 404 naming it; other errors
// pass through wrapped.
func lookup(err error, kind, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return notFound(kind, id)
	}
	return fmt.Errorf("%s %s: %w", kind, id, err)
}

// serveErr writes err as the Anthropic error envelope. Errors that are not an *apiError are mapped from the store
// sentinels; anything else is a 500 whose cause goes to the log and never to the client.
func (s *Server) serveErr(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &tooLarge):
		ae = errTooLarge(tooLarge.Limit).(*apiError)
	case errors.Is(err, store.ErrNotFound):
		ae = &apiError{status: http.StatusNotFound, typ: apitype.ErrNotFound, msg: "not found"}
	case errors.Is(err, store.ErrConflict):
		ae = &apiError{status: http.StatusConflict, typ: apitype.ErrConflict,
			msg: "the resource was modified concurrently; re-read it and try again"}
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
		return
	case store.IsUnavailable(s.store, err):
		// The database is restarting or out of reach: the SDKs retry a 503 after retry-after.
		s.log.Warn("api: the store is unavailable", "request_id", requestID(r.Context()), "method", r.Method,
			"path", r.URL.Path, "err", err)
		w.Header().Set("retry-after", "2")
		ae = &apiError{status: http.StatusServiceUnavailable, typ: apitype.ErrAPI,
			msg: "the database is unavailable for a moment; retry the request"}
	default:
		attrs := []any{"request_id", requestID(r.Context()), "method", r.Method, "path", r.URL.Path, "err", err}
		if id := r.PathValue("session_id"); id != "" {
			attrs = append(attrs, "session", id)
		}
		s.log.Error("api: request failed", attrs...)
		ae = &apiError{status: http.StatusInternalServerError, typ: apitype.ErrAPI, msg: "internal server error"}
	}
	if ae.status == http.StatusConflict {
		w.Header().Set("x-should-retry", "false")
	}
	env := apitype.ErrorEnvelope{
		Type:      apitype.ObjectError,
		Error:     apitype.ErrorDetail{Type: ae.typ, Message: ae.msg},
		RequestID: requestID(r.Context()),
	}
	if ae.code != "" || len(ae.details) > 0 {
		env.Error.Details = map[string]any{}
		for k, v := range ae.details {
			env.Error.Details[k] = v
		}
		if ae.code != "" {
			env.Error.Details["error_code"] = ae.code
		}
	}
	_ = writeJSON(w, ae.status, env) // the envelope always encodes
}

// writeJSON writes v as a JSON response. It fails only if v cannot be encoded, before anything is written; a
// failed write means the client went away, which nobody can be told about.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
	return nil
}

// join joins vocabulary values with sep, as strings.Join joins strings: for the lists of values in error
// messages.
func join[T ~string](vs []T, sep string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, sep)
}
