package shardchaos

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"sort"
	"strings"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
)

// Marker is a moment to mark on the timeline (a cold start, a join, a
// kill), at a CLOCK_MONOTONIC stamp.
type Marker struct {
	Mono  int64
	Label string
}

// SVG layout, in px.
const (
	svgW      = 1000.0
	svgH      = 420.0
	svgLeft   = 60.0
	svgRight  = 110.0
	svgTop    = 40.0
	svgBottom = 40.0
)

// lanePalette colours the instances' lines; more lanes reuse it.
var lanePalette = []string{"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac", "#1b9e77", "#7570b3"}

// OwnershipSVG draws how many shards each instance ran over time, from a
// run's records, with markers: a band per instance, stacked, so that each
// band's height is the instance's count and the top edge is every shard
// running.
func OwnershipSVG(records []Record, title string, markers []Marker) []byte {
	recs := append([]Record(nil), records...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Mono < recs[j].Mono })
	var start, end int64
	for _, r := range recs {
		if r.Kind == chaos.KindSpawn && start == 0 {
			start = r.Mono
		}
		if r.Kind == chaos.KindShutdown {
			end = r.Mono
		}
	}
	if end == 0 && len(recs) > 0 {
		end = recs[len(recs)-1].Mono
	}
	if end <= start {
		end = start + 1
	}
	// Each lane's count, as steps.
	type step struct {
		at int64
		n  int
	}
	counts := map[string]int{}
	steps := map[string][]step{}
	running := map[string]map[string]bool{} // lane -> shards
	var lanes []string
	set := func(lane string, at int64) {
		steps[lane] = append(steps[lane], step{at, counts[lane]})
	}
	for _, r := range recs {
		if r.Mono > end {
			break
		}
		if r.Who == "harness" || r.Who == "" {
			continue
		}
		if _, ok := steps[r.Who]; !ok && (r.Kind == chaos.KindSpawn || r.Kind == chaos.KindStart) {
			lanes = append(lanes, r.Who)
			steps[r.Who] = []step{{r.Mono, 0}}
			running[r.Who] = map[string]bool{}
		}
		switch r.Kind {
		case chaos.KindStart:
			if !running[r.Who][r.Shard] {
				running[r.Who][r.Shard] = true
				counts[r.Who]++
				set(r.Who, r.Mono)
			}
		case chaos.KindEnd:
			if running[r.Who][r.Shard] {
				delete(running[r.Who], r.Shard)
				counts[r.Who]--
				set(r.Who, r.Mono)
			}
		case chaos.KindExit:
			if counts[r.Who] > 0 {
				clear(running[r.Who])
				counts[r.Who] = 0
				set(r.Who, r.Mono)
			}
		}
	}
	sort.Strings(lanes)
	plotW, plotH := svgW-svgLeft-svgRight, svgH-svgTop-svgBottom
	x := func(m int64) float64 { return svgLeft + plotW*float64(m-start)/float64(end-start) }
	// Bands stacked in lane order: sample every lane's count on a grid
	// fine enough for the plot's width.
	const samples = 800
	at := make([]int64, samples+1)
	for i := range at {
		at[i] = start + (end-start)*int64(i)/samples
	}
	count := make([][]int, len(lanes))
	for li, lane := range lanes {
		count[li] = make([]int, len(at))
		k, n := 0, 0
		for i, t := range at {
			for k < len(steps[lane]) && steps[lane][k].at <= t {
				n = steps[lane][k].n
				k++
			}
			count[li][i] = n
		}
	}
	peakSum := 1
	for i := range at {
		sum := 0
		for li := range lanes {
			sum += count[li][i]
		}
		peakSum = max(peakSum, sum)
	}
	yMax := float64(peakSum) * 1.08
	y := func(n int) float64 { return svgTop + plotH*(1-float64(n)/yMax) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14">%s</text>`+"\n", svgLeft, esc(title))
	// Bands, bottom to top.
	below := make([]int, len(at))
	for li, lane := range lanes {
		colour := lanePalette[li%len(lanePalette)]
		var pts strings.Builder
		for i := range at {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(at[i]), y(below[i]+count[li][i]))
		}
		for i := len(at) - 1; i >= 0; i-- {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(at[i]), y(below[i]))
		}
		fmt.Fprintf(&b, `<polygon fill="%s" fill-opacity="0.85" stroke="white" stroke-width="0.3" points="%s"><title>%s</title></polygon>`+"\n",
			colour, strings.TrimSpace(pts.String()), esc(lane))
		for i := range at {
			below[i] += count[li][i]
		}
		ly := svgTop + 14*float64(li)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="10" fill="%s"/>`+"\n", svgW-svgRight+12, ly-8, colour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", svgW-svgRight+30, ly+1, esc(lane))
	}
	// Axes and grid.
	for _, frac := range []float64{0, 0.25, 0.5, 0.75, 1} {
		n := int(float64(peakSum) * frac)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb" stroke-width="0.5"/>`+"\n", svgLeft, y(n), svgLeft+plotW, y(n))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%d</text>`+"\n", svgLeft-6, y(n)+4, n)
	}
	secs := float64(end-start) / 1e9
	tick := 10.0
	for secs/tick > 12 {
		tick *= 2
	}
	for t := 0.0; t <= secs; t += tick {
		xx := svgLeft + plotW*t/secs
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", xx, svgTop+plotH, xx, svgTop+plotH+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0f s</text>`+"\n", xx, svgTop+plotH+16, t)
	}
	fmt.Fprintf(&b, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">shards running, stacked by instance</text>`+"\n", svgTop+plotH/2, svgTop+plotH/2)
	// Markers.
	for i, m := range markers {
		xx := x(m.Mono)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222" stroke-dasharray="4 3"/>`+"\n", xx, svgTop-4, xx, svgTop+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#222">%s</text>`+"\n", xx+4, svgTop+6+float64(i%2)*13, esc(m.Label))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
