// Package bench is `corral bench`: Run starts real servers (internal/server, the assembly corral serve runs) and
// drives them over HTTP and SSE the way a client does, measures time to first token, platform overhead, hands,
// the log, scale, idle memory and failover, and renders the report (markdown and an SVG chart). The composition
// root (cmd/corral) maps the flags to a Config and hands in the backends (its backend table), the store opener
// and the model adapter; this package picks none of them. The fake model server lives in fake.go alone.
package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Dist summarises a sample of durations. Percentiles are nearest-rank: Pxx is the smallest sample that at
// least xx% of the samples do not exceed.
type Dist struct {
	N                  int
	P50, P95, P99, Max time.Duration
	Mean               time.Duration
}

// Summarize computes the distribution of ds (which it does not modify).
func Summarize(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Dist{
		N: len(s), P50: Percentile(s, 50), P95: Percentile(s, 95), P99: Percentile(s, 99), Max: s[len(s)-1],
		Mean: sum / time.Duration(len(s)),
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of sorted, or 0 when it is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Ms formats a duration in milliseconds with a precision that suits its size.
func Ms(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch a := math.Abs(ms); {
	case a >= 100:
		return fmt.Sprintf("%.0f", ms)
	case a >= 10:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.2f", ms)
	}
}

// Ratio formats a/b with two decimals, or "n/a" when b is zero.
func Ratio(a, b time.Duration) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}
