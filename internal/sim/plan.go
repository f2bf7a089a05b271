package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults a plan draws. Lane faults hit one instance's process or its
// path to storage; fleet faults (Redeploy, RollingRestart) stop and start
// again every instance of a kind, or of the fleet, as deployments do; the
// others hit storage itself, or the fleet's set.
const (
	// Crash: the lane's process dies: nothing it sends reaches storage
	// again (but requests already held in the network by Late), nothing is
	// released; it starts again at Until (with its lease ID file, if it
	// has one: see Resume).
	Crash Kind = "crash"
	// Resume: a crash of a lane that has a lease ID file; it starts again
	// at Until with that file (a resumed lease ID).
	Resume Kind = "crash+resume"
	// CrashInStep: from At to Until, a share Rate of the lane's requests
	// that change storage (native lease renewals aside) is its process's last
	// (faults.Rates.Die): it dies as that request is applied, inside a
	// step of several requests (a handover's record and its lease change,
	// say), as Crash leaves it, and starts again Delay later (by Until at
	// the latest). One death a fault; none if no request was drawn.
	CrashInStep Kind = "crash-in-step"
	// Stop: the lane's process stops gracefully (its caller ends Run), and
	// starts again at Until.
	Stop Kind = "stop"
	// Partition: the lane is cut off from storage until Until: requests
	// and the answers of those in flight are held until their caller
	// gives up.
	Partition Kind = "partition"
	// Slow: every request of the lane waits Delay before it is sent.
	Slow Kind = "slow"
	// LoseAnswers: a share Rate of the lane's requests are applied and
	// their answers lost.
	LoseAnswers Kind = "lose-answer"
	// Late: a share Rate of the lane's requests are held in the network
	// and applied later (up to LateMax), after their caller gave up and
	// after requests it sent later.
	Late Kind = "late-apply"
	// Throttle: a share Rate of the lane's requests get Status (503
	// ServerBusy or 429 TooManyRequests), not applied.
	Throttle Kind = "throttle"
	// Failing: a share Rate of the lane's requests get 500 InternalError,
	// not applied.
	Failing Kind = "failing"
	// DeleteBlob: election Target's blob is deleted, as Azure deletes a
	// blob: once it is not leased (a delete without the lease ID fails on
	// a leased blob; the driver tries for a while).
	DeleteBlob Kind = "delete-blob"
	// DeleteContainer: the fleet's container is deleted.
	DeleteContainer Kind = "delete-container"
	// Malform: election Target's record is made malformed (a term that
	// does not read); an operator repairs it from Until on, once nobody
	// holds its lease.
	Malform Kind = "malform"
	// SetShards: the shard set changes to Target shards, on one shard lane
	// after another, from At to Until.
	SetShards Kind = "set-shards"
	// Redeploy: every instance of group Target (Shape.Groups: the lanes
	// of one kind), or of the fleet (Target -1), is stopped gracefully
	// (SIGTERM) at about the same time, down a while, then started again
	// together, as a Recreate deployment, a scale to zero and back, or a
	// node pool's restart does: each stops between At and At+Gap, and
	// starts again between Until and Until+Delay (each instance's own
	// times drawn by the driver from the seed).
	Redeploy Kind = "redeploy"
	// RollingRestart: the instances of group Target (or of the fleet,
	// -1), in turn, each stopped gracefully and started again Delay
	// later, Gap after the one before it (the first at At), as a
	// Deployment's RollingUpdate restarts them; a rolling change of
	// settings takes effect in such a sweep. If Count is not 0, the sweep
	// pauses after its first Count instances, as a paused or failed
	// rollout leaves a fleet: old and new side by side until another.
	RollingRestart Kind = "rolling-restart"
)

