package chaos

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sec = int64(time.Second)

// recs builds records from (second, who, kind, term) rows.
func rec(at float64, who, kind string, term int64) Record {
	return Record{Mono: int64(at * float64(sec)), Who: who, Kind: kind, Term: term}
}

func stopped(at float64, who string, term, expires int64) Record {
	return Record{Mono: int64(at * float64(sec)), Who: who, Kind: KindStopped, Term: term, Expires: expires * sec}
}

func fault(at float64, kind, target string) Record {
	return Record{Mono: int64(at * float64(sec)), Who: "harness", Kind: KindFault, Fault: kind, Target: target}
}

func heal(at float64, kind, target string) Record {
	return Record{Mono: int64(at * float64(sec)), Who: "harness", Kind: KindHeal, Fault: kind, Target: target}
}

var tm = Timings{LeaseDuration: 15 * time.Second, RetryInterval: 2 * time.Second, Slack: 5 * time.Second, Detect: 14 * time.Second}

// Two terms that run at the same time are an overlap; one after the other
// are not.
func TestCheckFindsOverlaps(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1), rec(10, "a", KindEnd, 1),
		rec(11, "b", KindStart, 2), rec(20, "b", KindEnd, 2),
		rec(19, "c", KindStart, 3), rec(25, "c", KindEnd, 3),
	}, tm)
	require.Len(t, r.Terms, 3)
	require.Len(t, r.Overlap, 1)
	assert.Equal(t, "b", r.Overlap[0].A.Who)
	assert.Equal(t, "c", r.Overlap[0].B.Who)
	assert.Equal(t, time.Second, r.Overlap[0].Duration)
}

// A killed process's term ends when it exits; a frozen leader's overlap is
// excused and its wake time reported.
func TestCheckKillsAndFreezes(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(5, FaultKill, "a"), rec(5.01, "a", KindExit, 0), heal(5.01, FaultKill, "a"),
		rec(18, "b", KindStart, 2),
		fault(20, FaultFreeze, "b"),
		rec(33, "c", KindStart, 3),
		heal(40, FaultFreeze, "b"), rec(40.2, "b", KindEnd, 2), stopped(40.2, "b", 2, 33),
	}, tm)
	require.Len(t, r.Terms, 3)
	assert.True(t, r.Terms[0].Killed)
	assert.Empty(t, r.Overlap)
	require.Len(t, r.Frozen, 1)
	assert.InDelta(t, 200*time.Millisecond, r.Frozen[0].AfterCont, float64(time.Millisecond))
	require.Len(t, r.Faults, 2)
	assert.True(t, r.Faults[0].Changed)
	assert.InDelta(t, 13*time.Second, r.Faults[0].Gap, float64(time.Millisecond))
}

// An overlap right after storage restarted, ended by the old leader's next
// renewal, is storage's amnesia; a later one is an overlap.
func TestCheckSeparatesStorageAmnesia(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultStorageRestart, ""), heal(5, FaultStorageRestart, ""),
		rec(6, "b", KindStart, 2), rec(8, "a", KindEnd, 1), stopped(8, "a", 1, 20),
		rec(40, "c", KindStart, 3),
	}, tm)
	assert.Empty(t, r.Overlap)
	assert.Len(t, r.Amnesia, 1)

	r = Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultStorageRestart, ""), heal(5, FaultStorageRestart, ""),
		rec(6, "b", KindStart, 2), rec(30, "a", KindEnd, 1), stopped(30, "a", 1, 20),
	}, tm)
	assert.Len(t, r.Overlap, 1, "a leader that runs on long after storage came back is not excused")

	r = Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultStorageRestart, ""), heal(5, FaultStorageRestart, ""),
		rec(12, "b", KindStart, 2), rec(15, "a", KindEnd, 1), stopped(15, "a", 1, 10),
	}, tm)
	assert.Len(t, r.Overlap, 1, "a successor after the old lease expired is no amnesia: the old leader overran")
	assert.Empty(t, r.Amnesia)
}

// A short fault that did not end the term did not move leadership; no
// leader long after a fault healed is a liveness violation.
func TestCheckLeadershipMovesAndLiveness(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultResetLow, "a"), heal(5, FaultResetLow, "a"),
		fault(10, FaultBlackhole, "a"), rec(18, "a", KindEnd, 1),
		stopped(18, "a", 1, 21),
		heal(30, FaultBlackhole, "a"),
		rec(60, "b", KindStart, 2),
	}, tm)
	require.Len(t, r.Faults, 2)
	assert.False(t, r.Faults[0].Changed)
	assert.True(t, r.Faults[1].Changed)
	assert.True(t, r.Faults[1].StopMarginOK)
	assert.Equal(t, 3*time.Second, r.Faults[1].StopMargin)
	require.Len(t, r.Liveness, 1)
	assert.Equal(t, 30*time.Second, r.Liveness[0].Recovered)
}

