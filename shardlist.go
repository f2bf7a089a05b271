package leaderelection

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/wire"
)

// How a ShardOwner's session finds the free shards (shardclaim.go claims
// them): a listing of every shard, which also stops the funcs of the shards
// no longer its own and reports the records no term can follow; or, after a
// death, the dead sessions' lists (heldlist.go).

// takeFromDead makes the candidates the shards that the sessions that just
// died held, by their lists (heldlist.go), with no listing of every shard: each
// to be taken by a change of its lease's ID from the one the dead session
// derived, If-Match the ETag of that session's record (see claimOne). If a list cannot
// be read, it lists at once instead, out of turn; so it does, once its part
// of the dead sessions' shards is claimed, if it is still short (see claim):
// a shard a dead session claimed after it last wrote its list is found that
// way.
func (sm *shardManager) takeFromDead(view sessionView, n int) {
	o := sm.o
	dead := map[string]bool{}
	found := map[string]candidate{}
	for _, id := range view.died {
		dead[id] = true
		entries, err := o.readHeld(sm.ctx, id)
		if err != nil {
			o.logger.Debug("leaderelection: could not read which shards a dead session held; listing them", "session", id, "error", err)
			sm.candidates.stale, sm.balancing.plan.ListNotBefore = true, time.Time{}
			return
		}
		for _, e := range entries {
			found[e.name] = candidate{name: e.name, exists: true, etag: e.etag, leased: true, prev: e.term, dead: true, oldID: e.derivedID(id), fromList: true}
		}
	}
	// The lists only: every survivor reads the same ones, and so assigns
	// the same candidates alike. (What its last listing showed the dead
	// sessions holding may be older, and differ from one survivor to
	// another: their parts then overlapped, and most came up short.)
	sm.shardListing.forgetOwners(dead)
	// Each survivor's room is its share less what it holds, by the
	// others' records and its own count. The records, its own among them,
	// stood still before the death, and are rewritten as the survivors
	// claim, each read at its own moment: a survivor that saw the death a
	// pass later than another may read that one's record after its claims.
	// So each counts what the records said at the pass before, where that
	// is less. The survivors then usually assign the dead sessions' shards
	// alike, in disjoint parts that cover them all. Where their rooms
	// differ, claims are conditional, and a survivor left short lists.
	sm.candidates.deathFor = strings.Join(view.live, ",")
	sm.candidates.deathRoom = make(map[string]int, len(view.live))
	for _, id := range view.live {
		holds := view.owned[id]
		if before, ok := sm.balancing.prevOwned[id]; ok {
			holds = min(holds, before)
		}
		if id == sm.s.id {
			holds = o.state.ownedCount()
		}
		sm.candidates.deathRoom[id] = max(0, balance.FairShare(n, view.live, id)-holds)
	}
	now := time.Now()
	var freed []string
	inSet := o.state.whichInSet(slices.Collect(maps.Keys(found)))
	for name, c := range found {
		if !inSet[name] {
			continue
		}
		freed = append(freed, name)
		sm.candidates.cands[name] = c
		// Free from now: a time left from the last listing, long ago,
		// when the shard was free before the dead session took it, made
		// it anyone's at once, and the survivors done with their parts
		// took the others', left them short and listing (16 s, five at
		// once, on a busy account).
		sm.candidates.freeSince[name] = now
	}
	o.counts.sawFree(freed)
	// As fresh as a listing can make them, without one: claim them first.
	sm.candidates.stale, sm.candidates.part, sm.candidates.fromDeath, sm.balancing.plan.Probed, sm.candidates.fromListing = false, nil, true, false, false
}

// listShards lists the shards and keeps, as candidates to claim, every shard
// of the set that is free: no blob yet, no lease, or a lease whose session
// is dead. It also stops the funcs of shards this session holds that the
// listing shows held by another (which should never happen), and times the
// leases that name no live holder. It runs as steps, in this order, over
// what the listing found (shardScan).
func (sm *shardManager) listShards(view sessionView) error {
	sm.reportTook()
	sc, err := sm.readShards()
	if err != nil {
		return err
	}
	if sm.sessionBlobGone() {
		sm.o.sawDeletion("a listing of the shards found this session's blob gone")
		return errSessionGone
	}
	sm.judgeShards(sc, view)
	if err := sm.lookUpUnknown(sc); err != nil {
		return err
	}
	sm.noteMissing(sc)
	sm.keepScan(sc, view)
	return nil
}

// shardScan is what one listing of the shards found, and its steps share.
type shardScan struct {
	start   time.Time       // when the listing started
	set     map[string]bool // the set, as it started
	entries []listed        // the blobs of the set's shards, and of the others this instance runs
	strays  bool            // leases with this session's record that it does not hold (see freeStrays)
	seen    map[string]bool // the shards listed
	owners  map[string]shardHolder
	unknown map[string][]listed // by session: the shards of sessions the listing of the sessions did not show
	cands   []candidate
	adopt   []handed
	// anomalies are the leases without a live holder to name, bad the
	// shards whose record cannot be built on, terms the terms listed.
	anomalies map[string]unleasedSince
	bad       map[string]*RecordError
	terms     map[string]int64
	peers     map[string]bool // see sameSetPeers
}

