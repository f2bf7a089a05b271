package leaderelection

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/clock"
)

// A ShardOwner's shared state (ownerState) and its methods: with those in
// shardstate.go (termMemory's, and the reports of how runs ended), the only
// code that takes its lock. The rest of the shard tier calls them; each does
// under one lock what its caller did under the lock before the lock moved
// here (issue 40), but for three that hold it for less, none of which any
// other goroutine could tell: handOver starts the pacing, adds its metric and
// logs after its unlock (the pacing is the session goroutine's own, and no
// log line is written under mu, below); and probeUnlisted, takeFromDead and
// pickUpTo write the session's candidates outside it (only the session's
// goroutine touches them; freeOf and startRun check the set again under mu).

// ownerState is the part of a ShardOwner that its goroutines share: the set
// of shards and the current session (membership), the shards' runs, claims
// and leases to release (ownership), what it knows of the shards' terms and
// of a deletion it saw (terms), and a shardRun's fields that say they are
// under it; with the one lock that guards them all. The goroutines: the
// session's loop, the shard runs (their end, their panic), the adoptions,
// the handovers' pacing, the claim workers (claimPicked, takeEach,
// probeUnlisted, seedTerms: reserve, unclaim, proposeTerm, seeTerm,
// startRun), the session lease's record write (extraMetadata), the caller's
// calls (SetShards, Shards, Owned, Session, Healthy; from an event handler
// too, under eventMu) and the metrics' callback.
//
// Lock order: no code of the shard tier holds another lock as it takes mu,
// and mu is held for memory only, never across a request, a log line or an
// event. Under it, its methods take: a session's ownTerms.termsMu
// (reserve's skip, adoptOne's), the ownerless shards' lock (gauges), a
// shard func's context's, asking it to stop (stopRemoved, stopAll,
// markHandover), a context's, asking whether it ended (startRun), and
// clock's source, drawing a cooldown (endRun); none of those takes mu.
type ownerState struct {
	mu         sync.Mutex
	membership membership   // the set of shards, the current session and its share (below)
	ownership  ownership    // the shards' runs, claims and leases to release, and how runs ended (shardrun.go)
	terms      termMemory   // the floors of the shards' terms, and the quiet after a deletion (shardstate.go, shardfloors.go)
	fleet      *fleetMemory // the owner's atomics, which publishSeen raises under mu
}

// membership is what this instance runs and where it stands: the set of
// shards (and the one before the last change), its session, and its share
// among the live sessions by the last balance. Guarded by ownerState.mu.
type membership struct {
	set      map[string]bool // the shards to run
	digest   string          // set's digest (see balance.SetDigest), which the session's record carries
	previous setID           // the set before the last change (see balance)
	setAt    time.Time       // when the set last changed
	current  *session
	target   int
	live     int
}

// ownership is what a ShardOwner holds, or may hold, of the shards: the runs
// of their funcs, the claims in flight, the shards it does not claim again
// yet, the leases it must release, the shards whose record cannot be built
// on; and how the runs ended, for the reports and for Run (a shard func's
// panic, a manager's permanent error). Guarded by ownerState.mu.
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

// newOwnerState is the state of a ShardOwner that runs set, whose
// atomics are fleet's.
func newOwnerState(set map[string]bool, fleet *fleetMemory) ownerState {
	return ownerState{
		membership: membership{set: set, digest: balance.SetDigest(set)},
		ownership: ownership{
			runs:     map[string]*shardRun{},
			claiming: map[string]bool{},
			cooldown: map[string]time.Time{},
			leftover: map[string]string{},
			bad:      map[string]*RecordError{},
		},
		terms: termMemory{
			floors:    map[string]int64{},
			proposed:  map[string]int64{},
			recreated: map[string]*freshWatch{},
		},
		fleet: fleet,
	}
}

// The set and the session (membership).

// setShards makes set, whose digest is digest, the set to run (SetShards),
// keeping the one before if it differs.
func (st *ownerState) setShards(set map[string]bool, digest string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := &st.membership
	if digest != m.digest {
		m.previous, m.setAt = setID{m.digest, len(m.set)}, time.Now()
	}
	m.set, m.digest = set, digest
}

// shards is the set, sorted.
func (st *ownerState) shards() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]string, 0, len(st.membership.set))
	for n := range st.membership.set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// setCopy is a copy of the set.
func (st *ownerState) setCopy() map[string]bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	set := make(map[string]bool, len(st.membership.set))
	for n := range st.membership.set {
		set[n] = true
	}
	return set
}

// setSummary is the set's digest and size, which the session's record
// carries.
func (st *ownerState) setSummary() (digest string, size int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.digest, len(st.membership.set)
}

// inSet reports whether name is in the set.
func (st *ownerState) inSet(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.set[name]
}

