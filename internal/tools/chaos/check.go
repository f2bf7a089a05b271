package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Check reads a run's records and reports what happened: every term, every
// fault and what followed it, overlaps, and liveness.
func Check(records []Record, tm Timings) Report {
	recs := slices.Clone(records)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Mono < recs[j].Mono })
	var r Report
	if len(recs) > 0 {
		r.Start, r.End = recs[0].Mono, recs[len(recs)-1].Mono
	}

	// Terms, lane by lane.
	running := map[string]int{} // lane -> index in r.Terms of its running term
	seen := map[string]bool{}
	for _, rec := range recs {
		if rec.Who != "harness" && !seen[rec.Who] && rec.Kind != KindRequests {
			seen[rec.Who] = true
			r.Lanes = append(r.Lanes, rec.Who)
		}
		switch rec.Kind {
		case KindStart:
			running[rec.Who] = len(r.Terms)
			r.Terms = append(r.Terms, TermSpan{Who: rec.Who, Number: rec.Term, Start: rec.Mono})
		case KindSpawn:
			if rec.Contender != "" {
				if r.LaneLabels == nil {
					r.LaneLabels = map[string]string{}
				}
				r.LaneLabels[rec.Who] = rec.Contender
			}
		case KindEnd:
			if i, ok := running[rec.Who]; ok {
				r.Terms[i].End, r.Terms[i].Expires = rec.Mono, rec.Expires
				delete(running, rec.Who)
			}
		case KindStopped:
			// It follows its term's end; attach it to the lane's last term.
			// (Older runs carried the expiry here, not on end.)
			for i := len(r.Terms) - 1; i >= 0; i-- {
				if r.Terms[i].Who == rec.Who {
					t := &r.Terms[i]
					if t.Reason == "" && t.Claimed == 0 {
						t.Reason, t.Claimed = rec.Detail, rec.Claimed
						if t.Expires == 0 {
							t.Expires = rec.Expires
						}
					}
					break
				}
			}
		case KindExit:
			if i, ok := running[rec.Who]; ok {
				// The process died while its func ran.
				r.Terms[i].End, r.Terms[i].Killed = rec.Mono, true
				delete(running, rec.Who)
			}
		}
	}
	sort.Strings(r.Lanes)

	// The run's end: faults are judged up to it.
	shutdown := r.End
	for _, rec := range recs {
		if rec.Kind == KindShutdown {
			shutdown = rec.Mono
		}
	}

	// Deletions by the other writer, when each was sent.
	for _, rec := range recs {
		if rec.Kind == KindDelete {
			r.Deletions = append(r.Deletions, rec.Mono)
		}
	}

	// Faults, with their heals.
	for i, rec := range recs {
		if rec.Kind != KindFault {
			continue
		}
		f := FaultResult{Kind: rec.Fault, Target: rec.Target, Detail: rec.Detail, At: rec.Mono, Healed: rec.Mono, TargetRuns: r.LaneLabels[rec.Target]}
		for _, h := range recs[i+1:] {
			if h.Kind == KindHeal && h.Fault == rec.Fault && h.Target == rec.Target {
				f.Healed = h.Mono
				break
			}
		}
		r.Faults = append(r.Faults, f)
	}

	// Overlaps: two terms running at once. A term whose lane was frozen
	// after its lease could expire, up to when the newer one started, is
	// excused if its process then ran (thawed) no more than wakeBound in
	// all before its func returned: a stopped process cannot act on its
	// deadline. How long it ran thawed is reported instead. In all: a
	// freeze may end and another begin before the process could act (the
	// harness froze one again 4 ms after a SIGCONT), and the newer term
	// may start just after the SIGCONT, its lease long expired (5 ms
	// after, the thawed func returning 1 ms later). Storage's amnesia is
	// excused too (forgotten). A deletion excuses nothing: a leader cut
	// off as its container is deleted acts on to its deadline, and the
	// blob created again must not be taken before (the limit of
	// docs/limits.md, "A deletion no running instance saw", is held back
	// by the harness instead).
	for i := range r.Terms {
		for j := range r.Terms {
			a, b := r.Terms[i], r.Terms[j]
			if i == j || b.Start < a.Start || (b.Start == a.Start && j < i) {
				continue
			}
			aEnd := a.End
			if aEnd == 0 {
				aEnd = r.End
			}
			if aEnd <= b.Start {
				continue
			}
			bEnd := b.End
			if bEnd == 0 {
				bEnd = r.End
			}
			o := Overlap{A: a, B: b, Duration: time.Duration(min(aEnd, bEnd) - b.Start)}
			// Only a successor that took the lease after the old one could
			// expire is innocent; the two excuses below need that, or its
			// opposite.
			afterExpiry := a.Expires != 0 && b.Start >= a.Expires
			if fr, ok := frozenWithin(r.Faults, a.Who, a.Expires, b.Start); ok && afterExpiry {
				// The thawed process may stamp its end a hair before the
				// harness stamps the SIGCONT it sent. One that runs on
				// after thawing is an overlap: it is checked below.
				w := Wake{Frozen: a, Newer: b, Cont: fr.Healed, AfterCont: thawedFor(r.Faults, a.Who, a.Expires, aEnd)}
				if w.AfterCont <= wakeBound {
					r.Frozen = append(r.Frozen, w)
					continue
				}
			}
			if !afterExpiry && a.Expires != 0 && forgotten(r.Faults, r.Deletions, a, b, aEnd, tm.Detect) {
				r.Amnesia = append(r.Amnesia, o)
				continue
			}
			r.Overlap = append(r.Overlap, o)
		}
	}

	// What followed each fault: did leadership move from the lane the fault
	// hit (or, for storage-wide faults, from whoever led), how long until a
	// successor started, and was there a leader soon after it healed.
	bound := tm.LeaseDuration + tm.RetryInterval + tm.Slack
	for k := range r.Faults {
		f := &r.Faults[k]
		limit := min(f.Healed+int64(bound), shutdown)
		if k+1 < len(r.Faults) {
			limit = min(limit, r.Faults[k+1].At)
		}
		old := -1
		for i, t := range r.Terms {
			if (f.Target == "" || t.Who == f.Target) && t.Start <= f.At && (t.End == 0 || t.End > f.At) {
				old = i
			}
		}
		successor, hasSuccessor := nextStart(r.Terms, f.At, old)
		hasSuccessor = hasSuccessor && successor <= limit
		if old >= 0 {
			t := r.Terms[old]
			f.LeaderAt = t.Who
			ended := t.End != 0 && t.End <= limit
			// Leadership moved if the old term ended, or another began,
			// before the fault's effects could be over and before the next
			// fault.
			f.Changed = ended || hasSuccessor
			if ended {
				f.StopMargin, f.StopMarginOK = t.StopMargin()
			}
			if hasSuccessor {
				f.Gap = time.Duration(successor - f.At)
			}
		}
		// Liveness: a leader again within bound of the heal. A term that
		// moved away does not count, though it may still run at the heal
		// (a frozen leader thaws then).
		switch {
		case f.Changed && hasSuccessor:
			f.Recovered = max(0, time.Duration(successor-f.Healed))
		case f.Changed:
			if next, ok := nextStart(r.Terms, f.Healed, old); ok {
				f.Recovered = time.Duration(next - f.Healed)
			} else {
				f.Recovered = time.Duration(r.End - f.Healed)
			}
		case !leaderAt(r.Terms, f.Healed):
			if next, ok := nextStart(r.Terms, f.Healed, -1); ok {
				f.Recovered = time.Duration(next - f.Healed)
			} else {
				f.Recovered = time.Duration(r.End - f.Healed)
			}
		}
		if f.Recovered > bound && f.Healed+int64(bound) <= shutdown {
			r.Liveness = append(r.Liveness, *f)
		}
	}

	// The messy world: terms only grow, no func runs on a term a
	// malformed record hid, and no contender gives up.
	r.TermOrder, r.TermAmnesia = CheckTermOrder("", r.Terms, r.Faults)
	windows, messy := MalformedWindows(recs)
	r.Messy = messy
	r.UnderMalformed = StartsUnder(r.Terms, windows)
	r.Exits = unexpectedExits(recs, r.Faults, shutdown)
	return r
}

