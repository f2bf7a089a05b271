package chaos

import (
	"slices"
	"sort"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/tamper"
)

// Faults of the messy world, beside the process faults: another writer
// (package tamper) writes into the lease blob, or deletes it. Each first
// SIGTERMs the leader, which releases its lease: another writer may write
// or delete only while the blob is unleased, and a stable fleet's blob
// always is leased otherwise. The lane's new process starts once the fault
// has healed.
const (
	// FaultMalformed: a malformed record (a tamper.Case), written while the
	// lease is free; repaired seconds later, as an operator would, with the
	// term after the highest seen on the blob. The fault heals at the
	// repair.
	FaultMalformed = "malformed"
	// FaultDeleteBlob: the lease blob deleted while unleased; the fleet
	// must create it again, and its terms must keep growing.
	FaultDeleteBlob = "delete-blob"
	// FaultDeleteContainer: the whole container deleted, holding the
	// blob's lease (the other writer's own, taken while it was free) so as
	// to take no contender's with it.
	FaultDeleteContainer = "delete-container"
)

// MessyFaults are the faults of the messy world; Config.Malformed and
// Config.Deletes add them to the draw.
var MessyFaults = []string{FaultMalformed, FaultDeleteBlob, FaultDeleteContainer, FaultCutOffDelete}

// stopsTarget are the faults that stop their target lane's process: its
// exit is the harness's doing.
var stopsTarget = map[string]bool{FaultKill: true, FaultGraceful: true, FaultLateAcquire: true, FaultMalformed: true, FaultDeleteBlob: true, FaultDeleteContainer: true}

// Messy is what the other writer did in a run.
type Messy struct {
	Malformed         int            // malformed records written
	ByCase            map[string]int // of those, by tamper.Case
	Repaired          int            // repairs written
	Overwritten       int            // malformed records that leave a next term, replaced by the record of a func started on the blob before any repair
	Unrepaired        []string       // blobs whose malformed record neither a repair nor a holder's record replaced before the run ended
	DeletedBlobs      int
	DeletedContainers int
}

// TermRegression is a func start whose term was not above every earlier
// start's on its blob (Prev is the earlier one with the highest term), or
// was below 1 (Prev zero).
type TermRegression struct {
	Blob       string
	Prev, Next TermSpan
}

// amnesiaWindow is how long before a storage restart a term may have
// started for the restart to have forgotten its record: Azurite saves its
// data every few seconds.
const amnesiaWindow = 10 * time.Second

// CheckTermOrder checks that the terms of successive func starts on one
// blob (terms, in start order) strictly increase, across the whole run,
// and are at least 1. A term that is not above the highest before it is
// excused, as storage's amnesia, when a storage restart (among faults)
// began at most amnesiaWindow after that highest one started and before
// this one did; the highest is then this one, as storage now knows it.
func CheckTermOrder(blob string, terms []TermSpan, faults []FaultResult) (bad, amnesia []TermRegression) {
	ts := slices.Clone(terms)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Start < ts[j].Start })
	var top TermSpan
	for _, t := range ts {
		if t.Number < 1 {
			bad = append(bad, TermRegression{Blob: blob, Next: t})
			continue
		}
		if top.Number > 0 && t.Number <= top.Number {
			r := TermRegression{Blob: blob, Prev: top, Next: t}
			if restartedAfter(faults, top.Start, t.Start) {
				amnesia = append(amnesia, r)
				top = t
			} else {
				bad = append(bad, r)
			}
			continue
		}
		if t.Number > top.Number {
			top = t
		}
	}
	return bad, amnesia
}

// restartedAfter reports whether storage restarted within amnesiaWindow
// after from and no later than to.
func restartedAfter(faults []FaultResult, from, to int64) bool {
	for _, f := range faults {
		if f.Kind == FaultStorageRestart && f.At >= from && f.At-from <= int64(amnesiaWindow) && f.At <= to {
			return true
		}
	}
	return false
}

