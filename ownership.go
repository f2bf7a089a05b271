package leaderelection

import (
	"slices"
	"sort"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/clock"
)

// ownership is what a ShardOwner holds, or may hold, of the shards: the runs
// of their funcs, the claims in flight, the shards it does not claim again
// yet, the leases it must release, the shards whose record cannot be built
// on; and how the runs ended, for the reports and for Run (a shard func's
// panic, a manager's permanent error). Guarded by ownerState.mu, as are a
// shardRun's fields that say they are under it: its methods are called
// under it, by ownerState's (ownerstate.go), which take it.
type ownership struct {
	runs        map[string]*shardRun    // the shards whose func runs here, or is being stopped
	stopped     map[StopReason]int      // shard runs ended since the last report (see reportStopped), by why
	stoppedSeen int                     // how many of them its last call saw
	claiming    map[string]bool         // claims in flight
	cooldown    map[string]time.Time    // shards whose func returned by itself: not claimed again before
	leftover    map[string]string       // shard -> lease ID of a lease this instance may hold and must release
	bad         map[string]*RecordError // shards of the set whose blob's record cannot be built on, by the last listing
	mgrErr      error                   // a permanent error that ended a session's manager
	panicked    any                     // a shard func's panic, to propagate from Run
	panicSet    bool
}

// The panics and errors that end the runs.

// panicking reports whether a shard func panicked. Called under
// ownerState.mu.
func (w *ownership) panicking() bool { return w.panicSet }

// notePanic keeps a shard func's panic p for Run, unless one is kept.
// Called under ownerState.mu.
func (w *ownership) notePanic(p any) {
	if !w.panicSet {
		w.panicked, w.panicSet = p, true
	}
}

// takeMgrErr takes the permanent error that ended a session's manager, if
// any. Called under ownerState.mu.
func (w *ownership) takeMgrErr() error {
	err := w.mgrErr
	w.mgrErr = nil
	return err
}

// sessionEnded keeps for Run a permanent error that ended a session's
// manager (mgrErr, if not nil), and takes a shard func's panic, if one
// came, to propagate. Called under ownerState.mu.
func (w *ownership) sessionEnded(mgrErr error) (p any, panicked bool) {
	if mgrErr != nil {
		w.mgrErr = mgrErr
	}
	p, panicked = w.panicked, w.panicSet
	w.panicked, w.panicSet = nil, false
	return p, panicked
}

// The runs and claims.

// kept reports whether r's func runs and r is not being given up: not
// asked to leave, not returned. Called under ownerState.mu.
func (r *shardRun) kept() bool { return !r.leaving && !r.returned.Load() }

// countRuns is how many of the shards' runs are as is says. Called under
// ownerState.mu.
func (w *ownership) countRuns(is func(*shardRun) bool) int {
	n := 0
	for _, r := range w.runs {
		if is(r) {
			n++
		}
	}
	return n
}

// keptOrClaimed is how many shards this instance holds and keeps, and
// claims in flight. Called under ownerState.mu.
func (w *ownership) keptOrClaimed() int {
	return len(w.claiming) + w.countRuns((*shardRun).kept)
}