// readShards lists the shards of the set, and those this instance runs.
func (sm *shardManager) readShards() (*shardScan, error) {
	o := sm.o
	sc := &shardScan{start: time.Now()}
	sc.set = o.state.setCopy()
	if err := o.list(sm.ctx, wire.ShardsDir, func(l listed) {
		if sc.set[l.name] {
			sc.entries = append(sc.entries, l)
		} else if o.state.isRunning(l.name) {
			sc.entries = append(sc.entries, l)
		}
	}); err != nil {
		if errors.Is(err, errContainerGone) {
			// And this session's blob with it (shardfloors.go).
			o.sawDeletion("a listing of the shards found the container gone")
			return nil, errSessionGone
		}
		return nil, err
	}
	for _, l := range sc.entries {
		if sc.set[l.name] {
			sm.watchCreatedAgain(l)
		}
	}
	sm.balancing.plan.LastList = time.Now()
	sm.balancing.plan.ListTook = sm.balancing.plan.LastList.Sub(sc.start)
	return sc, nil
}

// judgeShards judges each shard listed (judgeShard), then acts on what
// that found: it times the anomalies, raises the floors of the terms,
// adopts the shards handed to it, and reports the records no term can
// follow.
func (sm *shardManager) judgeShards(sc *shardScan, view sessionView) {
	o := sm.o
	sc.owners = make(map[string]shardHolder, len(sc.entries))
	live := map[string]bool{}
	for _, id := range view.live {
		live[id] = true
	}
	sc.seen = map[string]bool{}
	sc.unknown = map[string][]listed{}
	sc.anomalies = map[string]unleasedSince{}
	sc.bad = map[string]*RecordError{}
	sc.terms = make(map[string]int64, len(sc.entries))
	sc.peers = sm.sameSetPeers(view)
	for _, l := range sc.entries {
		sm.judgeShard(sc, l, live)
	}
	sm.shardListing.anomalies = sc.anomalies
	if sc.strays {
		// Look again once they have stood a lease duration (see
		// freeStrays), not at the next look for strays, minutes away.
		sm.balancing.plan.StrayAt = sc.start.Add(o.settings.LeaseDuration + o.settings.RetryInterval)
	}
	o.state.seeTerms(sc.terms)
	sm.adopt(sc.adopt)
	o.noteBadShards(sc.bad)
}

// judgeShard judges one shard listed: held by this session, free, leased
// by a live session, by a dead one, by one the listing of the sessions did
// not show, or by no live holder's record.
func (sm *shardManager) judgeShard(sc *shardScan, l listed, live map[string]bool) {
	o := sm.o
	sc.seen[l.name] = true
	sm.checkHeld(l, sc.start)
	if !sc.set[l.name] {
		return
	}
	if !l.rec.TermBad {
		sc.terms[l.name] = l.info.Leader.Number
	}
	if p := o.shardProblem(l); p != nil {
		// Not a shard's blob, or a record no term can follow: never
		// broken, never claimed, reported until it is repaired.
		sc.bad[l.name] = p
		return
	}
	if l.info.Held() && l.session != "" {
		sc.owners[l.name] = shardHolder{session: l.session, etag: l.info.ETag, term: l.info.Leader.Number}
	}
	c := listedCandidate(l.name, l.info)
	switch {
	case !l.info.Held():
		c.released = l.releasedBy(sc.peers)
		sc.cands = append(sc.cands, c)
	case l.info.State != stateLeased:
		// Breaking: an operator's break, which ends by itself.
	case l.session == "" || l.session == sm.s.id:
		// Leased with no record, or with this session's record but
		// not held by this session: a claim that failed, or one in
		// flight. Its holder has not started a func for it (that
		// needs its own record), so a break is safe; wait until its
		// ETag has stood a lease duration, not to fight a live claim.
		if l.session == sm.s.id && o.state.holds(l.name) {
			return
		}
		if l.session == sm.s.id && !sm.ownTerms.recorded(l.name, l.info.Leader.Number) {
			// Recorded for this session by another: handed to it
			// (handoff.go), its note lost or not read yet. Adopt it
			// on that condition; if the lease has another ID (the
			// giver's change failed), it is timed as below.
			sc.adopt = append(sc.adopt, handed{name: l.name, term: l.info.Leader.Number, etag: l.info.ETag})
		}
		a, ok := sm.shardListing.anomalies[l.name]
		if !ok || a.etag != l.info.ETag {
			a = unleasedSince{etag: l.info.ETag, since: l.info.Received}
		}
		sc.anomalies[l.name] = a
		if l.session == sm.s.id {
			sc.strays = true
		}
		if time.Since(a.since) >= o.settings.LeaseDuration {
			c.leased, c.ours = true, l.session == sm.s.id
			sc.cands = append(sc.cands, c)
		}
	case live[l.session]:
		// Held by a live session.
	default:
		if _, dead := sm.watch.dead[l.session]; dead {
			c.leased, c.dead = true, true
			sc.cands = append(sc.cands, c)
			return
		}
		sc.unknown[l.session] = append(sc.unknown[l.session], l)
	}
}

