package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRuns are three runs' made-up figures: what the publication is made
// of, without the 40 minutes of the trials.
func fakeRuns(c config) *results {
	res := &results{faults: 189}
	for i := range c.runs {
		d := time.Duration(i) * 100 * time.Millisecond
		r := &run{byK: map[int]*perK{}, outage: map[string]outcome{
			"quorum":   {},
			"mutex":    {handovers: 1, cancelled: 1, idle: 110*time.Second + d, back: 4 * time.Second},
			"baseline": {handovers: 1, cancelled: 1, idle: 118*time.Second + d, back: 12 * time.Second},
		}}
		for _, k := range c.ks {
			r.byK[k] = &perK{crash: []time.Duration{13*time.Second + d, 14 * time.Second}, graceful: []time.Duration{600 * time.Millisecond, time.Second + d},
				rates: make([]rate, k)}
			for a := range r.byK[k].rates {
				r.byK[k].rates[a] = rate{leader: 720, follower: 1800 + float64(i), all: 4320}
			}
		}
		res.runs = append(res.runs, r)
	}
	return res
}

// Run on a copy of BENCHMARKS.md, the command rewrites its section and
// summary rows in place (the file has them), stamped with the commit it
// measured, and keeps every other byte; each figure is the median of the
// runs with their range and how many.
func TestQuorumbenchRewritesOnlyWhatItOwns(t *testing.T) {
	c := config{runs: 3, faults: 10, contenders: 3, parallel: 3, ks: []int{1, 3, 5}, steady: 3 * time.Minute, lease: 15 * time.Second,
		outage: 2 * time.Minute, tail: 20 * time.Second, out: "BENCHMARKS.md", commit: buildinfo.Revision(), seed: 7,
		beside: "other engineers' builds sharing the 2 cores"}
	pub := publication(c, fakeRuns(c), 41*time.Minute)
	b, err := os.ReadFile("../../../BENCHMARKS.md")
	require.NoError(t, err)
	assert.NoError(t, benchdoc.Check(string(b), pub, c.commit))

	require.Len(t, pub.Sections, 1)
	s := pub.Sections[0]
	assert.True(t, strings.HasPrefix(s, heading+"\n"), s)
	for _, want := range []string{
		"`go run ./internal/tools/quorumbench -runs 3 -faults 10 -steady 3m -accounts 1,3,5 -outage 2m -out BENCHMARKS.md` in 41m",
		"3 runs, seeds 7 to 9", "LeaseDuration 15 s (native lease)", "other engineers' builds sharing the 2 cores",
		"| `NewQuorumMutex`, 3 accounts | 13.10 s [13.00–13.20] | 14.00 s (each run) | 0.60 s (each run) | 1.10 s [1.00–1.20] | 720 (each run) | 1,801 [1,800–1,802] | 4,320 (each run) | 0 (each run) | 0 (each run) | 0.00 s (each run) | 0.00 s (each run) | 3 |",
		"| `NewQuorumMutex`, 5 accounts | 13.10 s [13.00–13.20] | 14.00 s (each run) | 0.60 s (each run) | 1.10 s [1.00–1.20] | 720 (each run) | 1,801 [1,800–1,802] | 4,320 (each run) | - | - | - | - | 3 |",
		"| the library's mutex, 1 account | 13.10 s [13.00–13.20] | 14.00 s (each run) | 0.60 s (each run) | 1.10 s [1.00–1.20] | 720 (each run) | 1,801 [1,800–1,802] | 4,320 (each run) | 1 (each run) | 1 (each run) | 110.10 s [110.00–110.20] | 4.00 s (each run) | 3 |",
		"| the reference C# sample's algorithm, 1 account | - | - | - | - | - | - | - | 1 (each run) | 1 (each run) | 118.10 s [118.00–118.20] | 12.00 s (each run) | 3 |",
	} {
		assert.Contains(t, s, want)
	}
	require.Len(t, pub.Rows, 2)
	assert.Contains(t, pub.Rows[1], "2 min down: handovers 0 (each run) / 1 (each run) / 1 (each run)")
}
