package main

import (
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What followed an account's outage, from the terms: a leader that
// stopped 10 s into a 120 s outage and a successor 10 s after the account
// came back (one handover, one cancellation, 110 s with no func, back in
// 10 s); a leader that led through it (nothing); a func that returned at
// the harness's shutdown does not count.
func TestOutageOutcomeCountsWhatFollowedTheFault(t *testing.T) {
	s := int64(time.Second)
	down := chaos.FaultResult{Kind: chaos.FaultAccountDown, Target: "c1", LeaderAt: "c1", At: 10 * s, Healed: 130 * s}
	shutdown := []chaos.Record{{Mono: 170 * s, Who: "harness", Kind: chaos.KindShutdown}}

	stopped := chaos.Report{Faults: []chaos.FaultResult{down}, End: 171 * s, Terms: []chaos.TermSpan{
		{Who: "c1", Number: 1, Start: 1 * s, End: 20 * s},
		{Who: "c2", Number: 2, Start: 140 * s, End: 170*s + s/2},
	}}
	out, err := outageOutcome(stopped, shutdown)
	require.NoError(t, err)
	assert.Equal(t, outcome{handovers: 1, cancelled: 1, idle: 110 * time.Second, back: 10 * time.Second}, out)

	led := chaos.Report{Faults: []chaos.FaultResult{down}, End: 171 * s, Terms: []chaos.TermSpan{
		{Who: "c1", Number: 1, Start: 1 * s, End: 170*s + s/2},
	}}
	out, err = outageOutcome(led, shutdown)
	require.NoError(t, err)
	assert.Equal(t, outcome{}, out)

	never := chaos.Report{Faults: []chaos.FaultResult{down}, End: 171 * s, Terms: []chaos.TermSpan{
		{Who: "c1", Number: 1, Start: 1 * s, End: 20 * s},
	}}
	_, err = outageOutcome(never, shutdown)
	assert.ErrorContains(t, err, "no func ran again")
	_, err = outageOutcome(chaos.Report{}, nil)
	assert.ErrorContains(t, err, "no account was taken down")
}

// The time some span covers counts an overlap once.
func TestCoveredCountsOverlapsOnce(t *testing.T) {
	assert.Equal(t, time.Duration(7), covered([][2]int64{{5, 8}, {0, 3}, {6, 7}, {2, 4}}))
	assert.Zero(t, covered(nil))
}