// wakeBound is how soon after SIGCONT a thawed leader must have returned for
// its overlap to be excused: the time to deliver a cancelled context.
const wakeBound = time.Second

// frozenWithin returns the last freeze of lane who in force at some moment
// from from to to.
func frozenWithin(faults []FaultResult, who string, from, to int64) (FaultResult, bool) {
	var last FaultResult
	found := false
	for _, f := range faults {
		if f.Kind == FaultFreeze && f.Target == who && f.At <= to && from <= f.Healed && (!found || f.At > last.At) {
			last, found = f, true
		}
	}
	return last, found
}

// thawedFor is how long lane who's process was not frozen from from to to.
func thawedFor(faults []FaultResult, who string, from, to int64) time.Duration {
	if to <= from {
		return 0
	}
	frozen := int64(0)
	for _, f := range faults {
		if f.Kind == FaultFreeze && f.Target == who {
			frozen += max(0, min(to, f.Healed)-max(from, f.At))
		}
	}
	return time.Duration(max(0, to-from-frozen))
}

// forgotten reports whether a storage restart, not the algorithm, let term b
// start while a ran and its lease was still valid: a storage restart began
// after a started and before b did, no deletion (sent at deletions) came
// between the restart and b's start, and a ended within detect of the
// restart healing, at the renewal that found its lease gone. Azurite keeps
// its data on disk but saves it only every few seconds, so a restart can
// forget a lease it acknowledged; Azure Storage does not lose acknowledged
// writes. A deletion in between would explain b's start as well, and a
// leader cut off as its blob is deleted must not overlap its successor.
func forgotten(faults []FaultResult, deletions []int64, a, b TermSpan, aEnd int64, detect time.Duration) bool {
	for _, f := range faults {
		// b may start before the harness stamps the heal: a contender can
		// reach the restarted Azurite first.
		if f.Kind == FaultStorageRestart && f.At >= a.Start && f.At <= b.Start && aEnd <= f.Healed+int64(detect) &&
			!slices.ContainsFunc(deletions, func(d int64) bool { return d >= f.At && d <= b.Start }) {
			return true
		}
	}
	return false
}

