package main

import (
	"os"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Run on a copy of BENCHMARKS.md, the command rewrites its section in
// place, stamped with the commit, and keeps every other byte.
func TestShardbenchRewritesOnlyWhatItOwns(t *testing.T) {
	c := config{shards: 10000, instances: 10}
	run := func(d time.Duration) *result {
		return &result{shards: 10000, instances: 10, cold: 38 * time.Second, join: 3 * time.Second, joinShare: 909,
			joinGaps: []time.Duration{d}, killHeld: 909, killAll: 15 * time.Second, termHeld: 1000, termAll: 6 * time.Second,
			termGaps: []time.Duration{d}, floorCold: 35 * time.Second, floorJoin: 3 * time.Second, floorKill: 2 * time.Second,
			steady: steady{window: 2 * time.Minute, reqPerHour: []float64{2763}, cpuPercent: []float64{1}, rssMiB: []float64{50}, peakMiB: []float64{60}}}
	}
	runs := []*result{run(300 * time.Millisecond), run(400 * time.Millisecond), run(time.Second)}
	pub := publication(c, runs[0], nil, nil, nil, runs, 21*time.Minute)
	b, err := os.ReadFile("../../../BENCHMARKS.md")
	require.NoError(t, err)
	assert.NoError(t, benchdoc.Check(string(b), pub, buildinfo.Revision()))
}
