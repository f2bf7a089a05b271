package chaos

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Layout in px. The width follows the run's length so that a short run is
// not a smear and a long one still fits a screen; rows have fixed heights.
const (
	svgMinWidth  = 1000
	svgMaxWidth  = 2400
	svgPxPerSec  = 6.0
	svgLabelW    = 90.0
	svgPadR      = 20.0
	svgTitleH    = 30.0
	svgAxisH     = 22.0
	svgFaultRow  = 13.0
	svgFaultRows = 3 // fault labels are staggered so that close faults stay readable
	svgLaneH     = 26.0
	svgGapH      = 16.0
	svgCharW     = 6.0 // rough advance of an 11px sans-serif glyph, to fit labels without measuring
)

const (
	svgTermColour    = "#4c78a8"
	svgKilledColour  = "#b2182b"
	svgGapColour     = "#8c8c8c"
	svgOverlapColour = "#e31a1c"
	svgFrozenColour  = "#ff7f0e"
	svgDefaultColour = "#7f7f7f"
)

// svgFaultColours keys fault kinds to colours; dark enough to read as text
// on white, and low/high variants of one fault share a hue.
var svgFaultColours = map[string]string{
	FaultKill:           svgKilledColour,
	FaultFreeze:         "#1a9cb0",
	FaultBlackhole:      "#222222",
	FaultLatencyLow:     "#9467bd",
	FaultLatencyHigh:    "#54278f",
	FaultResetLow:       "#35978f",
	FaultResetHigh:      "#01665e",
	FaultStorageRestart: "#8c510a",
	FaultGraceful:       "#2ca02c",
}

func svgFaultColour(kind string) string {
	if c, ok := svgFaultColours[kind]; ok {
		return c
	}
	return svgDefaultColour
}

