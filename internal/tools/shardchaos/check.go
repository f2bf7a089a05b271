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
	// Unordered are shards whose term numbers did not grow from run to
	// run, over the whole run (TermOrder says where).
	Unordered []string
	TermOrder []chaos.TermRegression // Blob is the shard
	// UnderMalformed are runs that started while their shard's blob
	// carried a malformed record that leaves no next term.
	UnderMalformed []ShardRun
	// Exits are instance processes that exited with no fault stopping
	// them.
	Exits []chaos.Exit
	// Messy is what the other writer did to shard blobs; Phantoms and
	// PhantomsGone count the phantom session blobs it created and deleted.
	Messy                  chaos.Messy
	Phantoms, PhantomsGone int
	// SetChanges counts the sets instances took at run time (not those
	// they started with).
	SetChanges int
	// LateAcquires counts the dead sessions' blobs leased again under their
	// ID; Revived are those of them that a process then ran again (a
	// session started under that ID after it): what must never happen.
	LateAcquires int
	Revived      []string
	// Final is the state at the end of the run, after the last fault.
	Final Final
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

// ShardRun is a run of one shard.
type ShardRun struct {
	Shard string
	chaos.TermSpan
}

// Final is whether every shard of a live set ran, where it should, after
// the last fault: after its heal (a malformed record's repair, a set
// change's last instance), the last process start and the last set an
// instance took (Quiet).
type Final struct {
	Quiet int64 // CLOCK_MONOTONIC ns
	// Settled is how long after Quiet every shard in a live instance's set
	// ran on exactly one instance that has it in its set, and no other
	// shard ran, for good: until the run's shutdown.
	Settled time.Duration
	OK      bool // it settled, within the bound (LeaseDuration + RetryInterval + Slack)
	// Unrun are the shards in a live set that, at the shutdown, did not
	// run on exactly one instance that has them in its set; Stray those
	// that ran though in no live set.
	Unrun, Stray []string
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
	var common, other []chaos.Record
	byShard := map[string][]chaos.Record{}
	ran := map[string]bool{}
	fresh := map[string]bool{}       // lanes whose process has not yet said its first set
	leasedAgain := map[string]bool{} // sessions whose dead blob the harness leased again
	var rep Report
	for _, r := range records {
		c := chaos.Record{Mono: r.Mono, Who: r.Who, Kind: r.Kind, Term: r.Term, Expires: r.Expires, Fault: r.Fault, Target: r.Target, Detail: r.Detail, Blob: r.Shard}
		switch r.Kind {
		case chaos.KindStart, chaos.KindEnd, chaos.KindStopped:
			if r.Shard != "" {
				byShard[r.Shard] = append(byShard[r.Shard], c)
				ran[r.Shard] = true
				if r.Kind == chaos.KindStart {
					other = append(other, c) // a holder's record replaces a malformed one
				}
			}
		case chaos.KindMalformed, chaos.KindRepair:
			if r.Shard != "" {
				byShard[r.Shard] = append(byShard[r.Shard], c)
				other = append(other, c)
			}
		case chaos.KindFault, chaos.KindHeal, chaos.KindSpawn, chaos.KindExit, chaos.KindShutdown:
			common = append(common, c)
			if r.Kind == chaos.KindSpawn {
				fresh[r.Who] = true
			}
		case KindLateAcquire:
			rep.LateAcquires++
			leasedAgain[r.Session] = true
		case KindSession:
			if leasedAgain[r.Session] {
				rep.Revived = append(rep.Revived, r.Session)
			}
		case KindPhantom:
			rep.Phantoms++
		case KindPhantomGone:
			rep.PhantomsGone++
		case KindSet:
			if r.Detail == "" && r.Who != "harness" && !fresh[r.Who] {
				rep.SetChanges++
			}
			fresh[r.Who] = false
		}
	}
	all := chaos.Check(common, tm)
	rep.Shards, rep.Faults, rep.Exits = len(ran), all.Faults, all.Exits
	_, rep.Messy = chaos.MalformedWindows(other)
	rep.Final = finalState(records, tm.LeaseDuration+tm.RetryInterval+tm.Slack)
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
		if len(r.TermOrder) > 0 {
			rep.Unordered = append(rep.Unordered, shard)
		}
		for _, t := range r.TermOrder {
			t.Blob = shard
			rep.TermOrder = append(rep.TermOrder, t)
		}
		for _, t := range r.UnderMalformed {
			rep.UnderMalformed = append(rep.UnderMalformed, ShardRun{Shard: shard, TermSpan: t})
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
	for i, t := range r.TermOrder {
		if i == 10 {
			fmt.Fprintf(&b, "  ... %d more\n", len(r.TermOrder)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", t)
	}
	m := r.Messy
	fmt.Fprintf(&b, "other writer: %d malformed records %v, %d repaired, %d replaced by a holder's record, %d unrepaired %v; %d phantom sessions, %d deleted\n",
		m.Malformed, m.ByCase, m.Repaired, m.Overwritten, len(m.Unrepaired), m.Unrepaired, r.Phantoms, r.PhantomsGone)
	fmt.Fprintf(&b, "runs started under a malformed record: %d\n", len(r.UnderMalformed))
	for _, u := range r.UnderMalformed {
		fmt.Fprintf(&b, "  shard %s: %s term %d\n", u.Shard, u.Who, u.Number)
	}
	fmt.Fprintf(&b, "sets taken at run time: %d\n", r.SetChanges)
	fmt.Fprintf(&b, "dead sessions leased again under their ID: %d; run again: %d %v\n", r.LateAcquires, len(r.Revived), r.Revived)
	fmt.Fprintf(&b, "instances that exited by themselves: %d\n", len(r.Exits))
	for _, e := range r.Exits {
		fmt.Fprintf(&b, "  %s: %s\n", e.Who, e.Status)
	}
	if r.Final.OK {
		fmt.Fprintf(&b, "after the last fault: every shard of a live set ran, where it should, %v later\n", r.Final.Settled.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "after the last fault: NOT SETTLED (%v); unrun %v, stray %v\n", r.Final.Settled.Round(time.Millisecond), r.Final.Unrun, r.Final.Stray)
	}
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

// finalState replays the records to find when, after the last fault's heal,
// process start or set taken (Quiet), every shard in a live instance's set
// ran on exactly one instance that has it in its set, and no other shard
// ran, for good: until the shutdown; and whether that was within bound.
func finalState(records []Record, bound time.Duration) Final {
	recs := append([]Record(nil), records...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Mono < recs[j].Mono })
	var f Final
	shutdown := int64(0)
	for _, r := range recs {
		switch {
		case r.Kind == chaos.KindShutdown:
			if shutdown == 0 {
				shutdown = r.Mono
			}
		case shutdown != 0:
		case r.Kind == chaos.KindHeal || r.Kind == chaos.KindFault || r.Kind == chaos.KindSpawn || (r.Kind == KindSet && r.Who != "harness"):
			f.Quiet = r.Mono
		}
	}
	if shutdown == 0 && len(recs) > 0 {
		shutdown = recs[len(recs)-1].Mono + 1
	}
	alive := map[string]bool{}
	sets := map[string][]string{}
	running := map[string]map[string]bool{} // shard -> lanes
	runs := func() map[string][]string {
		out := map[string][]string{}
		for sh, lanes := range running {
			for l := range lanes {
				out[sh] = append(out[sh], l)
			}
			sort.Strings(out[sh])
		}
		return out
	}
	settledSince := int64(-1) // when the state last became right; -1 it is not
	for _, r := range recs {
		if r.Mono >= shutdown {
			break
		}
		switch r.Kind {
		case chaos.KindSpawn:
			alive[r.Who] = true
			delete(sets, r.Who)
		case chaos.KindExit:
			alive[r.Who] = false
			delete(sets, r.Who)
			for _, lanes := range running {
				delete(lanes, r.Who)
			}
		case KindSet:
			if r.Detail == "" && r.Who != "harness" {
				sets[r.Who] = r.Set
			}
		case chaos.KindStart:
			if running[r.Shard] == nil {
				running[r.Shard] = map[string]bool{}
			}
			running[r.Shard][r.Who] = true
		case chaos.KindEnd:
			delete(running[r.Shard], r.Who)
		default:
			continue
		}
		if r.Mono < f.Quiet {
			continue
		}
		f.Unrun, f.Stray = misplaced(alive, sets, runs())
		switch ok := len(f.Unrun) == 0 && len(f.Stray) == 0; {
		case ok && settledSince < 0:
			settledSince = r.Mono
		case !ok:
			settledSince = -1
		}
	}
	if f.Quiet == 0 || len(recs) == 0 {
		return f
	}
	if settledSince < 0 {
		f.Unrun, f.Stray = misplaced(alive, sets, runs())
		if len(f.Unrun) == 0 && len(f.Stray) == 0 {
			settledSince = f.Quiet // nothing moved since Quiet, and all was right
		}
	}
	if settledSince < 0 {
		f.Settled = time.Duration(shutdown - f.Quiet)
		return f
	}
	f.Settled = time.Duration(max(0, settledSince-f.Quiet))
	f.OK = f.Settled <= bound
	return f
}