// whichInSet is those of names in the set, all read under one lock.
func (st *ownerState) whichInSet(names []string) map[string]bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	in := map[string]bool{}
	for _, name := range names {
		if st.membership.set[name] {
			in[name] = true
		}
	}
	return in
}

// sessionID is the current session's ID, "" between sessions.
func (st *ownerState) sessionID() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.membership.current == nil {
		return ""
	}
	return st.membership.current.id
}

// setCurrent makes s the current session.
func (st *ownerState) setCurrent(s *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.membership.current = s
}

// endSession ends the current session (manage's end): none is current, a
// permanent error that ended its manager (mgrErr, if not nil) is kept for
// Run, and a shard func's panic, if one came, is taken to propagate.
func (st *ownerState) endSession(mgrErr error) (p any, panicked bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.membership.current = nil
	if mgrErr != nil {
		st.ownership.mgrErr = mgrErr
	}
	p, panicked = st.ownership.panicked, st.ownership.panicSet
	st.ownership.panicked, st.ownership.panicSet = nil, false
	return p, panicked
}

// tallied is what tally reads of the set and of what this instance holds,
// under one lock with the share it sets.
type tallied struct {
	n        int
	digest   string
	sets     []setID     // the sets this session's group runs: its own, and the one before if it changed within the window
	changing bool        // the set changed within the window
	own      int         // shards it holds and keeps, and claims in flight
	mine     sessionView // the session's group: the sessions of view that run one of sets
}

// tally reads, under one lock, the set, the set before it if it changed
// within window (see shardManager.tally), and how many shards this instance
// holds and keeps or claims; and sets its share among its group of view (the
// sessions that run one of those sets) and the live sessions' count.
func (st *ownerState) tally(view sessionView, self string, window time.Duration) tallied {
	st.mu.Lock()
	defer st.mu.Unlock()
	t := tallied{n: len(st.membership.set), digest: st.membership.digest}
	t.sets = []setID{{t.digest, t.n}}
	t.changing = time.Since(st.membership.setAt) < window
	if t.changing {
		t.sets = append(t.sets, st.membership.previous)
	}
	t.own = len(st.ownership.claiming)
	for _, r := range st.ownership.runs {
		if !r.leaving && !r.returned.Load() {
			t.own++
		}
	}
	t.mine = view.group(self, t.sets...)
	st.membership.target, st.membership.live = balance.FairShare(t.n, t.mine.live, self), len(view.live)
	return t
}

// gauges is what the metrics' callback observes: this instance's share, the
// live sessions, and how many of the ownerless shards (seen) are in the set,
// as of when.
func (st *ownerState) gauges(seen *ownerless) (target, live, unowned int, listed time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	unowned, listed = seen.count(st.membership.set)
	return st.membership.target, st.membership.live, unowned, listed
}

// The runs and claims (ownership).

// panicking reports whether a shard func panicked.
func (st *ownerState) panicking() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.panicSet
}

// notePanic keeps a shard func's panic p for Run, unless one is kept.
func (st *ownerState) notePanic(p any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.ownership.panicSet {
		st.ownership.panicked, st.ownership.panicSet = p, true
	}
}

// takeMgrErr takes the permanent error that ended a session's manager, if
// any.
func (st *ownerState) takeMgrErr() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	err := st.ownership.mgrErr
	st.ownership.mgrErr = nil
	return err
}

// ownedCount is how many shards this instance holds and keeps: running, not
// being given up. A session's record publishes it.
func (st *ownerState) ownedCount() int {
	return st.countRuns(func(r *shardRun) bool { return !r.leaving && !r.returned.Load() })
}

// handingCount is how many shards this instance is handing over: asked to
// stop for a handover, with a receiver, and not handed on yet (see
// markHandover). Its session's record says so, as ownedCount no longer
// counts them: the receivers then know that shards are on their way.
func (st *ownerState) handingCount() int {
	return st.countRuns(func(r *shardRun) bool { return r.leaving && r.to != nil })
}

// countRuns is how many of the shards' runs are as is says, counted under mu.
func (st *ownerState) countRuns(is func(*shardRun) bool) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, r := range st.ownership.runs {
		if is(r) {
			n++
		}
	}
	return n
}

