package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Result is one fleet's run.
type Result struct {
	Seed       uint64
	Class      string        // its configuration class
	Simulated  time.Duration // the fleet's virtual time
	Wall       time.Duration
	Faults     map[string]int // injected faults by kind: plan faults by Kind, per-request ones by Req*
	Requests   int            // requests the fleet's instances sent
	Funcs      int            // func runs
	Violations []Violation
	Dropped    int           // violations beyond those kept
	Recovery   time.Duration // the longest time an election took to run again after a calm began
	// Held counts what the driver held back to stay within the library's
	// promise (a deletion, a crash, a start...), by why.
	Held map[string]int
	// Made counts cases the driver made that no stated limit excludes and
	// that an older fault model held back (a deletion of an election
	// deleted before, ...), by what.
	Made map[string]int
	// Drawn is the fleet's configuration beyond its class, as drawn from
	// its seed: each draw it made (e.g. which lanes have a lease ID file),
	// counted once.
	Drawn map[string]int
	// Met counts protocol events the fleet met that are not faults, by
	// what (a session's last list written, the other writer's edit of
	// one): how often the rare sequences the faults aim at came about.
	Met map[string]int
}

// Report sums the results of a run of many fleets.
type Report struct {
	Fleets     int
	Simulated  time.Duration
	Wall       time.Duration // the run's wall time (set by the caller)
	Faults     map[string]int
	Requests   int
	Funcs      int
	Violations int
	Recovery   time.Duration
	Held       map[string]int
	Made       map[string]int
	Drawn      map[string]int // fleets by each draw of their configuration (Result.Drawn)
	Met        map[string]int // protocol events met, not faults (Result.Met)
	Failing    []Result       // fleets with a violation, by seed
	Classes    map[string]*Tally
}

// Tally is what the fleets of one configuration class did.
type Tally struct {
	Fleets     int
	Simulated  time.Duration
	Wall       time.Duration // the sum of the fleets' wall times
	Faults     int
	Violations int
}

// Add sums r into the report.
func (rp *Report) Add(r Result) {
	rp.Fleets++
	rp.Simulated += r.Simulated
	if rp.Classes == nil {
		rp.Classes = map[string]*Tally{}
	}
	c := rp.Classes[r.Class]
	if c == nil {
		c = &Tally{}
		rp.Classes[r.Class] = c
	}
	c.Fleets++
	c.Simulated += r.Simulated
	c.Wall += r.Wall
	c.Violations += len(r.Violations) + r.Dropped
	if rp.Faults == nil {
		rp.Faults = map[string]int{}
	}
	for k, n := range r.Faults {
		rp.Faults[k] += n
		c.Faults += n
	}
	addCounts(&rp.Held, r.Held)
	addCounts(&rp.Made, r.Made)
	addCounts(&rp.Drawn, r.Drawn)
	addCounts(&rp.Met, r.Met)
	rp.Requests += r.Requests
	rp.Funcs += r.Funcs
	rp.Recovery = max(rp.Recovery, r.Recovery)
	if n := len(r.Violations) + r.Dropped; n > 0 {
		rp.Violations += n
		rp.Failing = append(rp.Failing, r)
		slices.SortFunc(rp.Failing, func(a, b Result) int {
			switch {
			case a.Seed < b.Seed:
				return -1
			case a.Seed > b.Seed:
				return 1
			}
			return 0
		})
	}
}

// FaultTotal is the number of faults injected.
func (rp *Report) FaultTotal() int {
	n := 0
	for _, v := range rp.Faults {
		n += v
	}
	return n
}

// FleetHours is the simulated fleet-hours.
func (rp *Report) FleetHours() float64 { return rp.Simulated.Hours() }

// String is the run's summary: reach, faults by kind, violations.
func (rp *Report) String() string {
	var b strings.Builder
	perMin := 0.0
	if m := rp.Wall.Minutes(); m > 0 {
		perMin = rp.FleetHours() / m
	}
	fmt.Fprintf(&b, "fleets %d, simulated %.1f fleet-hours in %v of wall time (%.1f fleet-hours per wall minute)\n",
		rp.Fleets, rp.FleetHours(), rp.Wall.Round(time.Second), perMin)
	fmt.Fprintf(&b, "requests %d, func runs %d, longest recovery after a calm began %v\n", rp.Requests, rp.Funcs, rp.Recovery.Round(time.Millisecond))
	fmt.Fprintf(&b, "faults injected %d:", rp.FaultTotal())
	for _, k := range slices.Sorted(maps.Keys(rp.Faults)) {
		fmt.Fprintf(&b, " %s %d;", k, rp.Faults[k])
	}
	if len(rp.Classes) > 1 || rp.Classes[""] == nil {
		fmt.Fprintf(&b, "\nby configuration class (fleets, fleet-hours, fleets' wall time, faults, violations):")
		for _, k := range slices.Sorted(maps.Keys(rp.Classes)) {
			c := rp.Classes[k]
			fmt.Fprintf(&b, "\n  %s: %d, %.1f, %v, %d, %d", k, c.Fleets, c.Simulated.Hours(), c.Wall.Round(time.Second), c.Faults, c.Violations)
		}
	}
	writeCounts(&b, "fleets by configuration drawn", rp.Drawn)
	writeCounts(&b, "held back by the fault model", rp.Held)
	writeCounts(&b, "made, beyond what an older fault model held back", rp.Made)
	writeCounts(&b, "met along the way (not faults)", rp.Met)
	fmt.Fprintf(&b, "\nviolations %d\n", rp.Violations)
	return b.String()
}

// addCounts adds src's counts into *dst, made if need be.
func addCounts(dst *map[string]int, src map[string]int) {
	if len(src) > 0 && *dst == nil {
		*dst = map[string]int{}
	}
	for k, n := range src {
		(*dst)[k] += n
	}
}

// writeCounts writes a line of counts, sorted by what, if there are any.
func writeCounts(b *strings.Builder, title string, counts map[string]int) {
	if len(counts) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s:", title)
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(b, " %s %d;", k, counts[k])
	}
}
