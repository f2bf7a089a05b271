package leaderelection

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/sim"
	"github.com/blobelect/leaderelection/internal/wire"
)

// Configurations drawn from the seed (issue 38). Each fleet of the
// simulator (sim_test.go) draws, from its seed alone, a configuration
// class and, in it, the timings of every instance: its LeaseDuration,
// RenewInterval, RetryInterval, StopMargin and RequestTimeout, within the
// ranges the library accepts (settings.go's timingErrors; 0 takes the
// library's default, as withDefaults derives it). So a failing seed's
// replay runs the same configuration, and a run of many fleets meets the
// library's defaults, the edges validation allows, and elections whose
// contenders disagree (a rolling change of settings), as well as the shape
// the simulator was tuned on.
//
// The classes, each with its share of the fleets in 100 (simClasses). A
// fleet of any class but tuned and rolling costs about as much wall time as
// a tuned one (simCostMost) for a third of its simulated time or less, so
// the tuned shape and its rolling changes keep most of the fleets, and the
// run its reach:
//
//   - quorum (10): mutexes over a majority of 3 or 5 in-memory accounts,
//     with faults per account (sim_quorum_test.go);
//   - tuned (40): defaultShape (sim_fleet_test.go): native 30 s, ETag 12 s,
//     sessions 24 s, RetryInterval 16 s / 20 s, the simulator's seams;
//   - rolling (20): the tuned shape, or in half of them the library's
//     defaults (every timing 0; the simulator's seams), under a rolling
//     change of LeaseDuration: in one election or more, drawn, each
//     contender changes, from its next start after a time drawn (one after
//     another, 0 to 5 minutes apart), to a lease drawn (native 15 to 60 s;
//     ETag 3 to 15 s or 1 to 2 minutes; sessions from a quarter of the
//     first lease to 5 minutes, uniformly), its other timings the
//     library's for that lease: a fleet mid-way through a deploy, in which
//     contenders of one election declare different leases; where the
//     plan has a rolling restart (sim.RollingRestart) that stops a
//     rolled contender, the first such restart applies its new lease
//     instead, in one sweep, as a real rollout does (swept), or, if it
//     pauses part-way (a paused or failed rollout), to those it reached;
//     a redeploy (sim.Redeploy, a node pool's restart) restarts each
//     on the settings it has;
//   - defaults (6): every timing of every instance left zero, and every
//     seam at its production value: the library exactly, as a user runs
//     it (both mutexes then take native 15 s leases; the sessions are 15 s
//     ETag leases; RetryInterval 2 s; notes read every 100 ms, strays
//     looked for after 5 to 10 minutes, no waits before a reservation);
//   - production-seams (4): ranged timings (below) with every seam at its
//     production value;
//   - edges (2): each election's timings at the edges validation allows,
//     each field drawn as its default, its least or its most, given those
//     drawn before it (a native lease 15 or 60 s, an ETag mutex 3 s or 5
//     minutes, sessions 3 s or 2 minutes; StopMargin LeaseDuration/100 (at
//     least 1 s) or LeaseDuration/2; RenewInterval 500 ms or (LeaseDuration
//     - StopMargin)/2; RequestTimeout 100 ms or LeaseDuration - StopMargin
//     - RenewInterval; RetryInterval 100 ms or 1 minute);
//   - mixed (8): each election's contenders split between two ranged
//     configurations, old and new (a mutex's may differ in kind: native
//     and ETag), some contenders running the old one until a time drawn,
//     then, from their next start on, the new one: a rolling change of
//     settings;
//   - long-etag (5): the ETag mutex on a lease of 1 to 10 minutes,
//     sessions of 1 to 3 minutes, the native mutex on 60 s, RetryIntervals
//     of 2 to 20 s;
//   - ranged (5): each election's timings drawn within the ranges (a
//     native lease of 15 to 60 whole seconds; an ETag mutex of 3 to 15 s
//     or 60 s to 5 minutes and sessions of 3 s to 2 minutes, log-uniform;
//     each other field its default, or uniform between its edges, but a
//     RetryInterval log-uniform from 500 ms (a ShardOwner's: 2 s) to 1
//     minute: below, a fleet costs many times more, and the edges reach
//     100 ms).
//
// The recovery bounds (sim_faultmodel_test.go's bound) take, for each
// election, the longest of each timing among its instances' (old and new),
// and a calm lasts at least the longest mutex bound. A fleet whose
// instances send many requests runs shorter (simShapeFor).
//
// In every class, each fleet also draws which of its instances have a
// lease ID file (simFilesFor): for each kind, none (1 in 4), the first
// (1 in 2) or every one (1 in 4), a quorum mutex none; and whether the
// files are ephemeral (1 in 3 fleets), lost when a redeploy or a rolling
// restart replaces the pod, kept across a crash or a stop in place.
//
// And, in every class, each fleet draws its weather (drawWeather): how
// many lane faults its storms hold. Until 2026-11-30 every storm held 5 to
// 15 (perStorm 10), so a fault struck at a protocol point (sim_points_test.go)
// always landed among others, and the fleet recovered from it as from a
// storm: slowly (a cut session's shard started again 31 s to 3 min 15 s
// after its container was deleted, in 20 forced cases). A production fleet
// mostly meets one fault at a time, its peers well: so a quarter of the
// fleets have light storms (0 or 1 lane fault; the points, the other
// writer and the storage and fleet faults as in any), half the usual
// ones, and a quarter heavy ones (10 to 30).