// owned is the shards whose func runs here, sorted, those asked to stop
// and not yet returned included (Owned).
func (st *ownerState) owned() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]string, 0, len(st.ownership.runs))
	for n, r := range st.ownership.runs {
		if !r.returned.Load() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// forHealth is what Healthy reads: every run, the shards whose record
// cannot be built on (the one whose blob's name sorts first, and how many),
// and the current session.
func (st *ownerState) forHealth() (runs []*shardRun, bad *RecordError, nBad int, current *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, e := range st.ownership.bad {
		if bad == nil || e.Blob < bad.Blob {
			bad = e
		}
	}
	runs = make([]*shardRun, 0, len(st.ownership.runs))
	for _, r := range st.ownership.runs {
		runs = append(runs, r)
	}
	return runs, bad, len(st.ownership.bad), st.membership.current
}

// heldLines is one line per run (heldLine), in no order: the session's list.
func (st *ownerState) heldLines() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	lines := make([]string, 0, len(st.ownership.runs))
	for _, r := range st.ownership.runs {
		lines = append(lines, heldLine(r))
	}
	return lines
}

// holds reports whether this instance holds name's lease, or may: running,
// claiming, or with a release left to retry.
func (st *ownerState) holds(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, left := st.ownership.leftover[name]
	return st.ownership.runs[name] != nil || st.ownership.claiming[name] || left
}

// isRunning reports whether this instance runs name's func.
func (st *ownerState) isRunning(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.runs[name] != nil
}

// runOf is name's run here, or nil.
func (st *ownerState) runOf(name string) *shardRun {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.runs[name]
}

// goneRuns is the runs of shards of set that a listing which started at
// start did not show (seen), claimed before it started.
func (st *ownerState) goneRuns(seen, set map[string]bool, start time.Time) []*shardRun {
	st.mu.Lock()
	defer st.mu.Unlock()
	var gone []*shardRun
	for name, r := range st.ownership.runs {
		if !seen[name] && set[name] && r.claimed.Before(start) {
			gone = append(gone, r)
		}
	}
	return gone
}

// unnamed is the shards of the set that named (the sessions' lists) does
// not name, and that this instance neither runs nor claims.
func (st *ownerState) unnamed(named map[string]bool) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for name := range st.membership.set {
		if !named[name] && st.ownership.runs[name] == nil && !st.ownership.claiming[name] {
			out = append(out, name)
		}
	}
	return out
}

// freeOf is the size of the set, and those of cands (a session's
// candidates) free to claim now: in the set, not running here, nor being
// claimed, with no release left to retry, and past their cooldown at now.
func (st *ownerState) freeOf(cands map[string]candidate, now time.Time) (n int, free []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	free = make([]string, 0, len(cands))
	for name := range cands {
		_, left := st.ownership.leftover[name]
		if !st.membership.set[name] || st.ownership.runs[name] != nil || st.ownership.claiming[name] || left || now.Before(st.ownership.cooldown[name]) {
			continue
		}
		free = append(free, name)
	}
	return len(st.membership.set), free
}

// reserve marks shard name as being claimed, unless it runs here, a claim
// of it is in flight, or skip (if not nil), asked under the same lock,
// says no (see ShardOwner.reserve); it reports whether it did.
func (st *ownerState) reserve(name string, skip func() bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ownership.runs[name] != nil || st.ownership.claiming[name] || skip != nil && skip() {
		return false
	}
	st.ownership.claiming[name] = true
	return true
}

// reserveUpTo reserves up to k of order, in order, that no claim has
// reserved meanwhile, forgetting their cooldown, and returns them.
func (st *ownerState) reserveUpTo(order []string, k int) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var picked []string
	for _, name := range order {
		if len(picked) == k {
			break
		}
		if st.ownership.claiming[name] {
			continue
		}
		delete(st.ownership.cooldown, name)
		st.ownership.claiming[name] = true
		picked = append(picked, name)
	}
	return picked
}

// unclaim ends a claim of shard name that starts no func.
func (st *ownerState) unclaim(name string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.ownership.claiming, name)
}

// startRun ends the claim of r's shard and makes r its run, unless the
// shard left the set, shardsCtx ended or session s is leaving, asked under
// the same lock; it reports whether it did.
func (st *ownerState) startRun(r *shardRun, shardsCtx context.Context, s *session) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.ownership.claiming, r.name)
	if !st.membership.set[r.name] || shardsCtx.Err() != nil || s.leaving.Load() {
		return false
	}
	st.ownership.runs[r.name] = r
	return true
}

// endRun drops the run of shard name, counts why it stopped and, if
// cooldown is not zero (its func returned by itself), lets another instance
// take it first: it is not claimed again before clock.Behind(cooldown).
func (st *ownerState) endRun(name string, reason StopReason, cooldown time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.ownership.runs, name)
	st.ownership.stoppedRun(reason)
	if cooldown != 0 {
		st.ownership.cooldown[name] = time.Now().Add(clock.Behind(cooldown))
	}
}

// stoppedRun counts a shard's run that ended, by why; under ownerState.mu.
func (w *ownership) stoppedRun(reason StopReason) {
	if w.stopped == nil {
		w.stopped = map[StopReason]int{}
	}
	w.stopped[reason]++
}

