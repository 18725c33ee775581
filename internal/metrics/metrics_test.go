package metrics_test

import (
	"errors"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/metrics"
)

// BenchmarkTurn records what a brain records for one tool turn (a turn, two statuses, two model requests, a
// provisioning, a tool call, six appends) into Prometheus: the metrics' cost per turn.
func BenchmarkTurn(b *testing.B) {
	r := metrics.New()
	brain := r.Brain("bwrap")
	b.ReportAllocs()
	for b.Loop() {
		brain.Turn()
		brain.Status("running")
		brain.ModelRequest("claude-sonnet-4-5", 800*time.Millisecond, "", 1200, 40, 0, 900)
		brain.Provisioned("bwrap", 90*time.Millisecond, nil)
		brain.ToolCall("bash", "hands", 20*time.Millisecond, false)
		brain.ModelRequest("claude-sonnet-4-5", 600*time.Millisecond, "", 1300, 12, 0, 1100)
		brain.Status("idle")
		for range 6 {
			brain.StoreAppend(time.Millisecond, nil)
		}
	}
}

// BenchmarkTurnFailed is BenchmarkTurn's failure path: an overloaded request and a failed provisioning.
func BenchmarkTurnFailed(b *testing.B) {
	r := metrics.New()
	brain := r.Brain("bwrap")
	err := errors.New("x")
	b.ReportAllocs()
	for b.Loop() {
		brain.ModelRequest("claude-sonnet-4-5", time.Second, "overloaded", 0, 0, 0, 0)
		brain.Provisioned("bwrap", time.Second, err)
	}
}