// The weathers a fleet may draw (drawWeather), as the report names them.
const (
	weatherLight  = "storms: light (0 or 1 lane fault)"
	weatherUsual  = "storms: usual (5 to 15 lane faults)"
	weatherHeavy  = "storms: heavy (10 to 30 lane faults)"
	simWeatherPCG = 0x57041 // drawWeather's stream: no other draw changes with it
)

// drawWeather draws the fleet's weather from its seed (see above), in a
// stream of its own.
func (sh *simShape) drawWeather(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, simWeatherPCG))
	switch rng.IntN(4) {
	case 0:
		sh.weather, sh.perStorm = weatherLight, 1 // NewPlan draws perStorm/2 + [0, perStorm]
	case 3:
		sh.weather, sh.perStorm = weatherHeavy, 20
	default:
		sh.weather = weatherUsual
	}
}

// simTiming is one instance's timings: its BlobSettings' (0: the library's
// default).
type simTiming struct {
	lease, renew, retry, margin, timeout time.Duration
}

// blob is tm as BlobSettings' timings.
func (tm simTiming) blob() BlobSettings {
	return BlobSettings{LeaseDuration: tm.lease, RenewInterval: tm.renew, RetryInterval: tm.retry,
		StopMargin: tm.margin, RequestTimeout: tm.timeout}
}

// simLaneTimings are a lane's timings: first, then, for the processes it
// starts from at on (at 0: never), then's: a rolling change of settings.
type simLaneTimings struct {
	first, then simTiming
	at          time.Duration
}

// all are the timings the lane's processes run with: first, and then's if
// it changes (then is zero, not the defaults' timings, if it never does).
func (lt simLaneTimings) all() []simTiming {
	if lt.at > 0 {
		return []simTiming{lt.first, lt.then}
	}
	return []simTiming{lt.first}
}

// simClass is a configuration class: its name, its share of the fleets
// (in 100), and how it draws a fleet's shape from defaultShape.
type simClass struct {
	name  string
	share int
	draw  func(rng *rand.Rand, sh *simShape)
}

