package sqlite

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/internal/store"
)

// PreviewPublish hands a preview to the session's preview subscribers in this process (SQLite serves one
// process). It never blocks on a subscriber.
func (s *Store) PreviewPublish(ctx context.Context, sessionID string, payload []byte) error {
	if err := store.CheckPreview(payload); err != nil {
		return fmt.Errorf("sqlite: preview for session %s: %w", sessionID, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.hub.PublishPreview(sessionID, payload)
	return nil
}

// PreviewSubscribe returns a channel of the session's previews published through this Store.
func (s *Store) PreviewSubscribe(sessionID string) (<-chan []byte, func()) {
	return s.hub.SubscribePreviews(sessionID)
}
