package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/corralhq/corral/internal/store"
)

// Stream previews travel as notifications on the schema's preview channel, one per preview, with the payload
// "<origin> <session id> <preview>". Every Store's listener hears them all and hands them to its local
// subscribers; the publishing Store has already delivered its own (origin) locally, at once, so that a preview
// published before an append reaches this process's subscribers before the append's wake-up.

// maxPreviewSessionID bounds the session id a preview notification carries: with the origin and the preview it
// must stay below PostgreSQL's 8000-byte payload limit.
const maxPreviewSessionID = 150

// PreviewPublish delivers the preview to this process's subscribers and NOTIFYs the other processes, returning
// once the notification is committed.
func (s *Store) PreviewPublish(ctx context.Context, sessionID string, payload []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := store.CheckPreview(payload); err != nil {
		return fmt.Errorf("preview publish: %w", err)
	}
	if len(sessionID) == 0 || len(sessionID) > maxPreviewSessionID || strings.ContainsRune(sessionID, ' ') {
		return fmt.Errorf("preview publish: session id %q: not a session id", sessionID)
	}
	s.hub.PublishPreview(sessionID, payload)
	msg := s.origin + " " + sessionID + " " + string(payload)
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, s.previewChannel, msg); err != nil {
		return s.dbErr("preview publish", err)
	}
	return nil
}

// PreviewSubscribe returns a channel of the session's previews, published in this process or another.
func (s *Store) PreviewSubscribe(sessionID string) (<-chan []byte, func()) {
	return s.hub.SubscribePreviews(sessionID)
}

// receivePreview hands a preview notification from another Store to the local subscribers.
func (s *Store) receivePreview(msg string) {
	origin, rest, ok := strings.Cut(msg, " ")
	if !ok || origin == s.origin {
		return
	}
	sessionID, payload, ok := strings.Cut(rest, " ")
	if !ok || !s.hub.HasPreviewSubscribers(sessionID) {
		return
	}
	s.hub.PublishPreview(sessionID, []byte(payload))
}