// simClasses are the configuration classes (see above).
var simClasses = []simClass{
	{"quorum", 10, drawQuorum}, // first: the other classes draw the seeds they drew before it came
	{"tuned", 40, func(*rand.Rand, *simShape) {}},
	{"rolling", 20, rolling},
	{"defaults", 6, func(_ *rand.Rand, sh *simShape) {
		sh.each(func(laneKind) simLaneTimings { return simLaneTimings{} })
		sh.productionSeams()
	}},
	{"production-seams", 4, func(rng *rand.Rand, sh *simShape) {
		ranged(rng, sh)
		sh.productionSeams()
	}},
	{"edges", 2, func(rng *rand.Rand, sh *simShape) {
		tms := map[laneKind]simTiming{}
		for k, leases := range [][2]time.Duration{
			laneNative: {minLeaseDuration, maxLeaseDuration},
			laneETag:   {minETagLeaseDuration, 5 * time.Minute},
			laneShard:  {minETagLeaseDuration, 2 * time.Minute},
		} {
			tms[laneKind(k)] = drawTiming(rng, leases[rng.IntN(2)], true)
		}
		sh.each(func(k laneKind) simLaneTimings { return simLaneTimings{first: tms[k]} })
	}},
	{"mixed", 8, func(rng *rand.Rand, sh *simShape) {
		pairs := map[laneKind][2]simTiming{}
		for _, k := range []laneKind{laneNative, laneETag, laneShard} {
			old, next := rangedTiming(rng, k), rangedTiming(rng, k)
			if k != laneShard && rng.IntN(2) == 0 {
				// The other kind of lease: native and ETag in one election.
				next = rangedTiming(rng, laneNative+laneETag-k)
			}
			pairs[k] = [2]simTiming{old, next}
		}
		seen := map[laneKind]int{}
		sh.each(func(k laneKind) simLaneTimings {
			i := seen[k]
			seen[k]++
			p := pairs[k]
			switch {
			case i == 0:
				return simLaneTimings{first: p[0]}
			case i == 1:
				return simLaneTimings{first: p[1]}
			case rng.IntN(2) == 0:
				return simLaneTimings{first: p[rng.IntN(2)]}
			}
			// Rolled from old to new at a time drawn.
			return simLaneTimings{first: p[0], then: p[1], at: time.Duration(rng.Int64N(int64(sh.length/2 + 1)))}
		})
	}},
	{"long-etag", 5, func(rng *rand.Rand, sh *simShape) {
		etag := simTiming{lease: time.Minute + time.Duration(rng.Int64N(int64(9*time.Minute))).Round(time.Millisecond) + time.Millisecond}
		session := simTiming{lease: time.Minute + time.Duration(rng.Int64N(int64(2*time.Minute))).Round(time.Millisecond)}
		native := simTiming{lease: maxLeaseDuration}
		for _, tm := range []*simTiming{&etag, &session, &native} {
			tm.retry = logUniform(rng, 2*time.Second, 20*time.Second)
		}
		sh.each(func(k laneKind) simLaneTimings {
			return simLaneTimings{first: map[laneKind]simTiming{laneNative: native, laneETag: etag, laneShard: session}[k]}
		})
	}},
	{"ranged", 5, ranged},
}

// rolling is the tuned shape, or in half the fleets the library's
// defaults, under a rolling change of LeaseDuration (see above): each
// election, drawn (at least one), has its contenders change to a new lease
// duration one after another, each from its next start after a time drawn
// (the first in the fleet's first half, the next 0 to 5 minutes apart, of
// an hour: simShapeFor scales them to a shorter fleet), as a deploy
// restarts them; its other timings stay the first shape's, derived from
// the lease as the library derives them.
func rolling(rng *rand.Rand, sh *simShape) {
	before := map[laneKind]simTiming{laneNative: {lease: sh.native, retry: sh.retry}, laneETag: {lease: sh.etag, retry: sh.retry},
		laneShard: {lease: sh.session, retry: sh.shardRetry}}
	sessions := sh.session
	if rng.IntN(2) == 0 {
		// From the library's defaults (every timing 0), as most fleets
		// run before the change: RetryInterval 2 s, sessions of 15 s.
		before = map[laneKind]simTiming{laneNative: {}, laneETag: {}, laneShard: {}}
		sessions = DefaultLeaseDuration
	}
	kinds := []laneKind{laneNative, laneETag, laneShard}
	rolled := map[laneKind]bool{kinds[rng.IntN(3)]: true}
	for _, k := range kinds {
		rolled[k] = rolled[k] || rng.IntN(2) == 0
	}
	next, first, gap := map[laneKind]simTiming{}, map[laneKind]time.Duration{}, map[laneKind]time.Duration{}
	for _, k := range kinds {
		tm := before[k]
		switch k {
		case laneNative:
			tm.lease = minLeaseDuration + time.Duration(rng.IntN(46))*time.Second
		case laneETag:
			// Below the native range, or above it: an ETag lease still.
			tm.lease = logUniform(rng, minETagLeaseDuration, minLeaseDuration-time.Millisecond)
			if rng.IntN(2) == 0 {
				tm.lease = logUniform(rng, maxLeaseDuration+time.Millisecond, 2*time.Minute)
			}
		default:
			// Uniformly: a deploy that lengthens sessions as often
			// lengthens them much.
			tm.lease = sessions/4 + time.Duration(rng.Int64N(int64(5*time.Minute-sessions/4)))
		}
		tm.lease = tm.lease.Round(time.Millisecond)
		next[k] = tm
		first[k] = time.Second + time.Duration(rng.Int64N(int64(sh.length/2)))
		gap[k] = time.Duration(rng.Int64N(int64(5 * time.Minute)))
	}
	seen := map[laneKind]int{}
	sh.each(func(k laneKind) simLaneTimings {
		i := seen[k]
		seen[k]++
		if !rolled[k] {
			return simLaneTimings{first: before[k]}
		}
		return simLaneTimings{first: before[k], then: next[k], at: first[k] + time.Duration(i)*gap[k]}
	})
}