// lookUpUnknown looks up the sessions the shards name that the listing of
// the sessions did not show: one started since (its shards are held) or
// one whose blob is gone (dead).
func (sm *shardManager) lookUpUnknown(sc *shardScan) error {
	o := sm.o
	lookups := 0
	for id, ls := range sc.unknown {
		if lookups == lookupsPerList {
			break
		}
		lookups++
		dead, err := o.sessionState(sm.ctx, sm.watch, id)
		if err != nil {
			if errors.Is(err, ErrPermanent) {
				return err
			}
			continue
		}
		if dead {
			for _, l := range ls {
				sc.cands = append(sc.cands, candidate{name: l.name, exists: true, etag: l.info.ETag, leased: true, prev: l.info.Leader.Number, dead: true})
			}
		}
	}
	return nil
}

// noteMissing takes the shards of the set the listing did not show as
// free (no blob yet), and stops the runs whose blob it did not show.
func (sm *shardManager) noteMissing(sc *shardScan) {
	o := sm.o
	for name := range sc.set {
		if !sc.seen[name] {
			sc.cands = append(sc.cands, candidate{name: name})
		}
	}
	// Runs the listing did not show at all: their blob is gone.
	for _, r := range o.state.goneRuns(sc.seen, sc.set, sc.start) {
		sm.lost(r, "its blob is gone")
	}
	sm.reportLost()
}

// keepScan makes the listing's free shards the candidates, and its owners
// those to take a dead session's shards from.
func (sm *shardManager) keepScan(sc *shardScan, view sessionView) {
	o := sm.o
	sm.candidates.cands = make(map[string]candidate, len(sc.cands))
	freeSince := make(map[string]time.Time, len(sc.cands))
	for _, c := range sc.cands {
		sm.candidates.cands[c.name] = c
		if at, ok := sm.candidates.freeSince[c.name]; ok {
			freeSince[c.name] = at
		} else {
			freeSince[c.name] = sc.start
		}
	}
	sm.shardListing.keepOwners(sc.owners)
	sm.candidates.freeSince, sm.candidates.stale, sm.shardListing.ownersAt, sm.candidates.part, sm.balancing.plan.Probed, sm.candidates.fromListing = freeSince, false, sc.start, nil, false, true
	sm.candidates.deathRoom, sm.candidates.fromDeath = nil, false
	o.counts.sawListing(sc.start, sm.candidates.cands, sc.anomalies, sc.bad)
	o.logger.Debug("leaderelection: listed the shards", "prefix", o.prefix, "took", sm.balancing.plan.ListTook.Round(time.Millisecond),
		"shards", len(sc.entries), "free", len(sc.cands), "liveSessions", len(view.live))
}

// checkHeld stops the func of a shard this session holds if a listing that
// started after the claim shows the shard unleased or written by another:
// only the lease's holder can write the blob.
func (sm *shardManager) checkHeld(l listed, start time.Time) {
	r := sm.o.state.runOf(l.name)
	if r == nil || r.returned.Load() || !r.claimed.Before(start) {
		return
	}
	switch {
	case !l.info.Held():
		sm.lost(r, "its lease was broken or released")
	case l.info.ETag != r.etag:
		sm.lost(r, "another instance wrote its record")
	}
}

// lost stops now the func of a shard that a listing shows is no longer
// this instance's; reportLost logs them, one line for each cause.
func (sm *shardManager) lost(r *shardRun, why string) {
	if r.returned.Load() {
		return
	}
	o := sm.o
	err := &StorageError{Op: "list shards", Container: o.settings.Container, Blob: o.shardBlob(r.name),
		detail: "the shard is no longer ours: " + why, kind: ErrLeaseLost}
	o.logger.Debug("leaderelection: a shard this instance runs is no longer its own; its func is told to stop now",
		"container", o.settings.Container, "shard", r.name, "term", r.term.Number, "why", why)
	if sm.shardListing.lostNow == nil {
		sm.shardListing.lostNow = map[string][]string{}
	}
	sm.shardListing.lostNow[why] = append(sm.shardListing.lostNow[why], r.name)
	r.ts.stopNow(&leaseLostError{err: err})
}

// reportLost logs the shards a listing found lost, at Error: one line for
// each cause, with how many and the first few.
func (sm *shardManager) reportLost() {
	for why, names := range sm.shardListing.lostNow {
		slices.Sort(names)
		o := sm.o
		o.logger.Error("leaderelection: shards this instance ran are no longer its own; their funcs are told to stop now (were their leases broken by hand?)",
			"container", o.settings.Container, "prefix", o.prefix, "count", len(names), "shards", names[:min(5, len(names))], "why", why)
	}
	sm.shardListing.lostNow = nil
}