// rateKinds are the lane faults that hit a share of the requests. One
// time in three, such a fault hits requests of one kind only (Fault.Ops,
// one of RequestKinds): a lane whose listings fail while its renewals go
// through, as on an account whose List Blobs is throttled, or behind a
// proxy that times out on long answers; whose lease actions are lost
// while its reads answer. Its instance then acts on, alive to the others,
// with part of its view of storage stale.
var rateKinds = []Kind{LoseAnswers, Late, Throttle, Failing}

// RequestKinds are the kinds of request a rate fault may be narrowed to
// (Fault.Ops): internal/faults' OpOf tells them apart by the same names.
var RequestKinds = []string{"listings", "lease actions", "reads", "writes"}

// Per-request kinds: what a lane fault with a rate did to one request.
// The report counts these as injected faults, one per request.
const (
	ReqLost      = "answer lost"
	ReqLate      = "applied late"
	ReqThrottled = "throttled"
	ReqFailed    = "failed (500)"
)

// Fault is one fault of a plan. Times are from the fleet's start.
type Fault struct {
	At, Until time.Duration
	Kind      Kind
	Lane      int // the lane hit, or -1
	Target    int // the election (DeleteBlob, Malform), or the new set's size (SetShards)
	Rate      float64
	Status    int           // Throttle's status
	Delay     time.Duration // Slow's latency; how long CrashInStep's process stays dead; Redeploy's start spread, RollingRestart's time down
	Gap       time.Duration // Redeploy's stop spread; RollingRestart's time between two instances
	Count     int           // RollingRestart: the instances it restarts before it pauses (0: all)
	Ops       string        // a rate fault's kind of request (one of RequestKinds); "": every request
}

func (f Fault) String() string {
	s := fmt.Sprintf("%7.1fs %-16s", f.At.Seconds(), f.Kind)
	if f.Lane >= 0 {
		s += fmt.Sprintf(" lane %d", f.Lane)
	}
	switch f.Kind {
	case DeleteBlob, Malform:
		s += fmt.Sprintf(" election %d", f.Target)
	case SetShards:
		s += fmt.Sprintf(" to %d shards", f.Target)
	case LoseAnswers, Late, Failing, CrashInStep:
		s += fmt.Sprintf(" rate %.2f", f.Rate)
	case Throttle:
		s += fmt.Sprintf(" rate %.2f status %d", f.Rate, f.Status)
	case Slow:
		s += fmt.Sprintf(" delay %v", f.Delay)
	case Redeploy:
		s += fmt.Sprintf(" %s, stops within %v, starts within %v", group(f.Target), f.Gap, f.Delay)
	case RollingRestart:
		s += fmt.Sprintf(" %s, each down %v, %v apart", group(f.Target), f.Delay, f.Gap)
		if f.Count > 0 {
			s += fmt.Sprintf(", paused after %d", f.Count)
		}
	}
	if f.Kind == CrashInStep {
		s += fmt.Sprintf(" dead %v", f.Delay)
	}
	if f.Ops != "" {
		s += " on " + f.Ops + " only"
	}
	if f.Until > f.At {
		s += fmt.Sprintf(" until %.1fs", f.Until.Seconds())
	}
	return s
}

// group names a fleet fault's Target.
func group(target int) string {
	if target < 0 {
		return "the fleet"
	}
	return fmt.Sprintf("group %d", target)
}

// Stretch is a storm of faults from Start, then a calm from Calm to End:
// by Calm every fault has ended (lanes restarted, rates off, late
// requests applied), and the checker expects every election to run again
// within its bound of Calm.
type Stretch struct {
	Start, Calm, End time.Duration
	Faults           []Fault
}