// Window is a time during which a malformed record that leaves no next
// term (tamper.Case.BlocksTerm) stood on a blob: from when its write was
// answered to when its repair (or the blob's deletion) was sent; To 0
// means never repaired in the run.
type Window struct {
	Blob     string
	Case     string
	From, To int64
}

// MalformedWindows reads from a run's records when each blob carried a
// malformed record that leaves no next term, and what the other writer
// did in all.
func MalformedWindows(recs []Record) ([]Window, Messy) {
	var ws []Window
	m := Messy{ByCase: map[string]int{}}
	open := map[string]int{}          // blob -> index in ws of its open window
	pending := map[string]struct{}{}  // blobs with a malformed record not yet repaired
	overwritable := map[string]bool{} // of those, the ones whose record leaves a next term: a holder's record replaces it
	closeAll := func(at int64, all bool, blob string) {
		for b, i := range open {
			if all || b == blob {
				ws[i].To = at
				delete(open, b)
			}
		}
		for b := range pending {
			if all || b == blob {
				delete(pending, b)
			}
		}
	}
	for _, r := range sortedByMono(recs) {
		switch r.Kind {
		case KindMalformed:
			m.Malformed++
			m.ByCase[r.Detail]++
			pending[r.Blob] = struct{}{}
			c, _ := tamper.ParseCase(r.Detail)
			overwritable[r.Blob] = !c.BlocksTerm()
			if _, ok := open[r.Blob]; !ok && c.BlocksTerm() {
				open[r.Blob] = len(ws)
				ws = append(ws, Window{Blob: r.Blob, Case: r.Detail, From: r.Mono})
			}
		case KindRepair:
			m.Repaired++
			closeAll(r.Mono, false, r.Blob)
		case KindStart:
			// A func started on the blob: its holder wrote its own record
			// over the malformed one, which it could take only while the
			// blob was unleased, so before this holder's claim (only a
			// record that leaves a next term can be built on; under the
			// other kind no func starts, which StartsUnder checks).
			for b := range pending {
				if (r.Blob == "" || b == r.Blob) && overwritable[b] { // "": the run's one blob
					m.Overwritten++
					delete(pending, b)
				}
			}
		case KindDelete:
			if r.Blob == "" {
				m.DeletedContainers++
				closeAll(r.Mono, true, "")
			} else {
				m.DeletedBlobs++
				closeAll(r.Mono, false, r.Blob)
			}
		}
	}
	for b := range pending {
		m.Unrepaired = append(m.Unrepaired, b)
	}
	sort.Strings(m.Unrepaired)
	return ws, m
}

// StartsUnder returns the terms that started while one of windows stood
// (all on the terms' one blob): funcs run on a term nobody could know.
func StartsUnder(terms []TermSpan, windows []Window) []TermSpan {
	var out []TermSpan
	for _, t := range terms {
		for _, w := range windows {
			if t.Start >= w.From && (w.To == 0 || t.Start < w.To) {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// Exit is a contender process that exited without the harness stopping it.
type Exit struct {
	Who    string
	At     int64
	Status string
}

// unexpectedExits finds the exits that no fault stopping their lane
// (stopsTarget) explains, since the lane's last spawn, before the run's
// shutdown.
func unexpectedExits(recs []Record, faults []FaultResult, shutdown int64) []Exit {
	spawned := map[string]int64{}
	var out []Exit
	for _, r := range recs {
		switch r.Kind {
		case KindSpawn:
			spawned[r.Who] = r.Mono
		case KindExit:
			if r.Mono >= shutdown {
				continue
			}
			explained := false
			for _, f := range faults {
				if stopsTarget[f.Kind] && f.Target == r.Who && f.At >= spawned[r.Who] && f.At <= r.Mono {
					explained = true
					break
				}
			}
			if !explained {
				out = append(out, Exit{Who: r.Who, At: r.Mono, Status: r.Detail})
			}
		}
	}
	return out
}

func sortedByMono(records []Record) []Record {
	recs := slices.Clone(records)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Mono < recs[j].Mono })
	return recs
}