// ranged draws each election's timings within the ranges (see above).
func ranged(rng *rand.Rand, sh *simShape) {
	tms := map[laneKind]simTiming{}
	for _, k := range []laneKind{laneNative, laneETag, laneShard} {
		tms[k] = rangedTiming(rng, k)
	}
	sh.each(func(k laneKind) simLaneTimings { return simLaneTimings{first: tms[k]} })
}

// productionSeams puts every seam at its production value: the library's
// notes poll and stray wait, no waits before a reservation.
func (sh *simShape) productionSeams() {
	sh.notesPoll, sh.strayAfter, sh.reserveWait, sh.noteWait = 0, 0, 0, 0
}

// simShapeFor is the fleet of seed, for a run that asks for fleets of
// length: its class and its timings are drawn from the seed alone, and its
// length follows from them (see cost).
func simShapeFor(seed uint64, length time.Duration) simShape {
	sh := defaultShape
	sh.asked, sh.length = length, length
	rng := rand.New(rand.NewPCG(seed, 0xc0f16))
	x := rng.IntN(100)
	for _, c := range simClasses {
		if x < c.share {
			sh.class = c.name
			c.draw(rng, &sh)
			break
		}
		x -= c.share
	}
	sh.longestTimings()
	sh.drawWeather(seed)
	for _, k := range []laneKind{laneNative, laneETag, laneShard} {
		// A calm lasts at least 2 D + 1.25 B + 2 T + R of each election
		// (the mutex's bound, sim_faultmodel_test.go): a follower that
		// must watch a silent lease for D, and takes it, needs a calm that
		// long, and a long lease (a long-etag fleet's) would otherwise see
		// its followers restarted by the next storm before it could.
		s := sh.longest(k)
		d, r := s.LeaseDuration, s.RetryInterval
		sh.calm = max(sh.calm, (2*d + max(r, min(d, maxLeaseDuration))*5/4 + 2*s.RequestTimeout + r).Round(time.Minute))
	}
	if c, most := sh.cost(), simCostMost*defaultShape.cost(); c > most {
		// A fleet whose instances send many requests (short
		// RetryIntervals and RenewIntervals) runs shorter, so that it
		// costs no more than simCostMost fleets of the tuned shape (in
		// whole minutes; at least one storm and its calm).
		sh.length = max(min(length, sh.storm+sh.calm+30*time.Second),
			(time.Duration(float64(length) * most / c)).Round(time.Minute))
	}
	if sh.length < sh.asked {
		// A change of settings drawn at a time of the length asked for
		// (rolling, mixed) comes at the same share of the fleet's own:
		// else a costly fleet, run shorter, would rarely see it.
		for i := range sh.timings {
			if at := sh.timings[i].at; at > 0 {
				sh.timings[i].at = max(1, time.Duration(float64(at)*float64(sh.length)/float64(sh.asked)))
			}
		}
	}
	if sh.length < sh.storm+sh.calm {
		// A short fleet (the smoke run's) has one storm of a third of it,
		// from the start, and a calm of the rest.
		sh.storm = max(sh.length/3, 2*time.Minute)
		sh.calm = sh.length - sh.storm
	}
	return sh
}

// simCostMost is how many times the requests of a fleet of the tuned shape
// a fleet sends at most (see simShapeFor).
const simCostMost = 1

// simClassOf is the class of seed's fleet.
func simClassOf(seed uint64) string { return simShapeFor(seed, time.Hour).class }

