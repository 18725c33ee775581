package apitype

// Error types of the Anthropic error envelope.
const (
	ErrInvalidRequest  ErrorType = "invalid_request_error"
	ErrAuthentication  ErrorType = "authentication_error"
	ErrPermission      ErrorType = "permission_error"
	ErrNotFound        ErrorType = "not_found_error"
	ErrConflict        ErrorType = "conflict_error"
	ErrRequestTooLarge ErrorType = "request_too_large"
	ErrRateLimit       ErrorType = "rate_limit_error"
	ErrAPI             ErrorType = "api_error"
	ErrOverloaded      ErrorType = "overloaded_error"
	// ErrMemoryPrecondition: a memory write's precondition (precondition.content_sha256,
	// expected_content_sha256) does not hold (409).
	ErrMemoryPrecondition ErrorType = "memory_precondition_failed_error"
	// ErrMemoryPathConflict: another memory of the store has the path (409).
	ErrMemoryPathConflict ErrorType = "memory_path_conflict_error"
)

// ErrorEnvelope is the body of every error response.
type ErrorEnvelope struct {
	Type      ObjectType  `json:"type"` // always "error" (ObjectError)
	Error     ErrorDetail `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

// ErrorDetail is the inner error object.
type ErrorDetail struct {
	Type    ErrorType      `json:"type"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}
