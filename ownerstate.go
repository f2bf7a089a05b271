package leaderelection

import (
	"context"
	"sync"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
)

// A ShardOwner's shared state (ownerState) and its methods: the only code
// that takes its lock. Its concerns are plain data, each with the methods
// that touch it alone, which are called under the lock and never take it:
// membership (membership.go), ownership (ownership.go) and termMemory
// (termmemory.go); fleetMemory's atomics (shardstate.go) are raised under
// it. An ownerState method that touches one concern takes the lock and
// calls that concern's method (or calls one that does: isRunning,
// ownedCount, handingCount, seeTerm); one that touches several (tally,
// endSession, forHealth, unnamed, freeOf, startRun, stopRemoved, handOver,
// settleTook, seeds, seeTerms, proposeTerm) calls each concern's under the
// one lock, so that what it reads of one and writes of another is one
// step; two touch a run's fields only (receiverOf, askedToLeave).
//
// The rest of the shard tier calls ownerState's methods; each does under
// one lock what its caller did under the lock before the lock moved here
// (issue 40), but for three that hold it for less, none of which any other
// goroutine could tell: handOver starts the pacing, adds its metric and
// logs after its unlock (the pacing is the session goroutine's own, and no
// log line is written under mu, below); and probeUnlisted, takeFromDead and
// pickUpTo write the session's candidates outside it (only the session's
// goroutine touches them; freeOf and startRun check the set again under
// mu).

// ownerState is the part of a ShardOwner that its goroutines share: the set
// of shards and the current session (membership), the shards' runs, claims
// and leases to release (ownership), what it knows of the shards' terms and
// of a deletion it saw (terms), and a shardRun's fields that say they are
// under it; with the one lock that guards them all. The goroutines: the
// session's loop, the shard runs (their end, their panic), the adoptions,
// the handovers' pacing, the claim workers (claimPicked, takeEach,
// probeUnlisted, quietList: reserve, unclaim, proposeTerm, seeTerm,
// startRun, recreatedWatch), the session lease's record write
// (extraMetadata), the caller's calls (SetShards, Shards, Owned, Session,
// Healthy; from an event handler too, under eventMu) and the metrics'
// callback.
//
// Lock order: no code of the shard tier holds another lock as it takes mu,
// and mu is held for memory only, never across a request, a log line or an
// event. Only ownerState's methods, in this file, take it; the concerns'
// methods they call under it never do. Under it, those take: a session's
// ownTerms.termsMu (reserve's skip, adoptOne's), the ownerless shards' lock
// (membership.gauges), a shard func's context's, asking it to stop
// (ownership.stopRemoved, stopAll, markHandover), a context's, asking
// whether it ended (startRun), and clock's source, drawing a cooldown
// (ownership.endRun); none of those takes mu.
type ownerState struct {
	mu         sync.Mutex
	membership membership   // the set of shards, the current session and its share (membership.go)
	ownership  ownership    // the shards' runs, claims and leases to release, and how runs ended (ownership.go, shardrun.go)
	terms      termMemory   // the floors of the shards' terms, and the quiet after a deletion (termmemory.go, shardfloors.go)
	fleet      *fleetMemory // the owner's atomics, which seeTerms and proposeTerm raise under mu
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

// setShards is membership.setShards, under mu.
func (st *ownerState) setShards(set map[string]bool, digest string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.membership.setShards(set, digest)
}

// shards is membership.shards, under mu.
func (st *ownerState) shards() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.shards()
}

// setCopy is membership.setCopy, under mu.
func (st *ownerState) setCopy() map[string]bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.setCopy()
}

// setSummary is membership.setSummary, under mu.
func (st *ownerState) setSummary() (digest string, size int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.setSummary()
}

// inSet is membership.inSet, under mu.
func (st *ownerState) inSet(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.inSet(name)
}

// whichInSet is membership.whichInSet, all read under one lock.
func (st *ownerState) whichInSet(names []string) map[string]bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.whichInSet(names)
}

// sessionID is membership.sessionID, under mu.
func (st *ownerState) sessionID() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.sessionID()
}

// setCurrent is membership.setCurrent, under mu.
func (st *ownerState) setCurrent(s *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.membership.setCurrent(s)
}

// endSession ends the current session (manage's end): none is current, a
// permanent error that ended its manager (mgrErr, if not nil) is kept for
// Run, and a shard func's panic, if one came, is taken to propagate
// (ownership.sessionEnded).
func (st *ownerState) endSession(mgrErr error) (p any, panicked bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.membership.setCurrent(nil)
	return st.ownership.sessionEnded(mgrErr)
}

// tally reads, under one lock, the set, the set before it if it changed
// within window, and sets this instance's share (membership.tally); and
// how many shards this instance holds and keeps or claims
// (ownership.keptOrClaimed).
func (st *ownerState) tally(view sessionView, self string, window time.Duration) tallied {
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.membership.tally(view, self, window)
	t.own = st.ownership.keptOrClaimed()
	return t
}