// each sets every lane's timings to what draw gives for its kind, lane by
// lane in the fleet's order.
func (sh *simShape) each(draw func(laneKind) simLaneTimings) {
	sh.timings = sh.timings[:0]
	for k, n := range []int{sh.nativeLanes, sh.etagLanes, sh.shardLanes} {
		for range n {
			sh.timings = append(sh.timings, draw(laneKind(k)))
		}
	}
}

// laneTimings are lane idx's (of kind k): drawn, or, in the tuned shape,
// the shape's lease of its kind and RetryInterval.
func (sh simShape) laneTimings(idx int, k laneKind) simLaneTimings {
	if idx < len(sh.timings) {
		return sh.timings[idx]
	}
	switch k {
	case laneNative:
		return simLaneTimings{first: simTiming{lease: sh.native, retry: sh.retry}}
	case laneETag:
		return simLaneTimings{first: simTiming{lease: sh.etag, retry: sh.retry}}
	}
	return simLaneTimings{first: simTiming{lease: sh.session, retry: sh.shardRetry}}
}

// longest is, for the instances of kind k, the longest of each timing
// (defaults applied) that any of them runs with, old or new: what a
// bound of the election takes.
func (sh simShape) longest(k laneKind) BlobSettings {
	var out BlobSettings
	first := []int{0, sh.nativeLanes, sh.nativeLanes + sh.etagLanes}[k]
	n := []int{sh.nativeLanes, sh.etagLanes, sh.shardLanes}[k]
	for i := first; i < first+n; i++ {
		lt := sh.laneTimings(i, k)
		for _, tm := range lt.all() {
			s := tm.blob().withDefaults()
			out.LeaseDuration = max(out.LeaseDuration, s.LeaseDuration)
			out.RenewInterval = max(out.RenewInterval, s.RenewInterval)
			out.RetryInterval = max(out.RetryInterval, s.RetryInterval)
			out.StopMargin = max(out.StopMargin, s.StopMargin)
			out.RequestTimeout = max(out.RequestTimeout, s.RequestTimeout)
		}
	}
	return out
}

// longestTimings sets the shape's leases and RetryIntervals to the
// longest its instances run with (defaultShape's own, in the tuned shape):
// what the fleet's grace after a deletion, a func's wind-down and the
// bounds take.
func (sh *simShape) longestTimings() {
	nat, et, ses := sh.longest(laneNative), sh.longest(laneETag), sh.longest(laneShard)
	sh.native, sh.etag, sh.session = nat.LeaseDuration, et.LeaseDuration, ses.LeaseDuration
	sh.retry, sh.shardRetry = max(nat.RetryInterval, et.RetryInterval), ses.RetryInterval
}

// timing is the timings lane l's process starting now runs with.
func (f *simFleet) timing(l *simLane) simTiming {
	lt := f.shape.laneTimings(l.idx, l.kind)
	if lt.at > 0 && time.Since(f.begin) >= lt.at {
		return lt.then
	}
	return lt.first
}

// swept is the shape with, in the rolling class, each rolled lane's new
// settings taking effect at the first rolling restart of the plan that
// stops it (fleetTimes), as a rollout applies them in one sweep, rather
// than at the time the class drew (which a lane no such restart reaches
// keeps); a sweep that pauses (sim.RollingRestart's Count) leaves the
// rest on the old settings until another reaches them.
func (sh simShape) swept(plan []sim.Stretch) simShape {
	if sh.class != "rolling" {
		return sh
	}
	sh.timings = slices.Clone(sh.timings)
	done := map[int]bool{}
	for _, st := range plan {
		for _, ft := range st.Faults {
			if ft.Kind != sim.RollingRestart {
				continue
			}
			for j, idx := range sh.faultLanes(ft) {
				if idx < len(sh.timings) && sh.timings[idx].at > 0 && !done[idx] {
					done[idx] = true
					sh.timings[idx].at = rollingStop(ft, j)
				}
			}
		}
	}
	return sh
}