// Shape is what a plan is drawn for.
type Shape struct {
	Lanes      int   // lanes 0..Lanes-1
	FileLanes  []int // lanes that have a lease ID file (their crashes are Resume)
	Elections  int   // elections 0..Elections-1 that DeleteBlob may hit
	Malformed  int   // elections 0..Malformed-1 that Malform may hit
	ShardSets  [2]int
	Storm      time.Duration
	Calm       time.Duration
	Length     time.Duration // the fleet's simulated time
	PerStorm   int           // lane faults per storm, on average
	LateMax    time.Duration // how late a Late request may be applied
	StorageOdd float64       // the chance a storm opens with a deletion (blob or container)
	MalformOdd float64       // the chance a storm has a malformed record
	SetOdd     float64       // the chance a storm changes the shard set
	// Groups are the lanes of each kind (in order): what a fleet fault
	// (Redeploy, RollingRestart) hits, one group or all.
	Groups   [][]int
	FleetOdd float64 // the chance a storm has a fleet fault
}

// laneKinds are the lane faults, by weight.
var laneKinds = []struct {
	kind   Kind
	weight int
}{
	{Crash, 3}, {CrashInStep, 3}, {Stop, 2}, {Partition, 3}, {Slow, 2},
	{LoseAnswers, 3}, {Late, 3}, {Throttle, 3}, {Failing, 2},
}

// NewPlan draws a fleet's faults from seed: the same seed and shape give
// the same plan.
func NewPlan(seed uint64, sh Shape) []Stretch {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration { return drawBetween(rng, lo, hi) }
	// The fleet faults draw from a stream of their own: the plan's other
	// draws stay what they were before they came.
	ops := rand.New(rand.NewPCG(seed, seed^0x7f4a7c159e3779b9))
	// So do the kinds of request a rate fault is narrowed to.
	narrow := rand.New(rand.NewPCG(seed, seed^0x3779b97f4a7c159e))
	total := 0
	for _, k := range laneKinds {
		total += k.weight
	}
	var out []Stretch
	for start := time.Duration(0); start+sh.Storm+sh.Calm <= sh.Length; start += sh.Storm + sh.Calm {
		st := Stretch{Start: start, Calm: start + sh.Storm, End: start + sh.Storm + sh.Calm}
		// The first storm begins as the fleet starts: a cold start meets
		// faults too (a deploy into a storage incident), and its first
		// steps (the container's creation, the first acquires, records
		// and claims, sessions that begin to run shards before their
		// peers have listed them) are as open to them as any later. Until
		// 2026-11-30 it began after a settling minute, which held every
		// fault back with no stated limit naming it.
		end := st.Calm
		if rng.Float64() < sh.StorageOdd {
			// A deletion opens the storm, after a calm in which every
			// election ran; the first storm's, a minute in, once every
			// election has run (one before would be held back: a deletion
			// no running instance saw). The driver holds back whatever
			// would take it out of the library's promise (a blob deleted
			// while no instance that saw its terms runs, or created again
			// first by one that never saw them: renew.go's stated limit):
			// it decides that as it goes, as it depends on who saw what.
			at := max(start, time.Minute) + between(2*time.Second, 10*time.Second)
			f := Fault{At: at, Until: at, Kind: DeleteContainer, Lane: -1}
			if sh.Elections > 0 && rng.IntN(3) > 0 {
				f.Kind, f.Target = DeleteBlob, rng.IntN(sh.Elections)
			}
			st.Faults = append(st.Faults, f)
		}
		if sh.Malformed > 0 && rng.Float64() < sh.MalformOdd {
			at := between(start, end-sh.Storm/2)
			st.Faults = append(st.Faults, Fault{At: at, Until: at + between(5*time.Second, 30*time.Second), Kind: Malform, Lane: -1, Target: rng.IntN(sh.Malformed)})
		}
		if sh.ShardSets[1] > 0 && rng.Float64() < sh.SetOdd {
			at := between(start, end-sh.Storm/3)
			size := sh.ShardSets[0] + rng.IntN(sh.ShardSets[1]-sh.ShardSets[0]+1)
			st.Faults = append(st.Faults, Fault{At: at, Until: at + between(0, 20*time.Second), Kind: SetShards, Lane: -1, Target: size})
		}
		if len(sh.Groups) > 0 && ops.Float64() < sh.FleetOdd {
			st.Faults = append(st.Faults, fleetFault(ops, sh, start, end-5*time.Second))
		}
		n := sh.PerStorm/2 + rng.IntN(sh.PerStorm+1)
		for range n {
			x := rng.IntN(total)
			var kind Kind
			for _, k := range laneKinds {
				if x < k.weight {
					kind = k.kind
					break
				}
				x -= k.weight
			}
			lane := rng.IntN(sh.Lanes)
			f := Fault{Kind: kind, Lane: lane}
			last := end - 5*time.Second
			if kind == Late {
				last = end - sh.LateMax - time.Second
			}
			f.At = between(start, last-5*time.Second)
			f.Until = min(last, f.At+between(3*time.Second, 60*time.Second))
			if slices.Contains(rateKinds, kind) && narrow.IntN(3) == 0 {
				f.Ops = RequestKinds[narrow.IntN(len(RequestKinds))]
			}
			switch kind {
			case Crash:
				if slices.Contains(sh.FileLanes, lane) {
					f.Kind = Resume
				}
			case CrashInStep:
				// Armed to the storm's end: steps of several requests come
				// seldom (a claim, a handover, a term's record).
				f.Until, f.Rate = last, 0.1+0.6*rng.Float64()
				f.Delay = between(3*time.Second, 30*time.Second)
			case LoseAnswers:
				f.Rate = 0.1 + 0.4*rng.Float64()
			case Late:
				f.Rate = 0.05 + 0.25*rng.Float64()
			case Throttle:
				f.Rate = 0.2 + 0.7*rng.Float64()
				f.Status = 503
				if rng.IntN(2) == 0 {
					f.Status = 429
				}
			case Failing:
				f.Rate = 0.2 + 0.6*rng.Float64()
			case Slow:
				f.Delay = between(100*time.Millisecond, 3*time.Second)
			}
			st.Faults = append(st.Faults, f)
		}
		slices.SortStableFunc(st.Faults, func(a, b Fault) int { return int(a.At - b.At) })
		out = append(out, st)
	}
	return out
}

