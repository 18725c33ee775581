package store

import (
	"context"
)

// StatsStore counts what the metrics show at each scrape.
type StatsStore interface {
	// Stats counts the sessions by status (archived ones left out) and the work items waiting for a worker.
	Stats(ctx context.Context) (*Stats, error)
}

// Stats are the counts of StatsStore.Stats.
type Stats struct {
	// Sessions counts the sessions not archived, by status (idle, running, rescheduling, terminated).
	Sessions map[string]int
	// WorkQueued counts the work items of every self-hosted environment that are queued and not delivered.
	WorkQueued int
}
