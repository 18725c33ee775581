package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// SVG renders the TTFT comparison as a grouped bar chart: for each backend and concurrency, p50 and p95 of the
// decoupled and the coupled mode.
func (r *Report) SVG() string {
	pairs := r.Pairs()
	const (
		left, right, top, bottom = 70.0, 20.0, 60.0, 70.0
		barW, gap, groupGap      = 14.0, 2.0, 26.0
		plotH                    = 320.0
	)
	groupW := 4*barW + 3*gap
	width := left + right + float64(max(len(pairs), 1))*(groupW+groupGap)
	width = math.Max(width, 560)
	height := top + plotH + bottom
	// A logarithmic axis: coupled gVisor at 100 sessions is seconds, bwrap at one session a few hundred ms.
	maxMs, minMs := 1.0, math.Inf(1)
	for _, p := range pairs {
		for _, d := range []time.Duration{p.D.TTFT.P95, p.C.TTFT.P95, p.D.TTFT.P50, p.C.TTFT.P50} {
			if v := ms(d); v > 0 {
				maxMs, minMs = math.Max(maxMs, v), math.Min(minMs, v)
			}
		}
	}
	if math.IsInf(minMs, 1) {
		minMs = 1
	}
	lo := math.Pow(10, math.Floor(math.Log10(minMs)))
	hi := math.Pow(10, math.Ceil(math.Log10(maxMs)))
	if hi <= lo {
		hi = lo * 10
	}
	y := func(v float64) float64 {
		v = math.Max(v, lo)
		return top + plotH - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
	}
	var ticks []float64
	for dec := lo; dec <= hi*1.001; dec *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := dec * m; v <= hi*1.001 {
				ticks = append(ticks, v)
			}
		}
	}

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%.0f" y="20" font-size="14" font-weight="bold">Time to first token: decoupled (lazy hands) vs coupled (eager hands)</text>`+"\n", left)
	p(`<text x="%.0f" y="36" fill="#555">fake model TTFT %s; %s; milliseconds, log scale</text>`+"\n", left, r.ModelTTFT, html.EscapeString(r.Machine))
	for _, v := range ticks {
		p(`<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, y(v), y(v))
		p(`<text x="%.0f" y="%.1f" text-anchor="end" fill="#333">%g</text>`+"\n", left-6, y(v)+4, v)
	}
	colors := []string{"#1f77b4", "#ff7f0e", "#9ecae1", "#fdd0a2"}
	labels := []string{"decoupled p50", "coupled p50", "decoupled p95", "coupled p95"}
	for i, pr := range pairs {
		x0 := left + groupGap/2 + float64(i)*(groupW+groupGap)
		vals := []time.Duration{pr.D.TTFT.P50, pr.C.TTFT.P50, pr.D.TTFT.P95, pr.C.TTFT.P95}
		for j, v := range vals {
			x := x0 + float64(j)*(barW+gap)
			p(`<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" fill="%s"><title>%s %d sessions %s: %s ms</title></rect>`+"\n",
				x, y(ms(v)), barW, top+plotH-y(ms(v)), colors[j], html.EscapeString(pr.Backend), pr.Concurrency, labels[j], Ms(v))
		}
		cx := x0 + groupW/2
		p(`<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", cx, top+plotH+16, html.EscapeString(pr.Backend))
		p(`<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">×%d</text>`+"\n", cx, top+plotH+30, pr.Concurrency)
		p(`<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s</text>`+"\n", cx, top+plotH+44, Ratio(pr.D.TTFT.P50, pr.C.TTFT.P50))
	}
	p(`<text x="%.0f" y="%.0f" text-anchor="end" fill="#555">sessions</text>`+"\n", left-6, top+plotH+30)
	p(`<text x="%.0f" y="%.0f" text-anchor="end" fill="#555">ratio p50</text>`+"\n", left-6, top+plotH+44)
	for j, l := range labels {
		x := left + float64(j)*115
		p(`<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", x, height-14, colors[j], x+14, height-5, l)
	}
	if len(pairs) == 0 {
		p(`<text x="%.0f" y="%.0f" fill="#a00">no TTFT comparison was measured</text>`+"\n", left, top+plotH/2)
	}
	p("</svg>\n")
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