// nextStart returns the first start of a term other than skip at or after
// from.
func nextStart(terms []TermSpan, from int64, skip int) (int64, bool) {
	best, ok := int64(0), false
	for i, t := range terms {
		if i != skip && t.Start >= from && (!ok || t.Start < best) {
			best, ok = t.Start, true
		}
	}
	return best, ok
}

// leaderAt reports whether some term was running at moment at.
func leaderAt(terms []TermSpan, at int64) bool {
	for _, t := range terms {
		if t.Start <= at && (t.End == 0 || t.End > at) {
			return true
		}
	}
	return false
}

// Summary is a plain-text account of the report: one line per fault kind,
// then overlaps, frozen wakes and liveness.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d faults, %d terms, %v\n", r.Seed, len(r.Faults), len(r.Terms), time.Duration(r.End-r.Start).Round(time.Second))
	byKind := map[string][]FaultResult{}
	var kinds []string
	for _, f := range r.Faults {
		if byKind[f.Kind] == nil {
			kinds = append(kinds, f.Kind)
		}
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "%-16s %6s %8s %10s %10s %12s\n", "fault", "count", "changed", "gap p50", "gap max", "margin min")
	for _, k := range kinds {
		var gaps, margins []time.Duration
		changed := 0
		for _, f := range byKind[k] {
			if f.Changed {
				changed++
				if f.Gap > 0 {
					gaps = append(gaps, f.Gap)
				}
			}
			if f.StopMarginOK {
				margins = append(margins, f.StopMargin)
			}
		}
		fmt.Fprintf(&b, "%-16s %6d %8d %10s %10s %12s\n", k, len(byKind[k]), changed,
			fmtDur(Percentile(gaps, 50)), fmtDur(Percentile(gaps, 100)), fmtDur(minDur(margins)))
	}
	fmt.Fprintf(&b, "overlaps: %d\n", len(r.Overlap))
	for _, o := range r.Amnesia {
		fmt.Fprintf(&b, "  storage restart forgot the lease: %s term %d and %s term %d ran together for %v\n", o.A.Who, o.A.Number, o.B.Who, o.B.Number, o.Duration.Round(time.Millisecond))
	}
	for _, o := range r.Overlap {
		fmt.Fprintf(&b, "  OVERLAP %s term %d and %s term %d for %v\n", o.A.Who, o.A.Number, o.B.Who, o.B.Number, o.Duration.Round(time.Millisecond))
	}
	for _, w := range r.Frozen {
		fmt.Fprintf(&b, "frozen leader %s (term %d) returned %v after SIGCONT\n", w.Frozen.Who, w.Frozen.Number, w.AfterCont.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "liveness violations: %d\n", len(r.Liveness))
	for _, f := range r.Liveness {
		fmt.Fprintf(&b, "  no leader %v after %s healed\n", f.Recovered.Round(time.Millisecond), f.Kind)
	}
	b.WriteString(r.messySummary())
	return b.String()
}

// messySummary reports the other writer's doings and the checks of term
// order, funcs under malformed records and contenders that gave up.
func (r Report) messySummary() string {
	var b strings.Builder
	m := r.Messy
	if m.Malformed+m.DeletedBlobs+m.DeletedContainers > 0 {
		fmt.Fprintf(&b, "other writer: %d malformed records %v, %d repaired, %d replaced by a holder's record, %d unrepaired; deleted %d blobs, %d containers\n",
			m.Malformed, m.ByCase, m.Repaired, m.Overwritten, len(m.Unrepaired), m.DeletedBlobs, m.DeletedContainers)
	}
	fmt.Fprintf(&b, "terms not above every earlier one: %d\n", len(r.TermOrder))
	for _, t := range r.TermOrder {
		fmt.Fprintf(&b, "  %s\n", t)
	}
	for _, t := range r.TermAmnesia {
		fmt.Fprintf(&b, "  storage restart forgot a term: %s\n", t)
	}
	fmt.Fprintf(&b, "funcs started under a malformed record: %d\n", len(r.UnderMalformed))
	for _, t := range r.UnderMalformed {
		fmt.Fprintf(&b, "  %s term %d\n", t.Who, t.Number)
	}
	fmt.Fprintf(&b, "contenders that exited by themselves: %d\n", len(r.Exits))
	for _, e := range r.Exits {
		fmt.Fprintf(&b, "  %s: %s\n", e.Who, e.Status)
	}
	return b.String()
}

// String says which start's term did not grow, and from what.
func (t TermRegression) String() string {
	on := ""
	if t.Blob != "" {
		on = t.Blob + ": "
	}
	if t.Prev.Who == "" {
		return fmt.Sprintf("%s%s started term %d", on, t.Next.Who, t.Next.Number)
	}
	return fmt.Sprintf("%s%s started term %d after %s's term %d", on, t.Next.Who, t.Next.Number, t.Prev.Who, t.Prev.Number)
}

// Percentile returns the p-th percentile (nearest rank) of ds; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}

func minDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Min(ds)
}

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