// stopAll asks every shard func to stop, as one has panicked.
func (st *ownerState) stopAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, r := range st.ownership.runs {
		r.ts.pleaseStop(errShardPanicked)
	}
}

// stopRemoved asks the funcs of the shards that left the set to stop, and
// drops from cands (a session's candidates) the shards not in the set, by
// the same reading of it.
func (st *ownerState) stopRemoved(cands map[string]candidate) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for name, r := range st.ownership.runs {
		if !st.membership.set[name] && !r.leaving && !r.returned.Load() {
			r.leaving, r.leftAt = true, time.Now()
			r.ts.pleaseStop(ErrShardRemoved)
		}
	}
	for name := range cands {
		if !st.membership.set[name] {
			delete(cands, name)
		}
	}
}

// receiverOf is the session r is handed to, if any.
func (st *ownerState) receiverOf(r *shardRun) *receiver {
	st.mu.Lock()
	defer st.mu.Unlock()
	return r.to
}

// askedToLeave notes that r is asked to stop now, for its handover.
func (st *ownerState) askedToLeave(r *shardRun) {
	st.mu.Lock()
	defer st.mu.Unlock()
	r.leftAt = time.Now()
}

// handOver picks k running shards to hand to the sessions of view (this
// session's group) below their share, and marks them (markHandover):
// those another live session prefers first, the sessions below their share
// before the others, then self's least preferred. It returns those with a
// receiver, in order, for pace; how many it picked; and the size of the
// set it counted the shares of.
func (st *ownerState) handOver(k int, view sessionView, self string) (queue []*shardRun, picked, n int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n = len(st.membership.set)
	type pick struct {
		r    *shardRun
		rank int
		s    uint64
	}
	var picks []pick
	for _, r := range st.ownership.runs {
		if r.leaving || r.returned.Load() {
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
	return st.markHandover(chosen, view.live, balance.Plan(view.live, view.owned, n, self, len(chosen)), view.ident), picked, n
}

// handAllOn picks every run that is not being given up, shares them out
// evenly among others (as many each), and marks them (markHandover), as the
// session leaves; it returns those with a receiver, in order, for pace.
func (st *ownerState) handAllOn(others []string, idents map[string]string) []*shardRun {
	quota := make(map[string]int, len(others))
	st.mu.Lock()
	defer st.mu.Unlock()
	var picks []*shardRun
	for _, r := range st.ownership.runs {
		if !r.leaving && !r.returned.Load() {
			picks = append(picks, r)
		}
	}
	for i := range picks {
		quota[others[i%len(others)]]++
	}
	return st.markHandover(picks, others, quota, idents)
}

// markHandover marks the runs picked for a handover, and gives each a
// receiver among live: the one the shard prefers if quota leaves it room,
// else the first with room. It returns those with a receiver, in order, for
// pace; the others are asked to stop at once, and released. Under st.mu.
func (st *ownerState) markHandover(picks []*shardRun, live []string, quota map[string]int, idents map[string]string) []*shardRun {
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

// The leases to release, and the shards that cannot run (ownership).

// addLeftover notes that this instance may hold name's lease, with ID id,
// and must release it.
func (st *ownerState) addLeftover(name, id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.leftover[name] = id
}

// leftovers is up to k of the leases left to release.
func (st *ownerState) leftovers(k int) map[string]string {
	st.mu.Lock()
	defer st.mu.Unlock()
	left := make(map[string]string, len(st.ownership.leftover))
	for n, id := range st.ownership.leftover {
		if len(left) == k {
			break
		}
		left[n] = id
	}
	return left
}

// releasedLeftover forgets name's leftover lease, released, unless it is
// one with another ID now.
func (st *ownerState) releasedLeftover(name, id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ownership.leftover[name] == id {
		delete(st.ownership.leftover, name)
	}
}

// takeLeftovers takes every lease left to release.
func (st *ownerState) takeLeftovers() map[string]string {
	st.mu.Lock()
	defer st.mu.Unlock()
	left := st.ownership.leftover
	st.ownership.leftover = map[string]string{}
	return left
}

// markBad notes what a read of shard name's blob tells of its record: p,
// the problem no term can follow, or nil; and returns what it noted before.
func (st *ownerState) markBad(name string, p *RecordError) (old *RecordError, was bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	old, was = st.ownership.bad[name]
	if p != nil {
		st.ownership.bad[name] = p
	} else {
		delete(st.ownership.bad, name)
	}
	return old, was
}

// replaceBad makes bad the shards whose record cannot be built on, and
// returns those it replaces.
func (st *ownerState) replaceBad(bad map[string]*RecordError) map[string]*RecordError {
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.ownership.bad
	st.ownership.bad = bad
	return old
}
