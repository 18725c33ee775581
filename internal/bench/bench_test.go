package bench

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"
)

func dms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose: Summarize sorts a copy
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := Summarize(ds)
	if d.N != 100 || d.P50 != 50*time.Millisecond || d.P95 != 95*time.Millisecond || d.P99 != 99*time.Millisecond ||
		d.Max != 100*time.Millisecond || d.Mean != 50500*time.Microsecond {
		t.Fatalf("Summarize(1..100 ms) = %+v", d)
	}
	if ds[0] != 100*time.Millisecond {
		t.Fatal("Summarize sorted its input")
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{[]time.Duration{7}, 99, 7},
		{[]time.Duration{1, 2}, 50, 1},
		{[]time.Duration{1, 2}, 51, 2},
		{[]time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95, 10},
		{[]time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
	} {
		if got := Percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
	if (Summarize(nil) != Dist{}) {
		t.Error("Summarize(nil) is not zero")
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{dms(0.4567): "0.46", dms(12.34): "12.3", dms(1234.6): "1235", -dms(3): "-3.00"} {
		if got := Ms(d); got != want {
			t.Errorf("Ms(%v) = %q, want %q", d, got, want)
		}
	}
	if Ratio(1, 0) != "n/a" || Ratio(dms(1), dms(4)) != "0.25" {
		t.Error("Ratio")
	}
}

func TestSplice(t *testing.T) {
	doc := "# Benchmarks\n\n## Store\n\nfigures\n"
	once := Splice(doc, "## End to end\n\nv1")
	if !strings.HasPrefix(once, doc) || !strings.Contains(once, BeginMarker) || !strings.Contains(once, "v1") {
		t.Fatalf("first splice:\n%s", once)
	}
	twice := Splice(once+"\n## Later section\n", "## End to end\n\nv2")
	if strings.Contains(twice, "v1") || !strings.Contains(twice, "v2") || !strings.Contains(twice, "## Later section") ||
		!strings.HasPrefix(twice, doc) || strings.Count(twice, BeginMarker) != 1 {
		t.Fatalf("second splice:\n%s", twice)
	}
}

func sampleReport() *Report {
	cell := func(backend, mode string, n int, ttft, over float64) Cell {
		return Cell{Backend: backend, Mode: mode, Concurrency: n,
			TTFT: Dist{N: 10, P50: dms(ttft), P95: dms(ttft * 1.5), P99: dms(ttft * 2)}, Overhead: Dist{N: 10, P50: dms(over), P95: dms(over * 2)},
			Model: Dist{N: 10, P50: dms(300)}}
	}
	phased := cell("bwrap", Decoupled, 1, 305, 5)
	phased.Phases[PhaseWake] = Dist{N: 1, P50: dms(2)}
	return &Report{
		Started: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), Command: "corral bench", Machine: "2 vCPU <test> & co",
		ModelTTFT: dms(300), ToolShare: 0.5, PerSlot: map[int]int{1: 30, 100: 2},
		Cells: []Cell{
			phased, cell("bwrap", Coupled, 1, 340, 40),
			cell("bwrap", Decoupled, 100, 310, 4), cell("bwrap", Coupled, 100, 900, 600),
			cell("gvisor", Decoupled, 1, 305, 5), // no coupled counterpart: not a pair
		},
		Hands:    []HandsResult{{Backend: "bwrap", Provision: Dist{N: 3, P50: dms(10)}, Ready: Dist{N: 3, P50: dms(30)}, Exec: Dist{N: 9, P50: dms(0.5)}}},
		Log:      &LogResult{AppendsPerSec: 5000, Writers: 32, CommitsPerSec: 400, WritesPerCommit: 12.5, Subscribers: 100, Events: 10, Delivery: Dist{N: 1000, P50: dms(3)}},
		Scale:    []ScaleStep{{Sessions: 500, Overhead: Dist{P95: dms(20)}}, {Sessions: 1000, Overhead: Dist{P95: dms(80)}}},
		ScaleMax: 500,
		Memory:   &MemoryResult{Sessions: 100, HeapPerSession: 2048},
		Failover: &FailoverResult{LeaseTTL: 2 * time.Second, Resume: []time.Duration{2 * time.Second}, Complete: []time.Duration{3 * time.Second}},
		Skipped:  []string{"backend oci: runc is not installed"},
	}
}

func TestGoals(t *testing.T) {
	r := sampleReport()
	if got := len(r.Pairs()); got != 2 {
		t.Fatalf("%d pairs, want 2", got)
	}
	met := map[string]bool{}
	for _, g := range r.Goals() {
		met[g.Name] = g.Met
	}
	want := map[string]bool{
		"TTFT decoupled/coupled, bwrap, 100 sessions":          false, // 0.34 p50 but 0.52 p95
		"platform overhead, bwrap, 100 sessions":               true,
		"concurrent active sessions with p95 overhead < 50 ms": false,
		"failover (SIGKILL to resumed in another brain)":       true,
	}
	if len(met) != len(want) {
		t.Errorf("goals = %v, want %v", met, want)
	}
	for name, w := range want {
		if got, ok := met[name]; !ok || got != w {
			t.Errorf("goal %q met = %v (present %v), want %v", name, got, ok, w)
		}
	}
}

func TestRender(t *testing.T) {
	r := sampleReport()
	md := r.Markdown("bench.svg")
	for _, want := range []string{"| bwrap | 100 | 310 / 465 / 620 | 900 / 1350 / 1800 | 0.34 | 0.34 |", "![TTFT", "### Closing note",
		"runc is not installed", "Largest level held: **500**", "; 400 group commits/s of 12.5 writes on average.", "2.0 KiB", "| bwrap | decoupled | 1 | 2.00 / 0.00 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// A store that does not report its commits: the appends line says nothing of them.
	noCommits := *r.Log
	noCommits.CommitsPerSec, noCommits.WritesPerCommit = 0, 0
	if note := commitNote(noCommits); note != "" {
		t.Errorf("commitNote without commits = %q, want none", note)
	}
	var sb strings.Builder
	r.WriteSummary(&sb)
	if !strings.Contains(sb.String(), "bwrap    100") || !strings.Contains(sb.String(), "goal") {
		t.Errorf("summary:\n%s", sb.String())
	}
	svg := r.SVG()
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
			}
			break
		}
	}
	if strings.Count(svg, "<rect") < 2*4+1 {
		t.Errorf("SVG has too few bars:\n%s", svg)
	}
	empty := (&Report{}).SVG()
	if !strings.Contains(empty, "no TTFT comparison") {
		t.Error("empty SVG does not say it is empty")
	}
}