// A thawed leader may stamp its end a hair before the harness stamps the
// SIGCONT; it is still a frozen wake, and the failover gap runs from the
// freeze to the successor's start, not to the thaw.
func TestCheckFreezeStampedJustBeforeTheHeal(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultFreeze, "a"),
		rec(16, "b", KindStart, 2),
		rec(21.9999, "a", KindEnd, 1), stopped(21.9999, "a", 1, 16),
		heal(22, FaultFreeze, "a"),
	}, tm)
	assert.Empty(t, r.Overlap)
	require.Len(t, r.Frozen, 1)
	assert.Zero(t, r.Frozen[0].AfterCont)
	require.Len(t, r.Faults, 1)
	assert.True(t, r.Faults[0].Changed)
	assert.InDelta(t, 13*time.Second, r.Faults[0].Gap, float64(time.Millisecond))
}

// A freeze excuses only a successor that took the lease after the frozen
// leader's could expire, and only if the thawed leader then returned at once.
func TestCheckFreezeExcusesNoMoreThanTheFreeze(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultFreeze, "a"),
		rec(4, "b", KindStart, 2), // while a's lease was still valid
		heal(22, FaultFreeze, "a"), rec(22, "a", KindEnd, 1), stopped(22, "a", 1, 16),
	}, tm)
	assert.Len(t, r.Overlap, 1)
	assert.Empty(t, r.Frozen)

	r = Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultFreeze, "a"),
		rec(17, "b", KindStart, 2),
		heal(22, FaultFreeze, "a"), rec(30, "a", KindEnd, 1), stopped(30, "a", 1, 16), // ran on 8 s after thawing
	}, tm)
	assert.Len(t, r.Overlap, 1)
	assert.Empty(t, r.Frozen)
}

// A freeze excuses a leader that could not act from its lease's expiry on:
// frozen again a few milliseconds after a SIGCONT, or thawed a few
// milliseconds before its successor started, it returned once it had run a
// moment. Not one that ran on unfrozen after its lease's expiry.
func TestCheckFreezeExcusesOnlyTheTimeTheProcessRan(t *testing.T) {
	// Frozen at its expiry (16), thawed at 20 for 4 ms, frozen again till
	// 27; its successor started at 18, it returned 3 ms after the second
	// SIGCONT: it ran 7 ms in all after its lease could expire.
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(10, FaultFreeze, "a"),
		rec(18, "b", KindStart, 2),
		heal(20, FaultFreeze, "a"), fault(20.004, FaultFreeze, "a"),
		heal(27, FaultFreeze, "a"), rec(27.003, "a", KindEnd, 1), stopped(27.003, "a", 1, 16),
	}, tm)
	assert.Empty(t, r.Overlap)
	require.Len(t, r.Frozen, 1)
	assert.InDelta(t, 7*time.Millisecond, r.Frozen[0].AfterCont, float64(time.Millisecond))

	// Frozen from before its expiry (16) to 20; its successor started 5 ms
	// after the SIGCONT, and it returned 1 ms after that.
	r = Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(10, FaultFreeze, "a"),
		heal(20, FaultFreeze, "a"),
		rec(20.005, "b", KindStart, 2),
		rec(20.006, "a", KindEnd, 1), stopped(20.006, "a", 1, 16),
	}, tm)
	assert.Empty(t, r.Overlap)
	require.Len(t, r.Frozen, 1)
	assert.InDelta(t, 6*time.Millisecond, r.Frozen[0].AfterCont, float64(time.Millisecond))

	// Thawed at 17, after its expiry (16), it ran on for 2 s, then was
	// frozen again while its successor started: an overlap.
	r = Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(10, FaultFreeze, "a"),
		heal(17, FaultFreeze, "a"), fault(19, FaultFreeze, "a"),
		rec(20, "b", KindStart, 2),
		heal(25, FaultFreeze, "a"), rec(25.001, "a", KindEnd, 1), stopped(25.001, "a", 1, 16),
	}, tm)
	assert.Len(t, r.Overlap, 1)
	assert.Empty(t, r.Frozen)

	// Never frozen after its expiry: no excuse, however soon it returned.
	r = Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(5, FaultFreeze, "a"), heal(8, FaultFreeze, "a"),
		rec(16.2, "b", KindStart, 2),
		rec(16.5, "a", KindEnd, 1), stopped(16.5, "a", 1, 16),
	}, tm)
	assert.Len(t, r.Overlap, 1)
	assert.Empty(t, r.Frozen)
}

