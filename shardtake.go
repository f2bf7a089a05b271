package leaderelection

import (
	"errors"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// How a shard becomes this session's: one path, whoever takes it. A claim of
// a free shard (claim, shardclaim.go), of a dead session's shard named in its
// list (takeFromDead, shardlist.go) and a resumed session's take-back
// (takeBack, sessionfile.go) enter it by claimOne; a shard handed to this
// session (adopt, handoff.go) by adoptOne. This part of the shard protocol's
// safety argument (the top of shards.go) rests on its steps, in this order:
//
//  1. Reserve (reserve, ownerState.reserve). A shard that runs here, or
//     whose claim is in flight, is not taken twice at once; the mark ends
//     at start (ownerState.startRun), or unclaim. An adoption asks, under
//     the same lock, whether the term is this session's own: it never
//     adopts a term it recorded or adopted.
//  2. Propose a term (claimFloor, wire.NextTerm, propose). Above the term
//     listed, above every term this session proposed for the shard (so no
//     two of its claims share a lease ID, wire.ClaimLeaseID, and a release
//     whose answer was lost ends no later claim), above the highest this
//     instance saw on the blob, and, for a blob gone or created again,
//     above its seed, once that blob's ETag has stood (stoodRecreated,
//     shardfloors.go). A handed shard's term is the one its giver recorded.
//  3. Take the lease, each request If-Match the ETag seen (takeLease,
//     adoptOne): a break only of a lease whose record names a dead session,
//     or no live holder's (after its ETag stood a lease duration); an
//     acquire with this claim's own ID; or a change from the ID a dead or
//     previous process derived, which nobody else uses. A claim made
//     meanwhile wrote its record, changing the ETag, before its func
//     started: the break fails and that claim stands. Nothing is broken on
//     a list's word (listAgrees), and a term whose lease this session may
//     end is marked its own first (record), so that no note starts it.
//  4. Record the term (writeShardRecord): this session and the term, under
//     the new lease, If-Match the same ETag; noted first as proposed
//     (record, proposeTerm), as the server may store it with its answer
//     lost. A claim that has not written its record has not started its
//     func, and its write fails on a broken lease. A handed shard's record
//     is the giver's, written before it changed the lease's ID.
//  5. Start (hold, start). Only then does the func run, under the
//     session's contexts, so the rule at the top of renew.go covers it with
//     the session's one fuse; if the session is ending, or the shard left
//     the set, the lease is released instead (releaseClaim).

// reserve marks shard name as being claimed (by path by), unless it runs
// here, a claim of it is in flight, or skip (if not nil) says no: it
// reports whether it did. The claim's end (claimOne's done, start)
// unmarks it. skip is asked under the same lock as the mark is made, so
// that a claim that notes something (a term as its own: adoptOne) before
// it unmarks the shard has noted it for skip to see (ownerState.reserve).
func (o *ShardOwner) reserve(name string, by reservation, skip func() bool) bool {
	if o.opts.seams.beforeReserve != nil {
		o.opts.seams.beforeReserve(by)
	}
	return o.state.reserve(name, skip)
}

// claimOne takes one shard: breaks its lease if its session is dead, on
// condition that the blob's ETag is still the listing's (a claim made since
// has changed it by writing its record, and stays), acquires it on the same
// condition with a lease ID of this claim's own, and writes the shard's
// record on that condition too: this session, the term one greater than the
// listing's (or more). Only then does the func start. It reports whether it
// did and, if not, why: the outcome its metric counts ("held": another
// took it first; "transient": storage did not answer in time), or "ended"
// if the claim won but the session or the shard's place in the set ended
// before the func could start (the metric has counted a win). A shard
// taken back by a resumed session whose lease still has the ID its previous
// process used (c.oldID) has that ID changed to this claim's instead of
// being broken and acquired: one request less, the same effect.
//
// The claim's lease ID derives from this session, its term (which a resumed
// session's next process raises), the shard and the term the claim records
// (wire.ClaimLeaseID), and the record names that session term, so a process that
// resumes the session can derive it too. This session never proposes a term
// twice for one shard (propose, before the acquire), so no two of its claims
// share an ID: a release whose answer was lost, reaching the server late,
// ends no later claim. A term proposed by a claim that did not get the lease
// is not recorded (record, after the acquire): it may yet be handed to this
// session, which must not refuse it as its own.
func (sm *shardManager) claimOne(c candidate) (won bool, why string) {
	o := sm.o
	floor, ok := sm.claimFloor(c)
	if !ok {
		o.state.unclaim(c.name)
		return false, "settling"
	}
	number, ok := wire.NextTerm(max(c.prev, sm.ownTerms.proposed(c.name)), floor)
	if !ok {
		o.noteBadShard(c.name, termCannotGrow(o.settings.Container, o.shardBlob(c.name), max(c.prev, floor)))
		o.state.unclaim(c.name)
		o.counts.claim(c.name, "permanent")
		return false, "permanent"
	}
	sm.ownTerms.propose(c.name, number)
	id := wire.ClaimLeaseID(sm.s.id, sm.sessionTerm, c.name, number)
	lm := o.managerFor(o.shardBlob(c.name), id)
	done := func(outcome string, release bool) (bool, string) {
		if release {
			sm.releaseClaim(c.name, lm)
		}
		o.state.unclaim(c.name)
		o.counts.claim(c.name, outcome)
		return false, outcome
	}
	ctx := sm.ctx
	etag := c.etag
	if !c.exists {
		var err error
		if etag, err = o.createShard(ctx, lm, floor); err != nil {
			return done(outcome(err, "claimed"), false)
		}
	}
	if ok, why, release := sm.takeLease(c, lm, id, etag); !ok {
		return done(why, release)
	}
	if !c.exists || c.prev == 0 && !c.marked {
		// Perhaps on a container created again (shardfloors.go, sessionThere).
		if why := sm.sessionThere(); why != "" {
			return done(why, true)
		}
	}
	t := Term{Number: number, Identity: o.opts.identity, LeaseID: id, Since: time.Now().UTC()}
	sm.ownTerms.record(c.name, number)  // before the write: its answer may be lost
	o.state.proposeTerm(c.name, number) // and the server may store it all the same (shardfloors.go)
	newETag, err := o.writeShardRecord(ctx, lm, t, sm.s.id, sm.sessionTerm, etag)
	if err != nil {
		return done(outcome(err, "claimed"), true)
	}
	taken := "claimed"
	switch {
	case c.oldID != "" && !c.dead:
		taken = "resumed"
	case c.leased:
		taken = "taken"
	case c.released:
		sm.candidates.tookFreed.Add(1)
	}
	if !sm.hold(c.name, lm, t, sm.sessionTerm, newETag, taken) {
		return false, "ended" // the session, or the shard's place in the set, ended meanwhile
	}
	return true, ""
}

// claimFloor is the term a claim of c must go above: the highest this
// instance saw on its blob (for a blob gone or created again, or sent a
// record of there: seedOf), or the fleet's highest (below). It reports
// false if c is not to be taken yet (stoodRecreated).
func (sm *shardManager) claimFloor(c candidate) (int64, bool) {
	o := sm.o
	floor := o.state.floorOf(c.name)
	if seed := o.state.seedOf(c.name); (seed > 0 && !c.exists) || c.recreated {
		// Gone, though this instance saw or sent terms on it, or created
		// again by an instance that did: not taken before it has stood.
		// The seed stays this instance's own: a fleet's highest moves on,
		// and each raise would start the wait again. The claim goes above
		// a term this instance sent a record of, whose answer it may never
		// have had: the deletion may have taken that record unread.
		if !sm.stoodRecreated(c, seed) {
			return 0, false
		}
		floor = o.state.seedOf(c.name) // as it is now
	}
	if c.marked || c.prev == 0 && o.state.mayHaveMissed() {
		// Created again (held or not: a claim of it may have failed before
		// it recorded its term), or with no term yet after this instance
		// may have missed a deletion: its term goes above every term any
		// session said its instance saw on any shard (shardfloors.go).
		if fleet := o.fleetMemory.fleetSeen.Load(); fleet > floor {
			o.logger.Debug("leaderelection: a shard blob created again continues above the highest term this instance or any session's record saw on any shard",
				"container", o.settings.Container, "blob", o.shardBlob(c.name), "shard", c.name, "seed", c.prev, "floor", floor, "fleetHighest", fleet)
			floor = fleet
		}
	}
	return floor, true
}

// takeLease takes c's lease with this claim's ID (lm's, id), on condition
// that the blob's ETag is still etag: by a change from the ID its session
// derived, a break and an acquire, or an acquire. It reports whether it
// did; if not, the claim's outcome, and whether the lease may be this
// claim's all the same (its answer lost), to be given back.
func (sm *shardManager) takeLease(c candidate, lm *BlobLeaseManager, id string, etag azcore.ETag) (ok bool, why string, release bool) {
	o := sm.o
	ctx := sm.ctx
	changed := false
	if c.oldID != "" && c.leased {
		// Taken back from this session's previous process, or from a dead
		// session by its list (heldlist.go): a change fails unless the lease
		// has the ID that session derived, which nobody else uses, and
		// then nothing it left in flight can end the lease once it has
		// this claim's.
		changedETag, err := o.changeLease(ctx, o.managerFor(lm.blob, c.oldID), id, etag)
		switch {
		case err == nil:
			if why := o.infiniteLease(ctx, lm, changedETag); why != "" {
				// Not a lease of ours (ours are infinite): another writer's,
				// under an ID it guessed, which expires on its own while a
				// func would run under it. Given back: now this claim's.
				return false, why, true
			}
			changed = true
			if !c.dead {
				sm.handoffs.changedBack.Add(1)
			}
		case c.fromList:
			// The list is not read from the shard's blob: the ETag it
			// gives is not known to be of a record that names its
			// session, so no break is made on it. But an acquire, If-Match
			// that ETag, takes a shard that is free (one the session
			// released as it left: see endSession), as any claim may;
			// else the shard is not that session's as the list says any
			// more (handed on, or its record rewritten), or a listing
			// finds it. A change whose answer was lost may have given the
			// lease this claim's ID: give it back.
			if errors.Is(err, ErrTransient) {
				return false, outcome(err, "taken"), true
			}
			if why := sm.listAgrees(c, lm); why != "" {
				return false, why, false
			}
			if err := o.acquireIfMatch(ctx, lm, etag); err != nil {
				return false, outcome(err, "taken"), errors.Is(err, ErrTransient)
			}
			changed = true
		}
	}
	if c.leased && !changed {
		// A lease handed to this session at the listed term ends with the
		// break: a note naming that term must never start it at once.
		sm.ownTerms.record(c.name, c.prev)
		switch res, _ := lm.breakIfUnchangedWithin(ctx, etag, o.settings.claimTimeout()); res {
		case breakDone:
			o.logger.Debug("leaderelection: broke the lease of a shard whose session is dead", "shard", c.name)
		case noLease:
		case etagChanged:
			return false, "held", false
		default:
			return false, "transient", false
		}
	}
	if !changed {
		if err := o.acquireIfMatch(ctx, lm, etag); err != nil {
			// An acquire whose answer was lost may hold the lease: give it back.
			return false, outcome(err, "claimed"), errors.Is(err, ErrTransient)
		}
	}
	return true, "", false
}

// listAgrees reads the blob of a shard that a session's list names, before
// an acquire on the list's word takes it (see claimOne): the term recorded
// then is the list's + 1, so the blob must show the list's ETag, and its
// record the list's term, of a shard. A list that names, at the blob's own
// ETag, another term than the blob's was not written by the session it
// belongs to (another writer rewrote it): it is reported and not trusted,
// and a listing finds the shard. It returns "" if the list agrees, else the
// claim's outcome.
func (sm *shardManager) listAgrees(c candidate, lm *BlobLeaseManager) string {
	info, err := lm.Inspect(sm.ctx)
	switch {
	case err != nil:
		return outcome(err, "taken")
	case !info.Exists || info.ETag != c.etag:
		return "held" // written since: not the list's any more
	case info.Leader.Number != c.prev || info.RecordError != nil || info.Role != "" && info.Role != RoleShard:
		sm.o.logger.Warn("leaderelection: a session's list of the shards it held names a term its shard's blob does not carry; the list is not trusted, and the shard is left to a listing",
			"container", lm.container, "blob", lm.blob, "shard", c.name, "listed", c.prev, "onBlob", info.Leader.Number)
		return "held"
	}
	return ""
}

func (sm *shardManager) adoptOne(h handed) {
	o := sm.o
	id := wire.HandoffLeaseID(sm.s.id, h.name, h.term)
	lm := o.managerFor(o.shardBlob(h.name), id)
	if h.from != "" && !sm.s.resumed {
		// A note of a live session's, in this session's own directory,
		// written once the lease was handed over: the lease is this
		// session's, and nobody else can end it (see the top of shards.go).
		// Not so for a resumed session, whose previous process may have
		// adopted the shard, run it and let it go (sessionfile.go).
	} else if err := o.acquireIfMatch(sm.shardsCtx, lm, h.etag); err != nil {
		// The release below may end the lease the giver handed over: a
		// note naming this term must not start it at once later, while
		// another claims the freed shard (see the top of shards.go).
		sm.ownTerms.record(h.name, h.term)
		o.state.unclaim(h.name)
		if errors.Is(err, ErrTransient) {
			sm.releaseClaim(h.name, lm)
		}
		o.logger.Debug("leaderelection: could not adopt a shard handed to this session", "shard", h.name, "term", h.term, "error", err)
		o.counts.claim(h.name, outcome(err, "handed"))
		return
	}
	sm.ownTerms.record(h.name, h.term)
	sm.candidates.took.Add(1)
	t := Term{Number: h.term, Identity: o.opts.identity, LeaseID: id, Since: time.Now().UTC()}
	sm.hold(h.name, lm, t, 0, h.etag, "handed")
}

// hold is the path's last step: the shard is this session's, under lm's
// lease at term t, its record at etag. It notes the term and the owner,
// counts the take (outcome), and starts the func; it reports false if the
// session, or the shard's place in the set, ended meanwhile (start).
func (sm *shardManager) hold(name string, lm *BlobLeaseManager, t Term, sessionTerm int64, etag azcore.ETag, outcome string) bool {
	o := sm.o
	o.state.seeTerm(name, t.Number)
	o.counts.claim(name, outcome)
	sm.shardListing.noteOwner(name, shardHolder{session: sm.s.id, etag: etag, term: t.Number})
	return sm.start(name, lm, t, sessionTerm, etag)
}

// start runs the func of a shard just claimed, under two contexts as the
// mutex's leader func (see the top of renew.go): its own, cancelled to ask
// it to stop (the caller cancelled, a handover, a removal) or to stop now;
// and its lease context, derived from the session's, cancelled only when
// the shard may pass to another instance. It reports false, and releases
// the shard, if the session is ending or the shard left the set meanwhile.
func (sm *shardManager) start(name string, lm *BlobLeaseManager, t Term, sessionTerm int64, etag azcore.ETag) bool {
	o := sm.o
	state := &termState{}
	leaderCtx, leaseCtx, ts := twoStages(sm.shardsCtx, sm.stopNow, state)
	r := &shardRun{name: name, term: t, sessionTerm: sessionTerm, etag: etag, claimed: time.Now(), state: state, done: make(chan struct{}), ts: ts}
	r.runner = &termRunner{lease: lm, logger: o.logger.With("shard", name), metrics: o.shardMetrics, identity: o.opts.identity, kind: runsShard}
	if !o.state.startRun(r, sm.shardsCtx, sm.s) {
		r.ts.stopNow(errTermEnded)
		sm.releaseClaim(name, lm)
		return false
	}
	sm.runs.Add(1)
	sm.funcs.Add(1)
	go func() {
		defer sm.runs.Done()
		sm.run(r, leaderCtx, leaseCtx)
	}()
	return true
}

// releaseClaim gives back the lease of a claim that will not run its func.
// As the session ends (its context done), the lease becomes a leftover,
// released with the others in the end's bounded window (manage), rather
// than one RequestTimeout each before that window opens.
func (sm *shardManager) releaseClaim(name string, lm *BlobLeaseManager) {
	id := lm.LeaseID()
	if sm.ctx.Err() != nil {
		sm.o.state.addLeftover(name, id)
		return
	}
	if err := lm.Release(sm.releases); err != nil {
		sm.o.state.addLeftover(name, id)
	}
}
