package shardchaos

import (
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/tamper"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sec = int64(time.Second)

var tm = chaos.Timings{LeaseDuration: 4 * time.Second, RetryInterval: 500 * time.Millisecond, Slack: 5 * time.Second, Detect: 4 * time.Second}

func at(s float64) int64 { return int64(s * float64(sec)) }

func start(s float64, who, shard string, term int64) Record {
	return Record{Mono: at(s), Who: who, Kind: chaos.KindStart, Shard: shard, Term: term}
}

func end(s float64, who, shard string, term int64) Record {
	return Record{Mono: at(s), Who: who, Kind: chaos.KindEnd, Shard: shard, Term: term}
}

func spawn(s float64, who string, set ...string) []Record {
	return []Record{{Mono: at(s), Who: who, Kind: chaos.KindSpawn}, {Mono: at(s), Who: who, Kind: KindSet, Set: set}}
}

func harness(s float64, kind, fault, target string) Record {
	return Record{Mono: at(s), Who: "harness", Kind: kind, Fault: fault, Target: target}
}

func shutdown(s float64) Record { return Record{Mono: at(s), Who: "harness", Kind: chaos.KindShutdown} }

func join(parts ...[]Record) []Record {
	var out []Record
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// After the last fault every shard of a live set runs on one instance that
// has it in its set: a shard that only one instance has must run there.
func TestFinalStateWantsEveryShardOfALiveSetRun(t *testing.T) {
	recs := join(spawn(0, "i01", "a", "b", "x"), spawn(0, "i02", "a", "b"), []Record{
		start(1, "i01", "a", 1), start(1, "i02", "b", 1),
		harness(2, chaos.KindFault, FaultSetOne, "i01"), harness(2, chaos.KindHeal, FaultSetOne, "i01"),
		shutdown(30),
	})
	r := Check(recs, tm)
	assert.False(t, r.Final.OK)
	assert.Equal(t, []string{"x"}, r.Final.Unrun, "only i01 has x, and it does not run it")
	assert.Equal(t, 28*time.Second, r.Final.Settled)

	recs = join(spawn(0, "i01", "a", "b", "x"), spawn(0, "i02", "a", "b"), []Record{
		start(1, "i01", "a", 1), start(1, "i02", "b", 1),
		harness(2, chaos.KindFault, FaultSetOne, "i01"), harness(2, chaos.KindHeal, FaultSetOne, "i01"),
		start(5, "i01", "x", 1),
		shutdown(30),
	})
	r = Check(recs, tm)
	assert.True(t, r.Final.OK)
	assert.Equal(t, 3*time.Second, r.Final.Settled)

	recs = join(spawn(0, "i01", "a", "b", "x"), spawn(0, "i02", "a", "b"), []Record{
		start(1, "i01", "a", 1), start(1, "i02", "b", 1),
		harness(2, chaos.KindFault, FaultSetOne, "i01"), harness(2, chaos.KindHeal, FaultSetOne, "i01"),
		start(15, "i01", "x", 1), // later than 4 s + 0.5 s + 5 s
		shutdown(30),
	})
	r = Check(recs, tm)
	assert.False(t, r.Final.OK)
	assert.Empty(t, r.Final.Unrun)
	assert.Equal(t, 13*time.Second, r.Final.Settled)
}

// A shard that left every live set must not run; one that runs on an
// instance whose set lacks it runs in the wrong place; one that runs twice
// is not run once.
func TestFinalStateFindsStrayAndMisplacedShards(t *testing.T) {
	recs := join(spawn(0, "i01", "a"), spawn(0, "i02", "b"), []Record{
		start(1, "i01", "a", 1), start(1, "i02", "b", 1), start(1, "i02", "old", 3), start(1, "i02", "a", 2),
		harness(2, chaos.KindFault, FaultSetRolling, ""), harness(3, chaos.KindHeal, FaultSetRolling, ""),
		shutdown(30),
	})
	r := Check(recs, tm)
	assert.False(t, r.Final.OK)
	assert.Equal(t, []string{"a"}, r.Final.Unrun, "a runs on i01 and on i02, whose set lacks it")
	assert.Equal(t, []string{"old"}, r.Final.Stray)
	assert.Contains(t, r.Summary(), "NOT SETTLED")

	// The instances' later sets count, and a dead instance's do not.
	recs = join(spawn(0, "i01", "a"), spawn(0, "i02", "b"), []Record{
		start(1, "i01", "a", 1), start(1, "i02", "b", 1),
		{Mono: at(2), Who: "i01", Kind: KindSet, Set: []string{"a", "c"}},
		start(3, "i01", "c", 1),
		harness(4, chaos.KindFault, FaultKill, "i02"), {Mono: at(4), Who: "i02", Kind: chaos.KindExit}, harness(4, chaos.KindHeal, FaultKill, "i02"),
		shutdown(30),
	})
	r = Check(recs, tm)
	assert.True(t, r.Final.OK, "%+v", r.Final)
	assert.Equal(t, 1, r.SetChanges, "one set taken at run time, beside those the instances started with")
	assert.Empty(t, r.Exits, "the kill stopped i02")
}

// A shard's func must not start while a malformed record that leaves no
// next term stands on its blob, and its terms grow over the whole run.
func TestCheckShardsUnderMalformedRecordsAndTermOrder(t *testing.T) {
	recs := join(spawn(0, "i01", "a", "n"), []Record{
		start(1, "i01", "a", 4), end(2, "i01", "a", 4),
		{Mono: at(3), Who: "harness", Kind: chaos.KindMalformed, Shard: "n", Detail: string(tamper.TermGarbage)},
		start(4, "i01", "n", 1), end(5, "i01", "n", 1),
		{Mono: at(6), Who: "harness", Kind: chaos.KindRepair, Shard: "n", Term: 1},
		start(7, "i01", "n", 2),
		start(8, "i01", "a", 4), // repeated
		{Mono: at(9), Who: "harness", Kind: KindPhantom, Blob: "bench/sessions/phantom-1-empty"},
		{Mono: at(10), Who: "harness", Kind: KindPhantomGone, Blob: "bench/sessions/phantom-1-empty"},
		shutdown(30),
	})
	r := Check(recs, tm)
	require.Len(t, r.UnderMalformed, 1)
	assert.Equal(t, "n", r.UnderMalformed[0].Shard)
	assert.Equal(t, int64(1), r.UnderMalformed[0].Number)
	assert.Equal(t, []string{"a"}, r.Unordered)
	require.Len(t, r.TermOrder, 1)
	assert.Equal(t, "a: i01 started term 4 after i01's term 4", r.TermOrder[0].String())
	assert.Equal(t, 1, r.Messy.Malformed)
	assert.Equal(t, 1, r.Messy.Repaired)
	assert.Equal(t, 1, r.Phantoms)
	assert.Equal(t, 1, r.PhantomsGone)
}

// The harness's live view: covered while every shard of a live set runs
// once where it should, and, while the sets agree, spread within one.
func TestStateCovered(t *testing.T) {
	s := State{
		Alive: map[string]bool{"i01": true, "i02": true},
		Sets:  map[string][]string{"i01": {"a", "b", "c"}, "i02": {"a", "b", "c"}},
		Runs:  map[string][]string{"a": {"i01"}, "b": {"i01"}, "c": {"i02"}},
		Owned: map[string]int{"i01": 2, "i02": 1},
	}
	assert.True(t, s.Covered())
	s.Owned = map[string]int{"i01": 3}
	s.Runs = map[string][]string{"a": {"i01"}, "b": {"i01"}, "c": {"i01"}}
	assert.False(t, s.Covered(), "same sets: spread within one")
	s.Sets["i02"] = []string{"a"}
	assert.True(t, s.Covered(), "sets differ: each instance's share is its own guess")
	s.Sets["i02"] = []string{"a", "d"}
	assert.False(t, s.Covered(), "d is in a live set and runs nowhere")
	delete(s.Sets, "i02")
	assert.False(t, s.Covered(), "i02's set is not known yet")
}