// The baseline's cut-off leader runs on while its successor leads: the
// failover is still measured, and the overlap counted.
func TestCheckGapWhenTheOldLeaderDoesNotStop(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultBlackhole, "a"), heal(20, FaultBlackhole, "a"),
		rec(18, "b", KindStart, 1),
		rec(60, "a", KindEnd, 1), stopped(60, "a", 1, 16),
	}, tm)
	require.Len(t, r.Faults, 1)
	assert.True(t, r.Faults[0].Changed)
	assert.Equal(t, 15*time.Second, r.Faults[0].Gap)
	assert.False(t, r.Faults[0].StopMarginOK, "the old term did not end in the trial")
	assert.Len(t, r.Overlap, 1)
}

// A frozen leader that thaws, stops, and is followed by nobody is a liveness
// failure, though it still ran at the moment of the heal.
func TestCheckLivenessAfterAFreezeWithNoSuccessor(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultFreeze, "a"),
		heal(22, FaultFreeze, "a"), rec(22.1, "a", KindEnd, 1), stopped(22.1, "a", 1, 16),
		rec(80, "b", KindStart, 2),
	}, tm)
	require.Len(t, r.Liveness, 1)
	assert.Equal(t, 58*time.Second, r.Liveness[0].Recovered)
}

// A fault is judged by the lane it hit, not by whoever else led.
func TestCheckJudgesTheTargetLane(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1), rec(2, "a", KindEnd, 1),
		rec(2.5, "b", KindStart, 2),
		fault(3, FaultKill, "a"), heal(3, FaultKill, "a"), // the harness's view was stale
	}, tm)
	require.Len(t, r.Faults, 1)
	assert.Empty(t, r.Faults[0].LeaderAt, "a did not lead when it was hit")
	assert.False(t, r.Faults[0].Changed)
}

// The harness stopping every contender at the end of the run is no fault's
// doing.
func TestCheckShutdownIsNotAFaultsEffect(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultResetLow, "a"), heal(5, FaultResetLow, "a"),
		{Mono: 5 * sec, Who: "harness", Kind: KindShutdown},
		rec(5.01, "a", KindEnd, 1), stopped(5.01, "a", 1, 16),
	}, tm)
	require.Len(t, r.Faults, 1)
	assert.False(t, r.Faults[0].Changed)
	assert.Empty(t, r.Liveness)
}

// A leader cut off as its container is deleted that runs on past its
// successor's start is an overlap: the deletion excuses nothing, nor does a
// storage restart before it whose window would cover the leader's end.
func TestCheckExcusesNoOverlapAfterADeletion(t *testing.T) {
	deleted := Record{Mono: 4 * sec, Who: "harness", Kind: KindDelete}
	r := Check([]Record{
		rec(1, "a", KindStart, 1),
		fault(3, FaultCutOffDelete, "a"), deleted,
		rec(20, "b", KindStart, 2),
		rec(30, "a", KindEnd, 1), stopped(30, "a", 1, 33),
		heal(31, FaultCutOffDelete, "a"),
	}, tm)
	require.Len(t, r.Overlap, 1)
	assert.Equal(t, 10*time.Second, r.Overlap[0].Duration)
	assert.Empty(t, r.Amnesia)

	restarted := []Record{
		rec(1, "a", KindStart, 1),
		fault(2, FaultStorageRestart, ""), heal(3, FaultStorageRestart, ""),
		fault(3.5, FaultCutOffDelete, "a"), deleted,
		rec(10, "b", KindStart, 2),
		rec(15, "a", KindEnd, 1), stopped(15, "a", 1, 18),
		heal(16, FaultCutOffDelete, "a"),
	}
	r = Check(restarted, tm)
	assert.Len(t, r.Overlap, 1, "a deletion after the restart explains b's start as well")
	assert.Empty(t, r.Amnesia)

	r = Check(slices.DeleteFunc(slices.Clone(restarted), func(x Record) bool { return x.Kind == KindDelete }), tm)
	assert.Empty(t, r.Overlap, "without the deletion, the restart's amnesia")
	assert.Len(t, r.Amnesia, 1)
}
