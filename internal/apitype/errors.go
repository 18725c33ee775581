package apitype

// Error types of the Anthropic error envelope.
const (
	ErrInvalidRequest  = "invalid_request_error"
	ErrAuthentication  = "authentication_error"
	ErrPermission      = "permission_error"
	ErrNotFound        = "not_found_error"
	ErrConflict        = "conflict_error"
	ErrRequestTooLarge = "request_too_large"
	ErrRateLimit       = "rate_limit_error"
	ErrAPI             = "api_error"
	ErrOverloaded      = "overloaded_error"
)

// ErrorEnvelope is the body of every error response.
type ErrorEnvelope struct {
	Type      string      `json:"type"` // always "error"
	Error     ErrorDetail `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

// ErrorDetail is the inner error object.
type ErrorDetail struct {
	Type    string         `json:"type"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}