// fleetFault draws a fleet fault (Redeploy or RollingRestart) of a storm,
// between from and last: one group (a kind of instance), or, a third of
// the time, the whole fleet.
func fleetFault(rng *rand.Rand, sh Shape, from, last time.Duration) Fault {
	between := func(lo, hi time.Duration) time.Duration { return drawBetween(rng, lo, hi) }
	f := Fault{Kind: Redeploy, Lane: -1, Target: -1}
	n := sh.Lanes
	if rng.IntN(3) > 0 {
		f.Target = rng.IntN(len(sh.Groups))
		n = len(sh.Groups[f.Target])
	}
	if rng.IntN(5) < 2 {
		// A rolling restart: each instance down 0 to 5 s (its old pod's
		// stop, its new pod's start), 1 to 30 s after the one before it,
		// the sweep within the storm; one in three pauses after 1 to n-1
		// of its n instances.
		f.Kind = RollingRestart
		if n > 1 && rng.IntN(3) == 0 {
			f.Count = 1 + rng.IntN(n-1)
			n = f.Count
		}
		f.Delay = between(0, 5*time.Second)
		span := last - from - f.Delay
		f.Gap = between(time.Second, min(30*time.Second, span/time.Duration(max(1, n))))
		f.At = between(from, last-f.Delay-f.Gap*time.Duration(max(0, n-1)))
		f.Until = f.At + f.Gap*time.Duration(max(0, n-1)) + f.Delay
		return f
	}
	// Stopped within 0 to 3 s, down 0 to 60 s, started within 0 to 3 s.
	f.Gap, f.Delay = between(0, 3*time.Second), between(0, 3*time.Second)
	down := between(0, time.Minute)
	f.At = between(from, last-f.Gap-down-f.Delay)
	f.Until = f.At + f.Gap + down
	return f
}

// drawBetween is a duration drawn from rng in [lo, hi), or lo if the range
// is empty.
func drawBetween(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}