// rangedTiming draws an instance's timings for an election of kind k
// uniformly within the ranges (see "ranged" above).
func rangedTiming(rng *rand.Rand, k laneKind) simTiming {
	var lease time.Duration
	switch k {
	case laneNative:
		lease = minLeaseDuration + time.Duration(rng.IntN(46))*time.Second
	case laneETag:
		// Below or above the native range: a mutex's lease of 15 to 60 s
		// is native, and must be whole seconds.
		lease = logUniform(rng, minETagLeaseDuration, minLeaseDuration-time.Millisecond)
		if rng.IntN(2) == 0 {
			lease = logUniform(rng, maxLeaseDuration+time.Millisecond, 5*time.Minute)
		}
		lease = lease.Round(time.Millisecond)
	default:
		lease = logUniform(rng, minETagLeaseDuration, 2*time.Minute).Round(time.Millisecond)
	}
	tm := drawTiming(rng, lease, false)
	if least := rangedRetry[k]; tm.retry != 0 && tm.retry < least {
		// A follower's RetryInterval is drawn down to least here: below,
		// a fleet costs many times more (a ShardOwner lists the sessions
		// each RetryInterval); the edges reach 100 ms.
		tm.retry = logUniform(rng, least, maxRetryInterval)
	}
	return tm
}

// rangedRetry is the least RetryInterval the ranged draws give an
// instance of each kind.
var rangedRetry = map[laneKind]time.Duration{laneNative: 500 * time.Millisecond, laneETag: 500 * time.Millisecond, laneShard: DefaultRetryInterval}

// drawTiming draws the timings of an instance on a lease of lease: each of
// StopMargin, RenewInterval, RequestTimeout and RetryInterval, in that
// order, its default (a third of the time), or within what validation
// allows given those before it: at its least or its most (edges), or
// between (uniform; RetryInterval log-uniform).
func drawTiming(rng *rand.Rand, lease time.Duration, edges bool) simTiming {
	tm := simTiming{lease: lease}
	pick := func(lo, hi time.Duration, log bool) time.Duration {
		switch {
		case rng.IntN(3) == 0:
			return 0
		case edges && rng.IntN(2) == 0:
			return lo
		case edges:
			return hi
		case log:
			return logUniform(rng, lo, hi)
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	L := lease
	tm.margin = pick(minStopMargin(L), L/2, false)
	M := tm.blob().withDefaults().StopMargin
	tm.renew = pick(minRenewInterval, (L-M)/2, false)
	RI := tm.blob().withDefaults().RenewInterval
	tm.timeout = pick(minRequestTimeout, L-M-RI, false)
	tm.retry = pick(minRetryInterval, maxRetryInterval, true)
	return tm
}

// logUniform draws from lo to hi, log-uniformly.
func logUniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return time.Duration(float64(lo) * math.Exp(rng.Float64()*math.Log(float64(hi)/float64(lo))))
}

// timed is s with the timings lane l's process starting now runs with.
func (f *simFleet) timed(s BlobSettings, l *simLane) BlobSettings {
	tm := f.timing(l).blob()
	s.LeaseDuration, s.RenewInterval, s.RetryInterval = tm.LeaseDuration, tm.RenewInterval, tm.RetryInterval
	s.StopMargin, s.RequestTimeout = tm.StopMargin, tm.RequestTimeout
	return s
}

// simSmokeSeeds are the smoke run's seeds, one of each class: for each
// class in turn, of its first 50 seeds from simSmokeBase on, the one
// whose plan (of simSmokeLength) holds the most kinds of fault that those
// before it lack, and of those the cheapest (cost), so that together they
// hold every kind, in a few seconds.
func simSmokeSeeds() []uint64 {
	var seeds []uint64
	have := map[sim.Kind]bool{}
	kinds := func(seed uint64) map[sim.Kind]bool {
		sh := simShapeFor(seed, simSmokeLength)
		out := map[sim.Kind]bool{}
		for _, st := range sim.NewPlan(seed, sh.plan(simFilesFor(seed, sh).lanes)) {
			for _, ft := range st.Faults {
				out[ft.Kind] = true
			}
		}
		return out
	}
	for _, c := range simClasses {
		best, most, cheapest := uint64(0), -1, math.Inf(1)
		seed := uint64(simSmokeBase)
		for range 50 {
			for simClassOf(seed) != c.name {
				seed++
			}
			n := 0
			for k := range kinds(seed) {
				if !have[k] {
					n++
				}
			}
			if cost := simShapeFor(seed, simSmokeLength).cost(); n > most || n == most && cost < cheapest {
				best, most, cheapest = seed, n, cost
			}
			seed++
		}
		seeds = append(seeds, best)
		maps.Copy(have, kinds(best))
	}
	return seeds
}

// cost is how many requests a second the fleet's instances send, roughly:
// a follower's each RetryInterval, a leader's each RenewInterval, a
// ShardOwner's listings (which cost a few requests each) each
// RetryInterval.
func (sh simShape) cost() float64 {
	c := 0.0
	for i := range sh.nativeLanes + sh.etagLanes + sh.shardLanes {
		k := laneKind(min(i/max(1, sh.nativeLanes), 2))
		if i >= sh.nativeLanes+sh.etagLanes {
			k = laneShard
		}
		s := sh.laneTimings(i, k).first.blob().withDefaults()
		per := 1.0
		if k == laneShard {
			per = 3
		}
		c += per/s.RetryInterval.Seconds() + 1/s.RenewInterval.Seconds()
	}
	return c
}

// describe is the fleet's configuration: its class and each lane's timings
// (0: the default), for a replay's log.
func (sh simShape) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "class %s; %s; seams: notes every %v, strays after %v, reserve waits %v/%v (0: the library's)", sh.class, sh.weather,
		sh.notesPoll, sh.strayAfter, sh.reserveWait, sh.noteWait)
	i := 0
	for k, n := range []int{sh.nativeLanes, sh.etagLanes, sh.shardLanes} {
		for range n {
			lt := sh.laneTimings(i, laneKind(k))
			fmt.Fprintf(&b, "; lane%d %s", i, lt.first)
			if lt.at > 0 {
				fmt.Fprintf(&b, ", from %v %s", lt.at, lt.then)
			}
			i++
		}
	}
	return b.String()
}

