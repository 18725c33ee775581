package apitype

import "time"

// Dream is a dream as the API shows it («Dream»): a run of a session of the server's own that reads a memory
// store and up to 100 session transcripts and writes a memory store (a new one, or the input itself) that
// merges duplicates, drops stale entries and records cross-session patterns.
type Dream struct {
	Type           ObjectType          `json:"type"` // "dream"
	ID             string              `json:"id"`
	Status         DreamStatus         `json:"status"`
	Inputs         []DreamInput        `json:"inputs"`
	Model          DreamModel          `json:"model"`
	Instructions   *string             `json:"instructions"`
	OutputBehavior DreamOutputBehavior `json:"output_behavior"`
	Outputs        []DreamOutput       `json:"outputs"`
	// SessionID is the session that runs the dream, once it is created.
	SessionID *string     `json:"session_id"`
	Error     *DreamError `json:"error"`
	Usage     DreamUsage  `json:"usage"`
	CreatedAt time.Time   `json:"created_at"`
	// EndedAt is when the dream reached a terminal status.
	EndedAt    *time.Time `json:"ended_at"`
	ArchivedAt *time.Time `json:"archived_at"`
}

// DreamStatus is where a dream is in its lifecycle.
type DreamStatus string

// Dream statuses: completed, failed and canceled are terminal.
const (
	DreamPending   DreamStatus = "pending"
	DreamRunning   DreamStatus = "running"
	DreamCompleted DreamStatus = "completed"
	DreamFailed    DreamStatus = "failed"
	DreamCanceled  DreamStatus = "canceled"
)

// Valid reports whether s is a dream status.
func (s DreamStatus) Valid() bool {
	switch s {
	case DreamPending, DreamRunning, DreamCompleted, DreamFailed, DreamCanceled:
		return true
	}
	return false
}

// Terminal reports whether a dream with this status has ended: its status does not change again.
func (s DreamStatus) Terminal() bool {
	return s == DreamCompleted || s == DreamFailed || s == DreamCanceled
}

// Dream input types.
const (
	DreamInputMemoryStore = "memory_store"
	DreamInputSessions    = "sessions"
)

// DreamInput is a source a dream reads: a memory store (MemoryStoreID) or sessions (SessionIDs, sorted).
type DreamInput struct {
	Type          string   `json:"type"`
	MemoryStoreID string   `json:"memory_store_id,omitempty"`
	SessionIDs    []string `json:"session_ids,omitempty"`
}

// DreamModel is the model a dream runs, always an object on the wire.
type DreamModel struct {
	ID    string `json:"id"`
	Speed string `json:"speed,omitempty"`
}

// Dream output behaviors.
const (
	DreamCreateNew      = "create_new"
	DreamUpdateExisting = "update_existing"
)

// DreamOutputBehavior says which memory store a dream writes: a new one (create_new) or its input store
// (update_existing, MemoryStoreID).
type DreamOutputBehavior struct {
	Type          string `json:"type"`
	MemoryStoreID string `json:"memory_store_id,omitempty"`
}

// DreamOutput is the memory store that holds a dream's result.
type DreamOutput struct {
	Type          string `json:"type"` // "memory_store"
	MemoryStoreID string `json:"memory_store_id"`
}

// DreamError is why a dream failed.
type DreamError struct {
	Type    string `json:"type"` // "timeout", "internal_error", ...
	Message string `json:"message"`
}

// Dream error types.
const (
	DreamErrTimeout         = "timeout"
	DreamErrInternal        = "internal_error"
	DreamErrSessionFailed   = "session_error"
	DreamErrInputNotFound   = "input_not_found_error"
	DreamErrInputArchived   = "input_archived_error"
	DreamErrSessionsMissing = "sessions_not_found_error"
)

// DreamUsage is the tokens a dream has used, summed over its session's model requests.
type DreamUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// MemoryStoreInput returns the id of the dream's input memory store.
func (d *Dream) MemoryStoreInput() string {
	for _, in := range d.Inputs {
		if in.Type == DreamInputMemoryStore {
			return in.MemoryStoreID
		}
	}
	return ""
}

// SessionInputs returns the ids of the sessions the dream reads.
func (d *Dream) SessionInputs() []string {
	for _, in := range d.Inputs {
		if in.Type == DreamInputSessions {
			return in.SessionIDs
		}
	}
	return nil
}
