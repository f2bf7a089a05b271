package chaos

import (
	"testing"

	"github.com/blobelect/leaderelection/internal/tools/tamper"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func malformed(at float64, c tamper.Case) Record {
	return Record{Mono: int64(at * float64(sec)), Who: "harness", Kind: KindMalformed, Blob: "b", Detail: string(c)}
}

func repair(at float64, term int64) Record {
	return Record{Mono: int64(at * float64(sec)), Who: "harness", Kind: KindRepair, Blob: "b", Term: term}
}

func deleted(at float64, blob string) Record {
	return Record{Mono: int64(at * float64(sec)), Who: "harness", Kind: KindDelete, Blob: blob}
}

// Terms must grow from start to start over the whole run: a term repeated,
// or lower, after a deletion too, is reported; so is a term below 1.
func TestCheckTermsGrowAcrossTheRun(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1), rec(2, "a", KindEnd, 1),
		rec(3, "b", KindStart, 2), rec(4, "b", KindEnd, 2),
		fault(5, FaultDeleteBlob, "b"), deleted(5.5, "b"), heal(5.5, FaultDeleteBlob, "b"),
		rec(7, "c", KindStart, 1), rec(8, "c", KindEnd, 1), // restarted at 1 on the new blob
		rec(9, "a", KindStart, 3), rec(10, "a", KindEnd, 3),
		rec(11, "b", KindStart, 3), rec(12, "b", KindEnd, 3), // repeated
		rec(13, "c", KindStart, -9223372036854775808), rec(14, "c", KindEnd, -9223372036854775808), // overflowed
		rec(15, "a", KindStart, 4),
	}, tm)
	require.Len(t, r.TermOrder, 3)
	assert.Equal(t, "c started term 1 after b's term 2", r.TermOrder[0].String())
	assert.Equal(t, "b started term 3 after a's term 3", r.TermOrder[1].String())
	assert.Equal(t, "c started term -9223372036854775808", r.TermOrder[2].String())
	assert.Empty(t, r.TermAmnesia)
	assert.Equal(t, 1, r.Messy.DeletedBlobs)
	assert.Contains(t, r.Summary(), "terms not above every earlier one: 3")
}

// A term repeated right after a storage restart that forgot its record is
// storage's amnesia, reported apart; the count goes on from what storage
// knows, and a repeat after that is not excused. A restart long after the
// highest term started excuses nothing.
func TestCheckTermOrderExcusesOnlyStorageAmnesia(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 5),
		fault(3, FaultStorageRestart, ""), heal(5, FaultStorageRestart, ""),
		rec(6, "a", KindEnd, 5),
		rec(8, "b", KindStart, 5), rec(9, "b", KindEnd, 5),
		rec(10, "c", KindStart, 5),
	}, tm)
	require.Len(t, r.TermAmnesia, 1)
	assert.Equal(t, "b", r.TermAmnesia[0].Next.Who)
	require.Len(t, r.TermOrder, 1)
	assert.Equal(t, "c", r.TermOrder[0].Next.Who)

	r = Check([]Record{
		rec(1, "a", KindStart, 5), rec(2, "a", KindEnd, 5),
		fault(30, FaultStorageRestart, ""), heal(32, FaultStorageRestart, ""),
		rec(34, "b", KindStart, 5),
	}, tm)
	assert.Empty(t, r.TermAmnesia)
	assert.Len(t, r.TermOrder, 1)
}