// WriteSVG draws r as a timeline: a lane per contender holding its terms as
// bars, the faults as coloured lines and spans, the leaderless gaps in a row
// of their own, and overlaps (red) and frozen wakes (orange) over the lanes.
// The SVG is self-contained, with no fonts, scripts or stylesheets, so that
// it renders as an image in a browser or a GitHub README; hovering an
// element shows its details. Elements carry a class (term, fault, gap,
// overlap, frozen) by which tools and tests can find them.
func WriteSVG(w io.Writer, r Report) error {
	// An empty or instantaneous run still gets an axis to draw on.
	end := max(r.End, r.Start+int64(time.Second))
	dur := float64(end-r.Start) / 1e9
	width := min(max(svgLabelW+svgPadR+dur*svgPxPerSec, svgMinWidth), svgMaxWidth)
	c := &svgCanvas{start: r.Start, end: end, scale: (width - svgLabelW - svgPadR) / float64(end-r.Start)}

	lanes := svgLanes(r)
	laneTop := func(name string) float64 {
		return svgTitleH + svgAxisH + svgFaultRows*svgFaultRow + 4 + float64(slices.Index(lanes, name))*svgLaneH
	}
	lanesTop := laneTop(lanes[0])
	lanesBottom := lanesTop + float64(len(lanes))*svgLaneH
	gapTop := lanesBottom + 4
	plotBottom := gapTop + svgGapH
	legend, legendRows := svgLegend(r, width, plotBottom+svgAxisH+12)
	height := plotBottom + svgAxisH + 12 + float64(legendRows)*18 + 6

	c.printf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	// Hatching marks killed terms; a pattern rather than a colour so that
	// the term colour still says "a term".
	c.printf(`<defs><pattern id="chaos-killed" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">`+
		`<rect width="6" height="6" fill="%s"/><rect width="2.5" height="6" fill="%s"/></pattern></defs>`+"\n", svgTermColour, svgKilledColour)
	// An opaque background keeps the black text readable in dark themes.
	c.buf.WriteString(`<rect width="100%" height="100%" fill="#ffffff"/>` + "\n")
	c.printf(`<text x="10" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", svgEsc(fmt.Sprintf(
		"chaos run, seed %d: %.0f s, %s, %s, %s, %s, %s", r.Seed, float64(r.End-r.Start)/1e9,
		svgCount(len(r.Faults), "fault"), svgCount(len(r.Terms), "term"), svgCount(len(r.Overlap), "overlap"),
		svgCount(len(r.Frozen), "frozen wake"), svgCount(len(r.Liveness), "liveness failure"))))

	// Axis and grid.
	axisTop := svgTitleH + svgAxisH
	step := svgTickStep(dur, c.scale*1e9)
	for s := 0.0; s <= dur+1e-9; s += step {
		x := c.x(r.Start + int64(s*1e9))
		c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", x, axisTop, x, plotBottom)
		for _, y := range []float64{axisTop - 6, plotBottom + 14} {
			c.printf(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%gs</text>`+"\n", x, y, s)
		}
	}
	c.printf(`<text x="10" y="%.1f" fill="#555">faults</text>`+"\n", axisTop+svgFaultRow)

	// Lanes, striped so that a bar's lane is clear across a wide chart.
	for i, name := range lanes {
		y := laneTop(name)
		if i%2 == 0 {
			c.printf(`<rect x="0" y="%.1f" width="%.1f" height="%.1f" fill="#f4f6f8"/>`+"\n", y, width, svgLaneH)
		}
		label := name
		if runs := r.LaneLabels[name]; runs != "" {
			label += " " + runs // what the lane ran: a mixed fleet is read at a glance
		}
		c.printf(`<text class="lane" x="10" y="%.1f">%s</text>`+"\n", y+svgLaneH/2+4, svgEsc(label))
	}

	for _, t := range r.Terms {
		y := laneTop(t.Who) + 4
		tEnd, desc := t.End, ""
		switch {
		case t.End == 0:
			tEnd, desc = end, ", running at the end"
		case t.Killed:
			desc = ", killed"
		}
		if t.Reason != "" {
			desc += ": " + t.Reason
		}
		if m, ok := t.StopMargin(); ok {
			desc += fmt.Sprintf(" (stop margin %v)", m.Round(time.Millisecond))
		}
		x1, x2 := c.x(t.Start), c.x(tEnd)
		fill := svgTermColour
		if t.Killed {
			fill = "url(#chaos-killed)"
		}
		c.printf(`<g class="term"><title>%s</title>`, svgEsc(fmt.Sprintf("%s term %d: %.2f-%.2f s%s", t.Who, t.Number, c.secs(t.Start), c.secs(tEnd), desc)))
		c.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" rx="2"/>`, x1, y, max(x2-x1, 1), svgLaneH-8, fill)
		if t.Killed {
			c.printf(`<rect x="%.1f" y="%.1f" width="3" height="%.1f" fill="%s"/>`, x2-1.5, y-2, svgLaneH-4, svgKilledColour)
		}
		if t.Expires != 0 {
			// The dotted line from the end to the tick is the stop margin.
			xe := c.x(t.Expires)
			c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222" stroke-dasharray="2,2"/>`, x2, y+(svgLaneH-8)/2, xe, y+(svgLaneH-8)/2)
			c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222" stroke-width="1.5"/>`, xe, y-2, xe, y+svgLaneH-6)
		}
		if label := fmt.Sprintf("t%d", t.Number); x2-x1 >= float64(len(label))*svgCharW+6 {
			c.printf(`<text class="term-label" x="%.1f" y="%.1f" text-anchor="middle" fill="#fff" font-weight="bold">%s</text>`, (x1+x2)/2, y+svgLaneH/2, label)
		}
		c.printf("</g>\n")
	}

	// Faults go over the terms, translucent, so that their lines show
	// across the bars they hit.
	faults := slices.SortedFunc(slices.Values(r.Faults), func(a, b FaultResult) int { return cmp.Compare(a.At, b.At) })
	var rowEnd [svgFaultRows]float64
	for _, f := range faults {
		col := svgFaultColour(f.Kind)
		x1, x2 := c.x(f.At), c.x(max(f.Healed, f.At))
		y1, y2 := lanesTop, lanesBottom
		if f.Target != "" {
			y1 = laneTop(f.Target)
			y2 = y1 + svgLaneH
		}
		// Put the label in the first row it fits, else where it collides least.
		row := 0
		for i := range rowEnd {
			if rowEnd[i] < x1 {
				row = i
				break
			}
			if rowEnd[i] < rowEnd[row] {
				row = i
			}
		}
		rowEnd[row] = x1 + 3 + float64(len(f.Kind))*svgCharW
		ly := axisTop + float64(row+1)*svgFaultRow - 2
		tip := fmt.Sprintf("%s on %s at %.2f s, healed at %.2f s", f.Kind, cmp.Or(f.Target, "storage"), c.secs(f.At), c.secs(f.Healed))
		if f.Detail != "" {
			tip += " (" + f.Detail + ")"
		}
		c.printf(`<g class="fault"><title>%s</title>`, svgEsc(tip))
		c.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.15"/>`, x1, y1, x2-x1, y2-y1, col)
		c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-opacity="0.6" stroke-dasharray="1,2"/>`, x1, ly, x1, y1, col)
		c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`, x1, y1, x1, y2, col)
		c.printf(`<text class="fault-label" x="%.1f" y="%.1f" fill="%s" font-size="10" font-weight="bold">%s</text></g>`+"\n", x1+3, ly, col, svgEsc(f.Kind))
	}

	c.printf(`<text x="10" y="%.1f" fill="#555">no leader</text>`+"\n", gapTop+svgGapH/2+4)
	for _, g := range svgGaps(r.Terms, r.End) {
		// A floor on widths keeps sub-second gaps visible on a long run.
		x1, x2 := c.x(g[0]), c.x(g[1])
		c.printf(`<rect class="gap" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>no leader %.2f-%.2f s (%v)</title></rect>`+"\n",
			x1, gapTop, max(x2-x1, 2), svgGapH, svgGapColour, c.secs(g[0]), c.secs(g[1]), time.Duration(g[1]-g[0]).Round(time.Millisecond))
	}

	band := func(class, col string, a, b TermSpan, what string) {
		from, to := max(a.Start, b.Start), min(cmp.Or(a.End, end), cmp.Or(b.End, end))
		ya, yb := laneTop(a.Who), laneTop(b.Who)
		x1, x2 := c.x(from), c.x(to)
		c.printf(`<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.35" stroke="%s" stroke-width="1.5"><title>%s</title></rect>`+"\n",
			class, x1-1, min(ya, yb)+1, max(x2-x1, 2)+2, max(ya, yb)-min(ya, yb)+svgLaneH-2, col, col, svgEsc(fmt.Sprintf(
				"%s: %s t%d and %s t%d, %.2f-%.2f s", what, a.Who, a.Number, b.Who, b.Number, c.secs(from), c.secs(to))))
	}
	for _, o := range r.Overlap {
		band("overlap", svgOverlapColour, o.A, o.B, "overlap")
	}
	for _, fw := range r.Frozen {
		band("frozen", svgFrozenColour, fw.Frozen, fw.Newer, "frozen wake")
	}

	c.buf.WriteString(legend)
	c.printf("</svg>\n")
	_, err := c.buf.WriteTo(w)
	return err
}

