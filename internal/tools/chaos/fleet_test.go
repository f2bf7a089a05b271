package chaos

import (
	"testing"
	"time"

	"github.com/blobelect/leaderelection"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Timing lists are cycled over the lanes, so one flag mixes lease kinds;
// each lane's defaults are the library's for its lease.
func TestParseFleetCyclesTimingsOverLanes(t *testing.T) {
	fleet, err := ParseFleet(5, "library", "3s,15s,5s", "", "1s,2s", "", "")
	require.NoError(t, err)
	require.Len(t, fleet, 5)
	var labels []string
	for _, c := range fleet {
		labels = append(labels, c.Label())
	}
	assert.Equal(t, []string{"etag 3s/1s", "native 15s", "etag 5s/1s", "etag 3s", "native 15s/1s"}, labels, "each list cycles on its own")

	lt, err := fleet[0].timings()
	require.NoError(t, err)
	assert.Equal(t, laneTimings{Kind: leaderelection.ETagLease, LeaseDuration: 3 * time.Second, RenewInterval: time.Second,
		RetryInterval: time.Second, StopMargin: time.Second, RequestTimeout: time.Second}, lt)

	_, err = ParseFleet(3, "baseline", "5s", "", "", "", "")
	assert.ErrorContains(t, err, "baseline")
	_, err = ParseFleet(3, "library", "2s", "", "", "", "")
	assert.ErrorContains(t, err, "LeaseDuration", "the library's own validation names the field")
	_, err = ParseFleet(3, "etcd", "2500ms", "", "", "", "")
	assert.ErrorContains(t, err, "whole seconds")
	_, err = etcdFleet([]Contender{{Algo: AlgoEtcd}, {}})
	assert.Error(t, err, "etcd and Azurite contenders cannot share a run")
}

// A mixed fleet is judged by its slowest contender: the liveness bound must
// hold whichever kind led.
func TestTimingsOfAMixedFleetTakeTheLongestLease(t *testing.T) {
	tm, err := TimingsOf([]Contender{{LeaseDuration: 3 * time.Second, RetryInterval: time.Second}, {}})
	require.NoError(t, err)
	assert.Equal(t, 15*time.Second, tm.LeaseDuration)
	assert.Equal(t, 2*time.Second, tm.RetryInterval)
	assert.Equal(t, 5*time.Second+4*time.Second+5*time.Second, tm.Detect, "renew interval + request timeout of the default lease, + slack")
	assert.Equal(t, TimingsFor(AlgoLibrary), Timings{LeaseDuration: 15 * time.Second, RetryInterval: 2 * time.Second, Slack: 5 * time.Second, Detect: 14 * time.Second})
}

// Faults past the lease last past the target's own lease; short resets
// scale with how long the target can go without a confirmed renewal, so
// they stay below what it tolerates at every lease length, and so does the
// time from a cut to the container's deletion.
func TestFaultsScaleWithTheTargetsLease(t *testing.T) {
	def, err := Contender{}.timings()
	require.NoError(t, err)
	etag3, err := Contender{LeaseDuration: 3 * time.Second, RetryInterval: time.Second}.timings()
	require.NoError(t, err)

	assert.Equal(t, time.Second, holdFor(FaultResetLow, 0, def))
	assert.Equal(t, 4*time.Second, holdFor(FaultResetLow, 1, def))
	assert.Equal(t, time.Second/7, holdFor(FaultResetLow, 0, etag3))
	assert.Equal(t, 4*time.Second/7, holdFor(FaultResetLow, 1, etag3))
	for _, kind := range []string{FaultFreeze, FaultBlackhole, FaultLatencyHigh, FaultResetHigh} {
		assert.Equal(t, 5*time.Second, holdFor(kind, 0, etag3), kind)
		assert.Equal(t, 21*time.Second, holdFor(kind, 1, def), kind)
	}
	assert.Equal(t, 6*time.Second, holdFor(FaultLatencyLow, 0, etag3))
	assert.Zero(t, holdFor(FaultKill, 0.5, etag3))
	// A cut-off leader's container goes before the leader's deadline, even
	// at the least a 3 s ETag lease keeps its term without a renewal.
	assert.Less(t, holdFor(FaultCutOffDelete, 0.999, etag3), etag3.LeaseDuration-etag3.StopMargin-etag3.RenewInterval)
}

// The moment a lease could pass to another is the checker's own, from the
// leader's requests (on its end record), not the algorithm's claim (on
// stopped); records from before it was kept on end still check.
func TestCheckJudgesTheStopMarginByTheLeadersRequests(t *testing.T) {
	end := rec(18, "a", KindEnd, 1)
	end.Expires = 19 * sec
	claim := stopped(18, "a", 1, 0)
	claim.Claimed = 21 * sec
	r := Check([]Record{
		{Mono: 0, Who: "a", Kind: KindSpawn, Contender: "etag 5s/1s"},
		rec(1, "a", KindStart, 1),
		fault(10, FaultBlackhole, "a"), end, claim,
		rec(19.5, "b", KindStart, 2),
		heal(20, FaultBlackhole, "a"),
	}, tm)
	require.Len(t, r.Terms, 2)
	assert.Equal(t, 19*sec, r.Terms[0].Expires)
	assert.Equal(t, 21*sec, r.Terms[0].Claimed)
	require.Len(t, r.Faults, 1)
	assert.Equal(t, time.Second, r.Faults[0].StopMargin)
	assert.Equal(t, "etag 5s/1s", r.Faults[0].TargetRuns)
	assert.Empty(t, r.Overlap)

	r = Check([]Record{
		rec(1, "a", KindStart, 1), fault(10, FaultBlackhole, "a"),
		rec(18, "a", KindEnd, 1), stopped(18, "a", 1, 21),
		heal(20, FaultBlackhole, "a"),
	}, tm)
	assert.Equal(t, 3*time.Second, r.Faults[0].StopMargin, "an older run's expiry, on stopped")
}