func (tm simTiming) String() string {
	return fmt.Sprintf("D %v RI %v R %v SM %v T %v", tm.lease, tm.renew, tm.retry, tm.margin, tm.timeout)
}

// Every configuration drawn is one the library accepts, the same seed
// draws the same, and each class and each weather takes about its share.
func TestSimConfigsAreValidAndDrawnFromTheSeed(t *testing.T) {
	counts := map[string]int{}
	const n = 4000
	for seed := range uint64(n) {
		sh := simShapeFor(seed, time.Hour)
		if again := simShapeFor(seed, time.Hour); !reflect.DeepEqual(sh, again) {
			t.Fatalf("seed %d: drew %s, then %s", seed, sh.describe(), again.describe())
		}
		counts[sh.class]++
		counts[sh.weather]++
		var first time.Duration // the first change of settings, if any
		for _, lt := range sh.timings {
			if lt.at > 0 && (first == 0 || lt.at < first) {
				first = lt.at
			}
		}
		if first > sh.length/2+time.Second {
			// Drawn in the first half of the length asked for, so in the
			// first half of the fleet's own, however much shorter.
			t.Fatalf("seed %d (%s): its first change of settings at %v, in a fleet of %v", seed, sh.class, first, sh.length)
		}
		for i := range sh.nativeLanes + sh.etagLanes + sh.shardLanes {
			k := laneShard
			switch {
			case i < sh.nativeLanes:
				k = laneNative
			case i < sh.nativeLanes+sh.etagLanes:
				k = laneETag
			}
			lt := sh.laneTimings(i, k)
			for _, tm := range []simTiming{lt.first, lt.then} {
				given := tm.blob()
				if err := errors.Join(given.withDefaults().timingErrors(given, k == laneShard)...); err != nil {
					t.Fatalf("seed %d (%s) lane %d: %s: %v", seed, sh.class, i, tm, err)
				}
			}
		}
	}
	for _, c := range simClasses {
		if got := float64(counts[c.name]) / n * 100; math.Abs(got-float64(c.share)) > 3 {
			t.Errorf("class %s: %.1f%% of the fleets, not about %d%%", c.name, got, c.share)
		}
	}
	for w, share := range map[string]int{weatherLight: 25, weatherUsual: 50, weatherHeavy: 25} {
		if got := float64(counts[w]) / n * 100; math.Abs(got-float64(share)) > 3 {
			t.Errorf("%s: %.1f%% of the fleets, not about %d%%", w, got, share)
		}
	}
}