// owned is the shards whose func runs here, sorted, those asked to stop
// and not yet returned included (Owned). Called under ownerState.mu.
func (w *ownership) owned() []string {
	out := make([]string, 0, len(w.runs))
	for n, r := range w.runs {
		if !r.returned.Load() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// forHealth is what Healthy reads of the runs: every run, and the shards
// whose record cannot be built on (the one whose blob's name sorts first,
// and how many). Called under ownerState.mu.
func (w *ownership) forHealth() (runs []*shardRun, bad *RecordError, nBad int) {
	for _, e := range w.bad {
		if bad == nil || e.Blob < bad.Blob {
			bad = e
		}
	}
	runs = make([]*shardRun, 0, len(w.runs))
	for _, r := range w.runs {
		runs = append(runs, r)
	}
	return runs, bad, len(w.bad)
}

// heldLines is one line per run (heldLine), in no order: the session's
// list. Called under ownerState.mu.
func (w *ownership) heldLines() []string {
	lines := make([]string, 0, len(w.runs))
	for _, r := range w.runs {
		lines = append(lines, heldLine(r))
	}
	return lines
}

// busy reports whether name's func runs here, or a claim of it is in
// flight. Called under ownerState.mu.
func (w *ownership) busy(name string) bool {
	return w.runs[name] != nil || w.claiming[name]
}

// holds reports whether this instance holds name's lease, or may: running,
// claiming, or with a release left to retry. Called under ownerState.mu.
func (w *ownership) holds(name string) bool {
	_, left := w.leftover[name]
	return w.busy(name) || left
}

// claimable reports whether name is free to claim at now, as far as this
// instance holds it: it does not hold it, or may not (holds), and name is
// past its cooldown. Called under ownerState.mu.
func (w *ownership) claimable(name string, now time.Time) bool {
	return !w.holds(name) && !now.Before(w.cooldown[name])
}

// runOf is name's run here, or nil. Called under ownerState.mu.
func (w *ownership) runOf(name string) *shardRun { return w.runs[name] }

// goneRuns is the runs of shards of set that a listing which started at
// start did not show (seen), claimed before it started. Called under
// ownerState.mu.
func (w *ownership) goneRuns(seen, set map[string]bool, start time.Time) []*shardRun {
	var gone []*shardRun
	for name, r := range w.runs {
		if !seen[name] && set[name] && r.claimed.Before(start) {
			gone = append(gone, r)
		}
	}
	return gone
}

// reserve marks shard name as being claimed, unless it runs here, a claim
// of it is in flight, or skip (if not nil), asked under the same lock,
// says no (see ShardOwner.reserve); it reports whether it did. Called
// under ownerState.mu.
func (w *ownership) reserve(name string, skip func() bool) bool {
	if w.busy(name) || skip != nil && skip() {
		return false
	}
	w.claiming[name] = true
	return true
}

// reserveUpTo reserves up to k of order, in order, that no claim has
// reserved meanwhile, forgetting their cooldown, and returns them. Called
// under ownerState.mu.
func (w *ownership) reserveUpTo(order []string, k int) []string {
	var picked []string
	for _, name := range order {
		if len(picked) == k {
			break
		}
		if w.claiming[name] {
			continue
		}
		delete(w.cooldown, name)
		w.claiming[name] = true
		picked = append(picked, name)
	}
	return picked
}

// unclaim ends a claim of shard name. Called under ownerState.mu.
func (w *ownership) unclaim(name string) { delete(w.claiming, name) }

// addRun makes r its shard's run. Called under ownerState.mu.
func (w *ownership) addRun(r *shardRun) { w.runs[r.name] = r }

// endRun drops the run of shard name, counts why it stopped and, if
// cooldown is not zero (its func returned by itself), lets another instance
// take it first: it is not claimed again before clock.Behind(cooldown).
// Called under ownerState.mu.
func (w *ownership) endRun(name string, reason StopReason, cooldown time.Duration) {
	delete(w.runs, name)
	w.stoppedRun(reason)
	if cooldown != 0 {
		w.cooldown[name] = time.Now().Add(clock.Behind(cooldown))
	}
}

// stoppedRun counts a shard's run that ended, by why. Called under
// ownerState.mu.
func (w *ownership) stoppedRun(reason StopReason) {
	if w.stopped == nil {
		w.stopped = map[StopReason]int{}
	}
	w.stopped[reason]++
}

// stopAll asks every shard func to stop, as one has panicked. Called under
// ownerState.mu.
func (w *ownership) stopAll() {
	for _, r := range w.runs {
		r.ts.pleaseStop(errShardPanicked)
	}
}

// stopRemoved asks the funcs of the shards that left the set (those inSet
// says no of) to stop. Called under ownerState.mu.
func (w *ownership) stopRemoved(inSet func(name string) bool) {
	for name, r := range w.runs {
		if !inSet(name) && r.kept() {
			r.leaving, r.leftAt = true, time.Now()
			r.ts.pleaseStop(ErrShardRemoved)
		}
	}
}

// The handovers given.

// handOver picks k running shards to hand to the sessions of view (this
// session's group) below their share, counted of a set of n shards, and
// marks them (markHandover): those another live session prefers first, the
// sessions below their share before the others, then self's least
// preferred. It returns those with a receiver, in order, for pace; and how
// many it picked. Called under ownerState.mu.
func (w *ownership) handOver(k int, view sessionView, self string, n int) (queue []*shardRun, picked int) {
	type pick struct {
		r    *shardRun
		rank int
		s    uint64
	}
	var picks []pick
	for _, r := range w.runs {
		if !r.kept() {
			continue
		}
		p := pick{r: r, s: balance.Rendezvous(self, r.name)}
		switch pref := balance.Preferred(view.live, r.name); {
		case pref == self:
			p.rank = 2
		case view.owned[pref] < balance.FairShare(n, view.live, pref):
			p.rank = 0
		default:
			p.rank = 1
		}
		picks = append(picks, p)
	}
	sort.Slice(picks, func(i, j int) bool {
		if picks[i].rank != picks[j].rank {
			return picks[i].rank < picks[j].rank
		}
		return picks[i].s < picks[j].s
	})
	picked = min(k, len(picks))
	chosen := make([]*shardRun, 0, picked)
	for _, p := range picks[:picked] {
		chosen = append(chosen, p.r)
	}
	return w.markHandover(chosen, view.live, balance.Plan(view.live, view.owned, n, self, len(chosen)), view.ident), picked
}

// handAllOn picks every run that is not being given up, shares them out
// evenly among others (as many each), and marks them (markHandover), as the
// session leaves; it returns those with a receiver, in order, for pace.
// Called under ownerState.mu.
func (w *ownership) handAllOn(others []string, quota map[string]int, idents map[string]string) []*shardRun {
	var picks []*shardRun
	for _, r := range w.runs {
		if r.kept() {
			picks = append(picks, r)
		}
	}
	for i := range picks {
		quota[others[i%len(others)]]++
	}
	return w.markHandover(picks, others, quota, idents)
}

// markHandover marks the runs picked for a handover, and gives each a
// receiver among live: the one the shard prefers if quota leaves it room,
// else the first with room. It returns those with a receiver, in order, for
// pace; the others are asked to stop at once, and released. Called under
// ownerState.mu.
func (w *ownership) markHandover(picks []*shardRun, live []string, quota map[string]int, idents map[string]string) []*shardRun {
	takers := make([]string, 0, len(quota))
	for id := range quota {
		takers = append(takers, id)
	}
	slices.Sort(takers)
	var queue []*shardRun
	for _, r := range picks {
		r.leaving = true
		to := balance.Preferred(live, r.name)
		if quota[to] == 0 {
			to = ""
			for _, id := range takers {
				if quota[id] > 0 {
					to = id
					break
				}
			}
		}
		if to == "" || idents[to] == "" {
			r.leftAt = time.Now()
			r.ts.pleaseStop(ErrShardHandedOver)
			continue
		}
		quota[to]--
		r.to = &receiver{session: to, identity: idents[to]}
		queue = append(queue, r)
	}
	return queue
}

// The leases to release, and the shards that cannot run.

// addLeftover notes that this instance may hold name's lease, with ID id,
// and must release it. Called under ownerState.mu.
func (w *ownership) addLeftover(name, id string) { w.leftover[name] = id }

// leftovers is up to k of the leases left to release. Called under
// ownerState.mu.
func (w *ownership) leftovers(k int) map[string]string {
	left := make(map[string]string, len(w.leftover))
	for n, id := range w.leftover {
		if len(left) == k {
			break
		}
		left[n] = id
	}
	return left
}

// releasedLeftover forgets name's leftover lease, released, unless it is
// one with another ID now. Called under ownerState.mu.
func (w *ownership) releasedLeftover(name, id string) {
	if w.leftover[name] == id {
		delete(w.leftover, name)
	}
}

// takeLeftovers takes every lease left to release. Called under
// ownerState.mu.
func (w *ownership) takeLeftovers() map[string]string {
	left := w.leftover
	w.leftover = map[string]string{}
	return left
}

// markBad notes what a read of shard name's blob tells of its record: p,
// the problem no term can follow, or nil; and returns what it noted before.
// Called under ownerState.mu.
func (w *ownership) markBad(name string, p *RecordError) (old *RecordError, was bool) {
	old, was = w.bad[name]
	if p != nil {
		w.bad[name] = p
	} else {
		delete(w.bad, name)
	}
	return old, was
}

// replaceBad makes bad the shards whose record cannot be built on, and
// returns those it replaces. Called under ownerState.mu.
func (w *ownership) replaceBad(bad map[string]*RecordError) map[string]*RecordError {
	old := w.bad
	w.bad = bad
	return old
}

// How the runs ended, for the logs (shardlog.go).

// settleTook sets took shards claimed since the last report, freed of them
// released by a peer, against the runs that returned by themselves since
// the last report of stopped shards (see shardManager.reportTook). It
// returns how many shards run here, and whether the take is routine: no
// more than those. Called under ownerState.mu.
func (w *ownership) settleTook(took, freed int64) (running int, routine bool) {
	running = len(w.runs)
	returned := w.stopped[ReasonFuncReturned]
	routine = took-freed <= int64(returned)
	left := returned
	if routine {
		left -= int(took - freed)
	}
	// No more of the others can come back than this session's shards still
	// waiting out their cooldown (claim forgets a shard's as it picks it):
	// one that another session took stays there.
	left = min(left, len(w.cooldown))
	if left != returned {
		w.stoppedSeen -= returned - left // no run stopped: nothing to settle
		w.stopped[ReasonFuncReturned] = left
		if left == 0 {
			delete(w.stopped, ReasonFuncReturned)
		}
	}
	return running, routine
}

// slowToLeave marks the runs asked to leave more than margin ago whose
// func is still running, and not marked yet, and returns how many, and
// when the first of them was asked. Called under ownerState.mu.
func (w *ownership) slowToLeave(margin time.Duration) (n int, oldest time.Time) {
	for _, r := range w.runs {
		if !r.leaving || r.leftAt.IsZero() || r.slowSaid || r.returned.Load() || time.Since(r.leftAt) < margin {
			continue
		}
		r.slowSaid = true
		n++
		if oldest.IsZero() || r.leftAt.Before(oldest) {
			oldest = r.leftAt
		}
	}
	return n, oldest
}

// takeStopped takes the count of the runs that ended since the last report,
// by why, and how many run now; unless final, only once no run has stopped
// since its last call and none asked to leave is still stopping, and not
// while only runs that returned by themselves ended (see
// ShardOwner.reportStopped): ok is false then. Called under ownerState.mu.
func (w *ownership) takeStopped(final bool) (stopped map[StopReason]int, running int, ok bool) {
	n := 0
	for _, c := range w.stopped {
		n += c
	}
	settling := n != w.stoppedSeen
	w.stoppedSeen = n
	for _, r := range w.runs {
		settling = settling || r.leaving && !r.returned.Load() && !r.slowSaid
	}
	routine := len(w.stopped) == 1 && w.stopped[ReasonFuncReturned] > 0
	if (settling || routine) && !final {
		return nil, 0, false
	}
	w.stoppedSeen = 0
	stopped = w.stopped
	w.stopped = nil
	return stopped, len(w.runs), true
}