// svgCanvas maps CLOCK_MONOTONIC stamps to x and collects the output, so
// that a writer error is reported once, at the end.
type svgCanvas struct {
	buf        bytes.Buffer
	start, end int64
	scale      float64 // px per ns
}

func (c *svgCanvas) x(t int64) float64 {
	return svgLabelW + float64(min(max(t, c.start), c.end)-c.start)*c.scale
}

func (c *svgCanvas) secs(t int64) float64 { return float64(t-c.start) / 1e9 }

func (c *svgCanvas) printf(format string, args ...any) { fmt.Fprintf(&c.buf, format, args...) }

// svgLanes is r.Lanes and then any lane a term, fault or overlap names that
// r.Lanes lacks, so that nothing is dropped from the drawing; at least one
// lane, so that an empty run still has a plot.
func svgLanes(r Report) []string {
	lanes := slices.Clone(r.Lanes)
	add := func(name string) {
		if name != "" && !slices.Contains(lanes, name) {
			lanes = append(lanes, name)
		}
	}
	for _, t := range r.Terms {
		add(t.Who)
	}
	for _, f := range r.Faults {
		add(f.Target)
	}
	for _, o := range r.Overlap {
		add(o.A.Who)
		add(o.B.Who)
	}
	for _, fw := range r.Frozen {
		add(fw.Frozen.Who)
		add(fw.Newer.Who)
	}
	if len(lanes) == 0 {
		lanes = []string{""}
	}
	return lanes
}

// svgGaps returns the intervals, after the first term started and before
// end, in which no term ran.
func svgGaps(terms []TermSpan, end int64) [][2]int64 {
	spans := make([][2]int64, 0, len(terms))
	for _, t := range terms {
		spans = append(spans, [2]int64{t.Start, cmp.Or(t.End, end)})
	}
	slices.SortFunc(spans, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var gaps [][2]int64
	covered := int64(0) // the end of the terms seen so far
	for i, s := range spans {
		if i > 0 && s[0] > covered {
			gaps = append(gaps, [2]int64{covered, s[0]})
		}
		covered = max(covered, s[1])
	}
	if len(spans) > 0 && covered < end {
		gaps = append(gaps, [2]int64{covered, end})
	}
	return gaps
}

// svgTickStep picks the smallest round step, in seconds, that keeps axis
// labels at least 50 px apart.
func svgTickStep(dur, pxPerSec float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600} {
		if s*pxPerSec >= 50 {
			return s
		}
	}
	return max(3600, dur/10)
}

// svgLegend draws the legend from y down, wrapping at width, and returns it
// with the number of rows it took. Only the fault kinds in r are listed.
func svgLegend(r Report, width, y float64) (string, int) {
	type item struct {
		label, fill string
		w           float64
	}
	items := []item{
		{"term", svgTermColour, 14}, {"killed term", "url(#chaos-killed)", 14},
		{"lease could expire", "#222", 2}, {"no leader", svgGapColour, 14},
		{"overlap", svgOverlapColour, 14}, {"frozen wake", svgFrozenColour, 14},
	}
	var seen []string
	for _, f := range r.Faults {
		if !slices.Contains(seen, f.Kind) {
			seen = append(seen, f.Kind)
			items = append(items, item{"fault: " + f.Kind, svgFaultColour(f.Kind), 14})
		}
	}
	var b strings.Builder
	x, rows := 10.0, 1
	for _, it := range items {
		w := 14 + 6 + float64(len(it.label))*svgCharW + 16
		if x+w > width-svgPadR && x > 10 {
			x, y, rows = 10, y+18, rows+1
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.0f" height="10" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			x+(14-it.w)/2, y-9, it.w, it.fill, x+20, y, svgEsc(it.label))
		x += w
	}
	return b.String(), rows
}

func svgCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func svgEsc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