// leaveSet notes, as the fleet's set becomes set, when each shard that
// leaves it does: a shard out of the set need not run, and the recovery
// expected of it since is void (leftSet). Under f.mu.
func (f *simFleet) leaveSet(set []string) {
	for _, shard := range f.set {
		if !slices.Contains(set, shard) {
			f.outOfSet[simContainer+"/"+wire.ShardBlob(simPrefix+"/", shard)] = time.Now()
		}
	}
}

// leftSet reports whether shard election e left the fleet's set after
// from.
func (f *simFleet) leftSet(e string, from time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outOfSet[e].After(from)
}

// simFiles is which of a fleet's lanes have a lease ID file, and whether
// the files are ephemeral (see simFilesFor).
type simFiles struct {
	lanes     []int
	ephemeral bool
	drawn     map[string]int // the draws, each once, for the report (sim.Result.Drawn)
}

// simFilesFor draws, from seed alone, on a stream of its own (so that no
// other draw of the fleet or of its plan changes), which lanes of a fleet
// of shape have a lease ID file: for each kind of lane, none (1 in 4), the
// first only (1 in 2), or every one (1 in 4), as deployments differ (a
// StatefulSet gives every instance a persistent volume, many none); a
// quorum mutex takes none. And whether the files are ephemeral (1 in 3
// fleets): on a volume (a Kubernetes emptyDir, a container's filesystem)
// that a crash and a restart in place keep, but that a fleet fault (a
// redeploy, a rolling restart) loses, as it replaces the pod
// (replacePod). The plan's crashes of a lane with a file are Resumes.
func simFilesFor(seed uint64, shape simShape) simFiles {
	rng := simRngFor(seed, "files")
	fs := simFiles{drawn: map[string]int{}}
	first := 0
	for k, n := range []int{shape.nativeLanes, shape.etagLanes, shape.shardLanes} {
		kind := laneKind(k)
		x := rng.IntN(4) // drawn for every kind, so that each kind's draw is its own
		take, what := 1, "first"
		switch {
		case kind == laneNative && shape.quorum > 0:
			take, what = 0, "none (quorum)"
		case x == 0:
			take, what = 0, "none"
		case x == 3:
			take, what = n, "all"
		}
		if n > 0 {
			for i := range take {
				fs.lanes = append(fs.lanes, first+i)
			}
			fs.drawn[fmt.Sprintf("files %s: %s", [...]string{"native", "etag", "shard"}[k], what)] = 1
		}
		first += n
	}
	fs.ephemeral = rng.IntN(3) == 0
	if fs.ephemeral && len(fs.lanes) > 0 {
		fs.drawn["files ephemeral"] = 1
	}
	return fs
}

// Which lanes have a lease ID file is drawn from the seed alone, about
// each share of the fleets: of each kind none, the first or all (a quorum
// mutex none), and a third of the fleets' files ephemeral.
func TestSimFilesAreDrawnFromTheSeed(t *testing.T) {
	const n = 4000
	counts := map[string]int{}
	for seed := range uint64(n) {
		sh := simShapeFor(seed, time.Hour)
		fs := simFilesFor(seed, sh)
		if !reflect.DeepEqual(fs, simFilesFor(seed, sh)) {
			t.Fatalf("seed %d: two draws", seed)
		}
		if sh.quorum > 0 && slices.ContainsFunc(fs.lanes, func(i int) bool { return i < sh.nativeLanes }) {
			t.Fatalf("seed %d: a quorum mutex with a lease ID file: %v", seed, fs.lanes)
		}
		for d := range fs.drawn {
			counts[d]++
		}
		if fs.ephemeral {
			counts["ephemeral draws"]++
		}
	}
	for kind, of := range map[string]float64{"native": n - float64(counts["files native: none (quorum)"]), "etag": n, "shard": n} {
		for what, share := range map[string]float64{"none": 25, "first": 50, "all": 25} {
			if got := float64(counts["files "+kind+": "+what]) / of * 100; math.Abs(got-share) > 3 {
				t.Errorf("files %s: %s in %.1f%% of the fleets, not about %.0f%%", kind, what, got, share)
			}
		}
	}
	if got := float64(counts["ephemeral draws"]) / n * 100; math.Abs(got-100.0/3) > 3 {
		t.Errorf("ephemeral files in %.1f%% of the fleets, not about a third", got)
	}
}