// gauges is membership.gauges, under mu.
func (st *ownerState) gauges(seen *ownerless) (target, live, unowned int, listed time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.membership.gauges(seen)
}

// The runs and claims (ownership).

// panicking is ownership.panicking, under mu.
func (st *ownerState) panicking() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.panicking()
}

// notePanic is ownership.notePanic, under mu.
func (st *ownerState) notePanic(p any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.notePanic(p)
}

// takeMgrErr is ownership.takeMgrErr, under mu.
func (st *ownerState) takeMgrErr() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.takeMgrErr()
}

// ownedCount is how many shards this instance holds and keeps: running, not
// being given up. A session's record publishes it.
func (st *ownerState) ownedCount() int {
	return st.countRuns((*shardRun).kept)
}

// handingCount is how many shards this instance is handing over: asked to
// stop for a handover, with a receiver, and not handed on yet (see
// markHandover). Its session's record says so, as ownedCount no longer
// counts them: the receivers then know that shards are on their way.
func (st *ownerState) handingCount() int {
	return st.countRuns(func(r *shardRun) bool { return r.leaving && r.to != nil })
}

// countRuns is ownership.countRuns, under mu.
func (st *ownerState) countRuns(is func(*shardRun) bool) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.countRuns(is)
}

// owned is ownership.owned, under mu.
func (st *ownerState) owned() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.owned()
}

// forHealth is what Healthy reads: every run, the shards whose record
// cannot be built on (ownership.forHealth), and the current session.
func (st *ownerState) forHealth() (runs []*shardRun, bad *RecordError, nBad int, current *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	runs, bad, nBad = st.ownership.forHealth()
	return runs, bad, nBad, st.membership.currentSession()
}

// heldLines is ownership.heldLines, under mu.
func (st *ownerState) heldLines() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.heldLines()
}

// holds is ownership.holds, under mu.
func (st *ownerState) holds(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.holds(name)
}

// isRunning reports whether this instance runs name's func.
func (st *ownerState) isRunning(name string) bool {
	return st.runOf(name) != nil
}

// runOf is ownership.runOf, under mu.
func (st *ownerState) runOf(name string) *shardRun {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.runOf(name)
}

// goneRuns is ownership.goneRuns, under mu.
func (st *ownerState) goneRuns(seen, set map[string]bool, start time.Time) []*shardRun {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.goneRuns(seen, set, start)
}

// unnamed is the shards of the set that named (the sessions' lists) does
// not name, and that this instance neither runs nor claims.
func (st *ownerState) unnamed(named map[string]bool) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for name := range st.membership.names() {
		if !named[name] && !st.ownership.busy(name) {
			out = append(out, name)
		}
	}
	return out
}

// freeOf is the size of the set, and those of cands (a session's
// candidates) free to claim now: in the set, and claimable at now
// (ownership.claimable).
func (st *ownerState) freeOf(cands map[string]candidate, now time.Time) (n int, free []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	free = make([]string, 0, len(cands))
	for name := range cands {
		if st.membership.inSet(name) && st.ownership.claimable(name, now) {
			free = append(free, name)
		}
	}
	return st.membership.size(), free
}

// reserve is ownership.reserve, under mu (which skip is asked under).
func (st *ownerState) reserve(name string, skip func() bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.reserve(name, skip)
}

// reserveUpTo is ownership.reserveUpTo, under mu.
func (st *ownerState) reserveUpTo(order []string, k int) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.reserveUpTo(order, k)
}

// unclaim ends a claim of shard name that starts no func.
func (st *ownerState) unclaim(name string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.unclaim(name)
}

// startRun ends the claim of r's shard and makes r its run, unless the
// shard left the set, shardsCtx ended or session s is leaving, asked under
// the same lock; it reports whether it did.
func (st *ownerState) startRun(r *shardRun, shardsCtx context.Context, s *session) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.unclaim(r.name)
	if !st.membership.inSet(r.name) || shardsCtx.Err() != nil || s.leaving.Load() {
		return false
	}
	st.ownership.addRun(r)
	return true
}

// endRun is ownership.endRun, under mu.
func (st *ownerState) endRun(name string, reason StopReason, cooldown time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.endRun(name, reason, cooldown)
}

// stopAll is ownership.stopAll, under mu.
func (st *ownerState) stopAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.stopAll()
}

