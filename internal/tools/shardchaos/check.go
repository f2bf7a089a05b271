package shardchaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
)

// Report is what a run's records show, shard by shard.
type Report struct {
	Shards int                 // shards that ran at least once
	Runs   int                 // shard func runs
	Faults []chaos.FaultResult // the harness's faults, with their heals
	// Overlaps are two funcs of one shard running at once, on two
	// instances, other than a frozen one's that returned within a second
	// of SIGCONT: what must never happen.
	Overlaps []ShardOverlap
	// Frozen are runs that an instance frozen past its session's lease
	// still had when another instance started the shard, and how soon
	// after SIGCONT they returned.
	Frozen []ShardWake
	// Unordered are shards whose term numbers did not grow from run to run.
	Unordered []string
	// CutOffMargins are, for every run ended by its session's safety
	// deadline (a partition; not a freeze, whose process could not stop
	// until it thawed), how long before its session could be broken its
	// func returned.
	CutOffMargins []time.Duration
}

// ShardOverlap is a chaos.Overlap of one shard.
type ShardOverlap struct {
	Shard string
	chaos.Overlap
}

// ShardWake is a chaos.Wake of one shard.
type ShardWake struct {
	Shard string
	chaos.Wake
}

// Check reads a run's records and checks every shard's runs with the chaos
// harness's checker: the instances are its lanes, the shard's runs its
// terms, the harness's faults and the instances' spawns and exits apply to
// every shard.
func Check(records []Record, tm chaos.Timings) Report {
	var common []chaos.Record
	byShard := map[string][]chaos.Record{}
	for _, r := range records {
		c := chaos.Record{Mono: r.Mono, Who: r.Who, Kind: r.Kind, Term: r.Term, Expires: r.Expires, Fault: r.Fault, Target: r.Target, Detail: r.Detail}
		switch r.Kind {
		case chaos.KindStart, chaos.KindEnd, chaos.KindStopped:
			if r.Shard != "" {
				byShard[r.Shard] = append(byShard[r.Shard], c)
			}
		case chaos.KindFault, chaos.KindHeal, chaos.KindSpawn, chaos.KindExit, chaos.KindShutdown:
			common = append(common, c)
		}
	}
	rep := Report{Shards: len(byShard), Faults: chaos.Check(common, tm).Faults}
	shards := make([]string, 0, len(byShard))
	for s := range byShard {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	for _, shard := range shards {
		r := chaos.Check(append(append([]chaos.Record(nil), common...), byShard[shard]...), tm)
		rep.Runs += len(r.Terms)
		for _, o := range r.Overlap {
			rep.Overlaps = append(rep.Overlaps, ShardOverlap{Shard: shard, Overlap: o})
		}
		for _, o := range r.Amnesia { // no storage restarts here: an overlap all the same
			rep.Overlaps = append(rep.Overlaps, ShardOverlap{Shard: shard, Overlap: o})
		}
		for _, w := range r.Frozen {
			rep.Frozen = append(rep.Frozen, ShardWake{Shard: shard, Wake: w})
		}
		for i := 1; i < len(r.Terms); i++ {
			if r.Terms[i].Number <= r.Terms[i-1].Number {
				rep.Unordered = append(rep.Unordered, shard)
				break
			}
		}
		for _, t := range r.Terms {
			if m, ok := t.StopMargin(); ok && t.Reason == "renewal deadline passed" && !thawed(rep.Faults, t) {
				rep.CutOffMargins = append(rep.CutOffMargins, m)
			}
		}
	}
	return rep
}

// Summary is a plain-text account of the report.
func (r Report) Summary() string {
	var b strings.Builder
	kinds := map[string]int{}
	for _, f := range r.Faults {
		kinds[f.Kind]++
	}
	fmt.Fprintf(&b, "%d faults %v; %d shards, %d runs\n", len(r.Faults), kinds, r.Shards, r.Runs)
	fmt.Fprintf(&b, "two funcs of one shard at once: %d\n", len(r.Overlaps))
	for _, o := range r.Overlaps {
		fmt.Fprintf(&b, "  OVERLAP shard %s: %s term %d and %s term %d for %v\n", o.Shard, o.A.Who, o.A.Number, o.B.Who, o.B.Number, o.Duration.Round(time.Millisecond))
	}
	var wakes []time.Duration
	for _, w := range r.Frozen {
		wakes = append(wakes, w.AfterCont)
	}
	fmt.Fprintf(&b, "frozen runs excused: %d, returned at most %v after SIGCONT\n", len(r.Frozen), chaos.Percentile(wakes, 100).Round(time.Millisecond))
	fmt.Fprintf(&b, "term numbers not growing: %d shards\n", len(r.Unordered))
	if len(r.CutOffMargins) > 0 {
		fmt.Fprintf(&b, "cut-off runs: %d, stopped before their session could be broken by %v to %v\n", len(r.CutOffMargins),
			chaos.Percentile(r.CutOffMargins, 0).Round(time.Millisecond), chaos.Percentile(r.CutOffMargins, 100).Round(time.Millisecond))
	}
	return b.String()
}

// thawed reports whether run t ended as its instance thawed from a freeze:
// a frozen process cannot stop at its deadline, and is reported in Frozen.
func thawed(faults []chaos.FaultResult, t chaos.TermSpan) bool {
	for _, f := range faults {
		if f.Kind == FaultFreeze && f.Target == t.Who && f.At <= t.End && t.End <= f.Healed+int64(time.Second) {
			return true
		}
	}
	return false
}
