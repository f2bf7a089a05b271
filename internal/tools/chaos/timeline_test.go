package chaos

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// timelineBase is an arbitrary CLOCK_MONOTONIC reading, so that the tests
// catch stamps used as if they were offsets from the run's start.
const timelineBase = int64(5000 * time.Second)

func tlAt(sec float64) int64 { return timelineBase + int64(sec*float64(time.Second)) }

// timelineReport is a two-minute run over three lanes: a term, a gap, a
// killed term, a term that overlaps the last one, which runs to the end.
func timelineReport() Report {
	t1 := TermSpan{Who: "c1", Number: 1, Start: tlAt(2), End: tlAt(30), Expires: tlAt(32), Reason: "renewal failed"}
	t2 := TermSpan{Who: "c2", Number: 2, Start: tlAt(35), End: tlAt(60), Killed: true}
	t3 := TermSpan{Who: "c3", Number: 3, Start: tlAt(60), End: tlAt(95), Expires: tlAt(96)}
	t4 := TermSpan{Who: "c1", Number: 4, Start: tlAt(94.5)}
	return Report{
		Seed:  42,
		Start: tlAt(0),
		End:   tlAt(120),
		Lanes: []string{"c1", "c2", "c3"},
		Terms: []TermSpan{t1, t2, t3, t4},
		Faults: []FaultResult{
			{Kind: FaultFreeze, Target: "c1", At: tlAt(20), Healed: tlAt(31), Detail: "hold 11s"},
			{Kind: FaultKill, Target: "c2", At: tlAt(60), Healed: tlAt(60.2), Detail: "SIGKILL"},
			{Kind: FaultStorageRestart, At: tlAt(100), Healed: tlAt(104)},
			{Kind: "odd<&>", Target: "c3", At: tlAt(80), Healed: tlAt(81)},
		},
		Overlap: []Overlap{{A: t3, B: t4, Duration: 500 * time.Millisecond}},
	}
}

// timelineSummary is what a test needs of a rendered SVG: how many elements
// carry each class, and the texts of the text elements of each class.
type timelineSummary struct {
	classes map[string]int
	texts   map[string][]string
}

// parseTimelineSVG reads every token of the SVG, failing the test if it is not
// well-formed XML.
func parseTimelineSVG(t *testing.T, svg []byte) timelineSummary {
	t.Helper()
	s := timelineSummary{classes: map[string]int{}, texts: map[string][]string{}}
	d := xml.NewDecoder(bytes.NewReader(svg))
	var textClass string // class of the enclosing text element, if in one
	sawRoot := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "SVG is not well-formed XML")
		switch tok := tok.(type) {
		case xml.StartElement:
			if !sawRoot {
				require.Equal(t, "svg", tok.Name.Local)
				require.Equal(t, "http://www.w3.org/2000/svg", tok.Name.Space)
				sawRoot = true
			}
			class := ""
			for _, a := range tok.Attr {
				if a.Name.Local == "class" {
					class = a.Value
					s.classes[class]++
				}
			}
			if tok.Name.Local == "text" {
				textClass = class
			}
		case xml.EndElement:
			if tok.Name.Local == "text" {
				textClass = ""
			}
		case xml.CharData:
			if textClass != "" {
				s.texts[textClass] = append(s.texts[textClass], string(tok))
			}
		}
	}
	require.True(t, sawRoot, "no svg element")
	return s
}

func TestWriteSVGTimeline(t *testing.T) {
	r := timelineReport()
	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, r))
	s := parseTimelineSVG(t, buf.Bytes())

	assert.Equal(t, r.Lanes, s.texts["lane"])
	assert.Equal(t, 4, s.classes["term"])
	assert.ElementsMatch(t, []string{"t1", "t2", "t3", "t4"}, s.texts["term-label"])
	assert.Equal(t, 4, s.classes["fault"])
	assert.ElementsMatch(t, []string{"freeze", "kill", "storage-restart", "odd<&>"}, s.texts["fault-label"])
	assert.Equal(t, 1, s.classes["gap"], "30-35 s has no leader")
	assert.Equal(t, 1, s.classes["overlap"])
	assert.Zero(t, s.classes["frozen"])

	out := buf.String()
	assert.Contains(t, out, "seed 42")
	assert.Contains(t, out, "odd&lt;&amp;&gt;", "text is escaped")
	assert.Contains(t, out, "url(#chaos-killed)", "the killed term is hatched")
	assert.NotContains(t, out, "<script")
	assert.NotContains(t, out, "@import")
}

func TestWriteSVGTimelineEmpty(t *testing.T) {
	for name, r := range map[string]Report{
		"zero":     {},
		"no terms": {Seed: 7, Start: tlAt(0), End: tlAt(60), Lanes: []string{"c1", "c2"}},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, WriteSVG(&buf, r))
			s := parseTimelineSVG(t, buf.Bytes())
			assert.Zero(t, s.classes["term"])
			assert.Zero(t, s.classes["fault"])
			assert.Zero(t, s.classes["gap"], "no leader before the first term is not a gap")
		})
	}
}

func TestWriteSVGTimelineNarrowTerm(t *testing.T) {
	// 50 ms is well under a pixel on a ten-minute run: drawn, not labelled.
	r := Report{Start: tlAt(0), End: tlAt(600), Lanes: []string{"c1"},
		Terms: []TermSpan{{Who: "c1", Number: 7, Start: tlAt(300), End: tlAt(300.05)}}}
	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, r))
	s := parseTimelineSVG(t, buf.Bytes())
	assert.Equal(t, 1, s.classes["term"])
	assert.Empty(t, s.texts["term-label"])
	assert.Equal(t, 1, s.classes["gap"], "after the term, to the end")
}

func TestWriteSVGTimelineWriteError(t *testing.T) {
	err := WriteSVG(timelineFailWriter{}, timelineReport())
	assert.ErrorIs(t, err, errTimelineWrite)
}

var errTimelineWrite = errors.New("disk full")

type timelineFailWriter struct{}

func (timelineFailWriter) Write([]byte) (int, error) { return 0, errTimelineWrite }

func TestTimelineGaps(t *testing.T) {
	r := timelineReport()
	assert.Equal(t, [][2]int64{{tlAt(30), tlAt(35)}}, svgGaps(r.Terms, r.End))

	// Nested and out-of-order terms, and a trailing gap to the end.
	terms := []TermSpan{
		{Start: tlAt(10), End: tlAt(20)},
		{Start: tlAt(0), End: tlAt(15)},
		{Start: tlAt(12), End: tlAt(14)},
		{Start: tlAt(25), End: tlAt(30)},
	}
	assert.Equal(t, [][2]int64{{tlAt(20), tlAt(25)}, {tlAt(30), tlAt(40)}}, svgGaps(terms, tlAt(40)))
	assert.Empty(t, svgGaps(nil, tlAt(40)))
}

func TestTimelineTickStep(t *testing.T) {
	for _, tc := range []struct{ dur, pxPerSec, want float64 }{
		{120, 7.4, 10},
		{600, 3.8, 15},
		{3600, 0.66, 120},
	} {
		assert.Equal(t, tc.want, svgTickStep(tc.dur, tc.pxPerSec), "%+v", tc)
	}
}
