package metrics_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// TestLabelsBounded: models and tool names past MaxLabelValues distinct values are counted as "other", so a
// client creating agents with ever new model ids cannot grow the registry without bound.
func TestLabelsBounded(t *testing.T) {
	r := metrics.New()
	brain := r.Brain("bwrap")
	for i := range metrics.MaxLabelValues + 50 {
		brain.ModelRequest(fmt.Sprintf("model-%d", i), time.Millisecond, "", 1, 1, 0, 0)
		brain.ToolCall(fmt.Sprintf("tool-%d", i), "mcp", time.Millisecond, false)
	}
	brain.ModelRequest("model-0", time.Millisecond, "", 1, 1, 0, 0) // a value seen before keeps its label
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for name, label := range map[string]string{"corral_model_request_duration_seconds": "model", "corral_tool_call_duration_seconds": "tool"} {
		values := map[string]uint64{}
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					values[l.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
		if len(values) != metrics.MaxLabelValues+1 || values["other"] != 50 {
			t.Errorf("%s: %d %s values, %d samples as other; want %d and 50", name, len(values), label, values["other"], metrics.MaxLabelValues+1)
		}
	}
}