// stopRemoved asks the funcs of the shards that left the set to stop
// (ownership.stopRemoved), and drops from cands (a session's candidates)
// those that are candidates no more, by the same reading of the set and
// the runs: the shards not in the set, and those this instance runs or is
// claiming (ownership.busy: one a note handed to it since it was found
// free, say). Those in their cooldown, or with a release left to retry,
// stay: they become claimable again.
func (st *ownerState) stopRemoved(cands map[string]candidate) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.stopRemoved(st.membership.inSet)
	for name := range cands {
		if !st.membership.inSet(name) || st.ownership.busy(name) {
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

// handOver picks k running shards to hand to the sessions of view and
// marks them (ownership.handOver), counting the shares of the set as it is
// under the same lock. It returns those with a receiver, in order, for
// pace; how many it picked; and the size of the set it counted the shares
// of.
func (st *ownerState) handOver(k int, view sessionView, self string) (queue []*shardRun, picked, n int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n = st.membership.size()
	queue, picked = st.ownership.handOver(k, view, self, n)
	return queue, picked, n
}

// handAllOn is ownership.handAllOn, under mu (its quota map made before).
func (st *ownerState) handAllOn(others []string, idents map[string]string) []*shardRun {
	quota := make(map[string]int, len(others))
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.handAllOn(others, quota, idents)
}

// The leases to release, and the shards that cannot run (ownership).

// addLeftover is ownership.addLeftover, under mu.
func (st *ownerState) addLeftover(name, id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.addLeftover(name, id)
}

// leftovers is ownership.leftovers, under mu.
func (st *ownerState) leftovers(k int) map[string]string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.leftovers(k)
}

// releasedLeftover is ownership.releasedLeftover, under mu.
func (st *ownerState) releasedLeftover(name, id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ownership.releasedLeftover(name, id)
}

// takeLeftovers is ownership.takeLeftovers, under mu.
func (st *ownerState) takeLeftovers() map[string]string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.takeLeftovers()
}

// markBad is ownership.markBad, under mu.
func (st *ownerState) markBad(name string, p *RecordError) (old *RecordError, was bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.markBad(name, p)
}

// replaceBad is ownership.replaceBad, under mu.
func (st *ownerState) replaceBad(bad map[string]*RecordError) map[string]*RecordError {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.replaceBad(bad)
}

// How the runs ended (ownership), for the logs (shardlog.go).

// settleTook sets took shards claimed since the last report, freed of them
// released by a peer, against the runs that returned by themselves since
// (ownership.settleTook). It returns how many shards run here, this
// instance's share, and whether the take is routine.
func (st *ownerState) settleTook(took, freed int64) (running, share int, routine bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	running, routine = st.ownership.settleTook(took, freed)
	return running, st.membership.share(), routine
}

// slowToLeave is ownership.slowToLeave, under mu.
func (st *ownerState) slowToLeave(margin time.Duration) (n int, oldest time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.slowToLeave(margin)
}

// takeStopped is ownership.takeStopped, under mu.
func (st *ownerState) takeStopped(final bool) (stopped map[StopReason]int, running int, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ownership.takeStopped(final)
}

// The terms (termMemory; why each is kept: the top of shardfloors.go).

// floorOf is termMemory.floorOf, under mu.
func (st *ownerState) floorOf(name string) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.terms.floorOf(name)
}

// seeTerm raises the floor of shard name's terms to n (not to the largest
// number: see termFloor.see).
func (st *ownerState) seeTerm(name string, n int64) { st.seeTerms(map[string]int64{name: n}) }

// seeTerms is seeTerm for each shard of a listing, under one lock: each
// floor it raises (termMemory.see) raises the highest term this instance
// saw (fleetMemory.publishSeen) with it.
func (st *ownerState) seeTerms(terms map[string]int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for name, n := range terms {
		if st.terms.see(name, n) {
			st.fleet.publishSeen(n)
		}
	}
}

// proposeTerm notes n as a term this instance is about to send a record of
// on shard name's blob (a claim's, a handover's): the server may store it
// whether or not its answer comes back. It raises the seed of the shard
// (termMemory.propose) and, with it, the fleet's highest
// (fleetMemory.publishSeen), not the floor (see seeTerm).
func (st *ownerState) proposeTerm(name string, n int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.terms.propose(name, n) {
		st.fleet.publishSeen(n)
	}
}

// seedOf is termMemory.seedOf, under mu.
func (st *ownerState) seedOf(name string) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.terms.seedOf(name)
}

// seeds is the seed (termMemory.seedOf) of every shard of the set that has
// one.
func (st *ownerState) seeds() map[string]int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	seeds := map[string]int64{}
	for name := range st.membership.names() {
		if n := st.terms.seedOf(name); n > 0 {
			seeds[name] = n
		}
	}
	return seeds
}

// noteGap is termMemory.noteGap, under mu.
func (st *ownerState) noteGap(quiet time.Duration) (first bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.terms.noteGap(quiet)
}

// mayHaveMissed is termMemory.mayHaveMissed, under mu.
func (st *ownerState) mayHaveMissed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.terms.mayHaveMissed()
}

// beginQuiet is termMemory.beginQuiet, under mu.
func (st *ownerState) beginQuiet() (left time.Duration, seed bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.terms.beginQuiet()
}

// seeded is termMemory.seeded, under mu.
func (st *ownerState) seeded() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.terms.seeded()
}

// recreatedWatch is termMemory.recreatedWatch, under mu.
func (st *ownerState) recreatedWatch(name string) *freshWatch {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.terms.recreatedWatch(name)
}

// forgetRecreated is termMemory.forgetRecreated, under mu.
func (st *ownerState) forgetRecreated(name string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.terms.forgetRecreated(name)
}