// No func may start while a malformed record that leaves no next term
// stands on the blob; from its repair on, funcs may. A record whose
// declared duration is bad still has a term to follow.
func TestCheckFuncsStartedUnderAMalformedRecord(t *testing.T) {
	r := Check([]Record{
		rec(1, "a", KindStart, 1), rec(2, "a", KindEnd, 1),
		fault(2, FaultMalformed, "a"), malformed(2.1, tamper.TermGarbage),
		rec(3, "b", KindStart, 1), rec(4, "b", KindEnd, 1), // made up a term
		repair(6, 2), heal(6.01, FaultMalformed, "a"),
		rec(6.005, "c", KindStart, 3), rec(7, "c", KindEnd, 3), // right after the repair was sent
		fault(8, FaultMalformed, "c"), malformed(8.1, tamper.DurationAbsurd),
		rec(9, "a", KindStart, 5), rec(10, "a", KindEnd, 5),
		repair(11, 6), heal(11, FaultMalformed, "c"),
		fault(12, FaultMalformed, "a"), malformed(12.1, tamper.TermOverflow),
		rec(40, "b", KindStart, 7),
	}, tm)
	require.Len(t, r.UnderMalformed, 2)
	assert.Equal(t, "b", r.UnderMalformed[0].Who)
	assert.Equal(t, int64(7), r.UnderMalformed[1].Number, "never repaired: the window stays open")
	assert.Equal(t, 3, r.Messy.Malformed)
	assert.Equal(t, map[string]int{"term-garbage": 1, "duration-absurd": 1, "term-overflow": 1}, r.Messy.ByCase)
	assert.Equal(t, 2, r.Messy.Repaired)
	assert.Equal(t, []string{"b"}, r.Messy.Unrepaired)
	assert.Contains(t, r.Summary(), "3 malformed records")
}

// Deleting the container ends every blob's malformed record with it.
func TestCheckContainerDeletionEndsMalformedWindows(t *testing.T) {
	ws, m := MalformedWindows([]Record{
		malformed(1, tamper.TermGarbage), deleted(3, ""),
	})
	require.Len(t, ws, 1)
	assert.Equal(t, 3*sec, ws[0].To)
	assert.Empty(t, m.Unrepaired)
	assert.Equal(t, 1, m.DeletedContainers)
}

// A contender process that exits with no fault stopping it gave up: that
// is reported. One the harness killed or stopped, or that exited in the
// run's shutdown, is not.
func TestCheckContendersThatExitByThemselves(t *testing.T) {
	r := Check([]Record{
		rec(0, "a", KindSpawn, 0), rec(0, "b", KindSpawn, 0), rec(0, "c", KindSpawn, 0),
		rec(1, "a", KindStart, 1),
		fault(3, FaultMalformed, "a"), {Mono: 3 * sec, Who: "a", Kind: KindExit, Detail: "exit 0"},
		malformed(3.1, tamper.TermGarbage),
		{Mono: 5 * sec, Who: "b", Kind: KindExit, Detail: "exit status 1"},
		repair(6, 2), heal(6, FaultMalformed, "a"),
		rec(6.5, "a", KindSpawn, 0),
		{Mono: 9 * sec, Who: "a", Kind: KindExit, Detail: "exit status 1"}, // a new process, not stopped
		{Mono: 10 * sec, Who: "harness", Kind: KindShutdown},
		{Mono: 11 * sec, Who: "c", Kind: KindExit, Detail: "exit 0"},
	}, tm)
	require.Len(t, r.Exits, 2)
	assert.Equal(t, Exit{Who: "b", At: 5 * sec, Status: "exit status 1"}, r.Exits[0])
	assert.Equal(t, "a", r.Exits[1].Who)
}

// A malformed record that leaves a next term is replaced by the record of
// the next func started on its blob: not unrepaired; one that leaves none
// stays unrepaired until its repair.
func TestCheckAHoldersRecordReplacesAMalformedDuration(t *testing.T) {
	start := func(at float64, blob string) Record {
		return Record{Mono: int64(at * float64(sec)), Who: "c1", Kind: KindStart, Term: 5, Blob: blob}
	}
	_, m := MalformedWindows([]Record{malformed(1, tamper.DurationAbsurd), start(2, "b")})
	assert.Empty(t, m.Unrepaired)
	assert.Equal(t, 1, m.Overwritten)
	_, m = MalformedWindows([]Record{malformed(1, tamper.DurationGarbage), start(2, "")})
	assert.Empty(t, m.Unrepaired, "a start on the run's one blob")
	_, m = MalformedWindows([]Record{start(0.5, "b"), malformed(1, tamper.TermGarbage), start(2, "b")})
	assert.Equal(t, []string{"b"}, m.Unrepaired, "no holder replaces a term that does not read")
	_, m = MalformedWindows([]Record{start(0.5, "b"), malformed(1, tamper.DurationAbsurd)})
	assert.Equal(t, []string{"b"}, m.Unrepaired, "a start before the record replaces nothing")
}

