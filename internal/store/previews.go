package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"unicode/utf8"
)

// PreviewMaxBytes bounds one preview payload: what a PostgreSQL notification carries, less room for the
// session id. Publishers split bigger previews (a long text fragment goes as several deltas).
const PreviewMaxBytes = 7800

// PreviewStore carries stream previews: event_start / event_delta frames a brain publishes while a model answer
// streams, before the answer's events are appended. Previews are ephemeral and best effort: never stored, not
// replayed, dropped for a subscriber that does not keep up, lost while a connection is down. The final event
// always comes through the log, so a client that misses previews misses nothing but latency.
type PreviewStore interface {
	// PreviewPublish delivers payload (UTF-8 text without NUL bytes, at most PreviewMaxBytes; in practice one
	// JSON object) to the session's current preview subscribers, in this process and, with CrossProcessNotify,
	// in others. It returns once the preview is handed over (for postgres: its notification committed), so
	// previews published before an append reach a subscriber before the append's wake-up. Having no
	// subscriber is not an error.
	PreviewPublish(ctx context.Context, sessionID string, payload []byte) error
	// PreviewSubscribe returns a channel that receives the session's previews in publication order (a slow
	// reader's channel drops new previews while full, rather than block publishers), and a function that ends
	// the subscription. The channel is never closed.
	PreviewSubscribe(sessionID string) (<-chan []byte, func())
}

// CheckPreview validates a preview payload before an adapter publishes it.
func CheckPreview(payload []byte) error {
	switch {
	case len(payload) == 0:
		return errors.New("empty preview")
	case len(payload) > PreviewMaxBytes:
		return fmt.Errorf("preview of %d bytes exceeds %d", len(payload), PreviewMaxBytes)
	case !utf8.Valid(payload) || bytes.IndexByte(payload, 0) >= 0:
		return errors.New("preview is not UTF-8 text without NUL bytes")
	}
	return nil
}