// A deletion waits for a running process other than the stopped leader to
// have started or seen lead the highest term: a process started again
// remembers nothing, and the leader's own memory goes with it.
func TestADeletionNeedsAWitnessOfTheLastTerm(t *testing.T) {
	h := &harness{open: map[string]int64{}, seen: map[string]int64{}, lanes: []*lane{{name: "a"}, {name: "b"}}}
	witnessed := func(but string) bool {
		ok, _ := h.witnessed(but, false)
		return ok
	}
	h.track(Record{Who: "a", Kind: KindSpawn})
	h.track(Record{Who: "b", Kind: KindSpawn})
	h.track(rec(1, "a", KindStart, 7))
	assert.False(t, witnessed("a"), "only the leader has seen term 7")
	h.track(rec(2, "b", KindObserved, 6))
	assert.False(t, witnessed("a"), "b saw an older term only")
	h.track(rec(3, "b", KindObserved, 7))
	assert.True(t, witnessed("a"), "b saw term 7 lead")
	h.track(Record{Who: "b", Kind: KindExit})
	h.track(Record{Who: "b", Kind: KindSpawn})
	assert.False(t, witnessed("a"), "b's new process remembers nothing")
	h.track(rec(4, "b", KindStart, 8))
	assert.True(t, witnessed("a"), "b started term 8, the highest")
	assert.False(t, witnessed("b"), "nobody but b has seen term 8")

	// A storage restart may forget terms: the next start's term is the
	// highest as storage knows it, or no deletion would ever find a
	// witness again.
	h.track(Record{Who: "harness", Kind: KindFault, Fault: FaultStorageRestart})
	h.track(Record{Who: "a", Kind: KindExit})
	h.track(Record{Who: "a", Kind: KindSpawn})
	h.track(rec(5, "a", KindStart, 3))
	assert.True(t, witnessed("b"), "a started term 3, the highest storage knows")
	h.track(rec(6, "b", KindStart, 4))
	assert.False(t, witnessed("b"), "a has not seen term 4")
}

// A deletion under a cut-off leader waits for every running process but the
// leader's to have seen its term: one that never saw it would take the blob
// created again at once (docs/limits.md, "A deletion no running instance
// saw").
func TestACutOffDeletionNeedsEveryOtherLaneToHaveSeenTheTerm(t *testing.T) {
	h := &harness{open: map[string]int64{}, seen: map[string]int64{}, lanes: []*lane{{name: "a"}, {name: "b"}, {name: "c"}}}
	all := func(but string) bool {
		ok, _ := h.witnessed(but, true)
		return ok
	}
	for _, w := range []string{"a", "b", "c"} {
		h.track(Record{Who: w, Kind: KindSpawn})
	}
	h.track(rec(1, "a", KindStart, 5))
	h.track(rec(2, "b", KindObserved, 5))
	assert.False(t, all("a"), "c has seen nothing")
	ok, _ := h.witnessed("a", false)
	assert.True(t, ok, "one witness is enough for a deletion of a free blob")
	h.track(rec(3, "c", KindObserved, 4))
	assert.False(t, all("a"), "c saw an older term only")
	h.track(rec(4, "c", KindObserved, 5))
	assert.True(t, all("a"))
	h.track(Record{Who: "c", Kind: KindExit})
	h.track(Record{Who: "c", Kind: KindSpawn})
	assert.False(t, all("a"), "c's new process remembers nothing")
}
