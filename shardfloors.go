package leaderelection

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// A container deleted under a running ShardOwner fleet takes every blob in
// it, leased or not: every session's and every shard's. No blob of ours is
// deleted otherwise while leased (a delete needs the lease ID), so this is
// the one way a session's blob goes while its owner lives, and the shards'
// with it. The sessions that ran then are doomed (a session's blob is never
// created twice, so no renewal of theirs succeeds again), but each runs its
// shard funcs until it notices, or until its fuse blows: by S + D -
// StopMargin for its last confirmed write, sent at S, before the deletion.
// Meanwhile one of them may even claim, from a listing that sees the
// container created again. A shard blob created again must not be claimed
// by anyone before every doomed session has stopped, and its first term
// must continue from the highest any instance saw.
//
// Exclusion. A shard that an instance saw terms on, whose blob it finds
// gone, it creates again seeded with the highest it saw and marked as
// created again (record.go), and it claims such a blob (carrying no term's
// record) only once the blob's ETag has stood unchanged, as it watched it,
// for quietFor: longer than the longest lease duration D any session it
// listed declared (stoodRecreated). It times the ETag from the first answer
// that showed it that ETag, or later: a listing of the shards (during its
// quiet too: watchCreatedAgain), its own create or raise of the seed
// (seedOne), or a claim's first try. The blob was there, so created after
// the deletion, by then, so every doomed session, which stops by D after
// its last write before the deletion, has stopped by the end of the wait:
// whether or not this instance, or that session, has noticed the deletion.
// A later deletion takes the blob, and the blob created again after it
// carries another ETag, whose wait starts again. A doomed session's own
// claims wait so too, and it dies first. Every doomed session's D is among
// those this instance knows, if this instance's session was among those
// that session saw live when it began to run shards: a session runs none
// until every live session it lists says, in its record, that its instance
// knows a D at least as long as its own (mayRun), which it learns by
// listing the sessions, before it publishes it. So fleets that mix lease durations (a
// rollout that changes LeaseDuration) are covered too, but for an instance
// whose session was not yet recorded then, or was resumed and had not yet
// listed the sessions: the limit below.
//
// An instance that sees the deletion (its session's renewal, or a listing,
// finds its session's blob or the container gone, the listing of the
// shards included, which reads the session's blob after it and claims
// nothing on it if that is gone, as a probe of the shards no list names
// does (probeUnlisted), and a claim of a shard with no term, once its
// lease is granted (sessionThere, below): the session ends, at that listing,
// or at its next renewal or listing; or its next session finds the
// container gone, as it creates its blob, or resumes from the lease ID
// file) also claims nothing with its next session for quietFor from that
// session's first pass (nor, after it, before the blobs its quiet's last
// listing showed created again have stood: waitToStand); and so does one
// whose session ended cut off from storage (its deadline passed, or it was
// broken as silent: sawCutOff), which could not have seen a deletion
// meanwhile. So no instance that ran a
// session before the deletion claims a blob created again, even one it
// never saw terms on, before the doomed sessions have stopped: whose
// session lived through the deletion sees it, or was cut off (a simulator
// found an instance, cut off across a deletion, claim such a blob at once
// before this rule). It still adopts, during its quiet, the shards handed
// to it (handoff.go), which is not a claim: a note is written only once its
// giver's func on the shard has returned, and the giver has rewritten the
// record, and changed the lease, of the blob as it is now. So the giver ran
// the shard on that blob, after it was created, and stopped before the
// note: a doomed session that still runs the shard ran it beside the giver
// already (an early claim, which only the limits below allow), and the
// quiet would not stop it. And a doomed session hands nothing on: a
// handover follows a listing of the sessions that shows its giver's own
// blob (give), or a confirmed renewal (leave). So the others, which see it
// below its share and hand it shards, do not leave them idle for the
// quiet.
//
// Terms. Such an instance, at its next session's first pass, also creates
// the blob of every shard it saw terms on, or sent a record of (below),
// seeded with the highest of them, or raises the seed of one that another
// instance created to that, on condition (If-Match) of its ETag, unleased as
// it is; a claimer raises a seed below its own too, as it times it.
// Each raise is a new ETag to time. Every instance that saw the deletion
// seeds at its next session's first pass, which it reaches within a backoff
// (at most D) and a RetryInterval of the container's being usable again,
// and of its own funcs' end; so the first claim, which records the seed + 1
// or more, continues from the highest term any of them saw. This is a
// bounded-time argument, as for the mutex's blob (recreated.go); an
// instance tries its seeds again at each pass while its quiet lasts, until
// every one is written, and reads a blob again when another raise got there
// first.
//
// Terms sent, unanswered. A claim's or a handover's record whose answer was
// lost may be stored all the same, and a deletion may take it before any
// instance has read it; no func ran under it (a func starts only once its
// record is confirmed), but its number must not go to another holder
// either. So an instance notes each term it sends a record of, before it
// sends it (proposeTerm), for as long as its process lives, not its
// session: the session that sent it may be the one the deletion dooms.
// Such a term counts as a term it saw for the seeds (seedOf: what it
// creates a shard's blob with, or raises a seed to, at its first pass and
// as it times a blob created again, and what its own claim of that blob
// goes above) and for the fleet's highest (seenMax, below); so its writer
// is a witness of it, as the instance that ran a term is, and the next
// claim goes above it, as termFloor.seed does for the mutex's blob. The
// floor itself stays what the instance saw: it drives NextTerm, of a claim
// of a blob that was not created again and of a handover, where a record
// that was not stored must not make the next term skip a number; and no
// alarm watches a shard's term against it (a listing reports a record
// that does not read or cannot grow, never a term below the floor). A
// number sent and never stored makes only a term after a deletion jump
// higher, which a term may do.
//
// The fleet's highest. Seeds cover the shards of each seeder's set, and
// only instances that look: a shard blob deleted by hand while nobody ran
// it (no container deletion, so no quiet), in a fleet that seldom lists the
// shards, is seen gone only by its claimer, whose floor for it is stale if
// the shard moved on among other instances meanwhile. So every session's
// record carries the highest term its instance saw, or sent a record of, on
// any shard (wire.MetaSeen, seenMax), every listing of the sessions, at each
// pass, raises fleetSeen to the highest any record that reads says, and the
// claim of a blob created again records a term above fleetSeen as well
// (claimOne; held or not, as a claim that took it may have died before it
// recorded its term), and so does the first claim of a blob that carries
// no term yet by an instance that saw a deletion or was cut off
// (mayHaveMissed: such a blob may have been created again by one that
// never saw its terms, unmarked): above every term any session's instance
// published, on that shard or another, for a term jumps but never repeats.
// The claim follows a listing of the sessions made at the same pass, after
// the blob stood longer than D: so every session that lived at the
// deletion, and renews, has rewritten its record since with every term it
// saw, or sent, before it; a dead one's last record is listed
// until it is collected. The seed stays the claimer's own (seedOf): the
// fleet's highest moves on, and a seed raised to it at each listing would
// start the wait again and again. A record says only what its instance saw
// up to its last write: a term seen after that, by a session whose renewals
// then failed, or that ended at once, cleanly, deleting its blob, is not
// published, and a process started again publishes only what it has seen
// since. That part, as the seeding, is bounded-time. A value that does not
// read, or that no claim reaches (wire.MaxSpreadTerm), is reported, not used.
//
// What is not covered: an instance that never saw the fleet before the
// deletion (a process started after it, or whose first session had not
// yet written its record then; or one whose session was not live and
// listed, as above, while a session of a longer lease duration than it
// knew began to run shards) knows nothing of
// it: it may claim a blob created again that it never saw terms on at once,
// and its terms may start again from what is seeded, or from 1, unless the
// fleet's highest it learnt covers them; as for the mutex's blob, that is
// the limit. So is a deletion after every instance that saw or sent a
// shard's last term has gone (a term sent unanswered, by a process that
// died before its session's record published it, is known to nobody).

// quiet reports how long this session must still claim nothing. A deletion
// seen before its first pass starts the quiet then, and the seeding of the
// terms it saw, tried at each pass until it is done or the quiet ends; a
// quiet begun by an earlier session of this instance runs on. While it
// lasts, the session also lists the shards, as often as its listings are
// spaced, to watch the blobs created again (quietList): so it claims them
// as the quiet ends, or as they stand (waitToStand), not a whole quiet
// later. It fails as a listing of the shards does if the container is gone
// again. spacing is the least time between two listings (shardplan's
// ListSpacing).
func (sm *shardManager) quiet(spacing time.Duration) (time.Duration, error) {
	left, seed := sm.o.state.beginQuiet()
	l := &sm.shardListing
	if left > 0 && (seed || !l.quietIdle && time.Since(l.quietAt) >= spacing) {
		done, err := sm.quietList(seed)
		if err != nil {
			return 0, err
		}
		if done && seed {
			// Done; until then, tried again at each pass while the
			// quiet lasts.
			sm.o.state.seeded()
		}
	}
	return max(0, left), nil
}

// waitToStand reports whether this session, its quiet over, still waits
// before it lists or claims: until the blobs its quiet's last listing
// showed created again have stood, by its watch (quietList). A claim
// tried sooner finds them settling and waits for the next listing. It
// shortens wait to then.
func (sm *shardManager) waitToStand(wait *time.Duration) bool {
	left := time.Until(sm.shardListing.quietStand)
	if left <= 0 {
		return false
	}
	*wait = min(*wait, left)
	return true
}

// quietList lists the shards during the quiet and watches each blob of the
// set created again (watchCreatedAgain); with seed, it then seeds the terms
// (see above). It reports whether the listing, and the seeding asked for,
// were done: every shard's seed is now at least as high as this instance
// saw, or taken. Once a listing finds every blob of the set there and none
// created again (a quiet after a cut, with no deletion), it lists no more
// in this session's quiet, but to seed.
func (sm *shardManager) quietList(seed bool) (bool, error) {
	o := sm.o
	seeds, set := o.state.seeds(), o.state.setCopy()
	found := map[string]listed{}
	start := time.Now()
	err := o.list(sm.ctx, wire.ShardsDir, func(l listed) {
		if seeds[l.name] > 0 || set[l.name] {
			found[l.name] = l
		}
	})
	sm.shardListing.quietAt = time.Now()
	if err == nil {
		// Its spacing, and the next ones'; not a failed listing's, which
		// took what its timeout let it (30 s a page), not what listing
		// these shards costs: as listShards.
		sm.balancing.plan.ListTook = sm.shardListing.quietAt.Sub(start)
	}
	if errors.Is(err, errContainerGone) {
		o.sawDeletion("a listing of the shards found the container gone")
		return false, errSessionGone
	}
	if err != nil {
		if seed {
			o.logger.Warn("leaderelection: could not list the shards to seed their terms after the container was deleted", "container", o.settings.Container, "prefix", o.prefix, "error", err)
		} else {
			o.logger.Debug("leaderelection: could not list the shards during a quiet to watch those created again", "container", o.settings.Container, "prefix", o.prefix, "error", err)
		}
		return false, nil
	}
	idle, stand, quiet := true, time.Time{}, o.quietFor()
	for name := range set {
		l, ok := found[name]
		if !ok {
			idle = false
		} else if since, ok := sm.watchCreatedAgain(l); ok {
			idle = false
			if t := since.Add(quiet); t.After(stand) {
				stand = t
			}
		}
	}
	sm.shardListing.quietIdle, sm.shardListing.quietStand = idle, stand
	if !seed {
		return true, nil
	}
	names := make([]string, 0, len(seeds))
	for name := range seeds {
		names = append(names, name)
	}
	var failed atomic.Int64
	atOnce(len(names), claimParallel, func(i int) {
		name := names[i]
		info := found[name].info // the zero LeaseInfo (no blob) if not listed
		if !sm.seedOne(name, o.managerFor(o.shardBlob(name), ""), info, seeds[name]) {
			failed.Add(1)
		}
	})
	o.logger.Info("leaderelection: seeded the terms of the shards after the container was deleted", "container", o.settings.Container, "prefix", o.prefix,
		"shards", len(names), "failed", failed.Load())
	return failed.Load() == 0, nil
}

// watchCreatedAgain starts this instance's watch (stoodRecreated) on a
// listed blob if it shows it created again (free, marked, carrying no
// term's record), from when the listing's page came: the blob stood so
// since then at least, and was created after the deletion, so a claim may
// time it from there. It reports whether it did, and since when the watch
// times that ETag. Every listing of the shards calls it, during the quiet
// (quietList) and after (readShards).
func (sm *shardManager) watchCreatedAgain(l listed) (since time.Time, ok bool) {
	if !listedCandidate(l.name, l.info).recreated {
		return time.Time{}, false
	}
	return sm.o.state.recreatedWatch(l.name).watch(l.info.ETag, l.info.Received), true
}

// seedOne makes a shard's blob carry floor as its seed, or more: it creates
// the blob so seeded if it is gone, or raises a lower seed on condition of
// its ETag, reading the blob again when another writer got there first (a
// raise of another instance, lower or higher). It reports false if storage
// failed it three times; true if the seed is high enough, or the blob is
// taken (its claim recorded a term above the seed it found). The ETag it
// writes, it watches from the answer (stoodRecreated), as quietList
// watches those it lists.
func (sm *shardManager) seedOne(name string, lm *BlobLeaseManager, info LeaseInfo, floor int64) bool {
	for range 3 {
		if !info.Exists {
			etag, err := sm.o.createShard(sm.ctx, lm, floor)
			if err == nil {
				sm.o.state.recreatedWatch(name).watch(etag, time.Now())
				return true
			}
			if !errors.Is(err, ErrLeaseHeld) { // created meanwhile: read it
				return false
			}
		} else if !seedBelow(info, floor) {
			return true
		} else if etag, ok := sm.raiseSeed(lm, info, floor); ok {
			sm.o.state.recreatedWatch(name).watch(etag, time.Now())
			return true
		}
		var err error
		if info, err = lm.Inspect(sm.ctx); err != nil {
			return false
		}
	}
	return false
}

// seedBelow reports whether info shows a shard's blob, free and carrying no
// term's record (isFresh), whose seed is below floor.
func seedBelow(info LeaseInfo, floor int64) bool {
	return isFresh(info) && info.Leader.Number < floor && (info.Role == "" || info.Role == RoleShard)
}

// raiseSeed raises the seed of a shard's blob that nobody leases and that
// carries no term's record to floor, if lower, on condition that its ETag
// is still info's. It reports whether it did, and the ETag it made.
func (sm *shardManager) raiseSeed(lm *BlobLeaseManager, info LeaseInfo, floor int64) (azcore.ETag, bool) {
	if !seedBelow(info, floor) {
		return "", false
	}
	etag, err := lm.writeSeed(sm.ctx, info.ETag, wire.CreateMetadata(wire.RoleShard, floor, time.Now()))
	if err != nil {
		sm.o.logger.Debug("leaderelection: could not raise a shard's seeded term", "container", lm.container, "blob", lm.blob, "error", err)
		return "", false
	}
	return etag, true
}

// stoodRecreated reports whether a shard whose blob is gone (c.exists false;
// this instance saw or sent terms on it, up to seed) or was created again
// (c.recreated; seed is this instance's seedOf, 0 if it saw and sent none),
// may be claimed now: once its blob's ETag has stood
// unchanged for quietFor since this instance first saw it. Until then it
// creates the blob, seeded with seed, or raises a lower seed to it (each
// a new ETag to time). Every session that ran the shard before the blob
// went had stopped by then, whether or not this instance saw the deletion,
// and whether or not that session has noticed it yet: the blob it times was
// created after the deletion, and a session stops at S + D - StopMargin for
// its last confirmed write, sent before it (see above).
func (sm *shardManager) stoodRecreated(c candidate, seed int64) bool {
	o := sm.o
	lm := o.managerFor(o.shardBlob(c.name), "")
	etag := c.etag
	if !c.exists {
		created, err := o.createShard(sm.ctx, lm, seed)
		if err != nil {
			return false // created meanwhile, or storage failed: the next listing tells
		}
		etag = created
	} else if raised, ok := sm.raiseSeed(lm, LeaseInfo{Exists: true, ETag: c.etag, Role: RoleShard, Leader: Term{Number: c.prev}}, seed); ok {
		etag = raised
	}
	w := o.state.recreatedWatch(c.name)
	w.watch(etag, time.Now())
	if !w.stood(etag, o.quietFor()) {
		return false
	}
	o.state.forgetRecreated(c.name)
	return true
}

// A claim on a container created again. A session's blob is never created
// again (session.go), so while it is there the container is the one the
// session began on; once the container is deleted and created again, a
// session that has not noticed yet (its renewal not yet due, or failing on
// a cut) may still read the new container, find a shard's blob missing or
// fresh, and create or take it: it would record the first term there, from
// its own floor, beside a doomed session's func and perhaps below its
// term, where the seeds and the quiet above are what must decide. So a
// claim of a shard whose blob carries no term (created by the claim, or
// found with none and unmarked) records its term only once a read of the
// session's blob, started after the claim's lease was granted, found it
// there and leased (sessionHeld): the lease it holds is then on the
// container the session began on, which no deletion has replaced since (a
// later deletion takes the shard's blob, and the record write, If-Match
// under the lease, fails). One read serves every claim that was waiting
// when it was started (sessionProof). A read that fails proves nothing:
// the claim gives its lease back. (The simulator's seed 971092012212: a
// session's probe of the shards no list names found a shard's blob missing
// on a container another instance had just created again, and recorded
// term 1 where the last term was 24.)

// sessionThere is the proof claimOne asks for (see above), once its lease
// was granted: "" if a read started after that found the session's blob
// there, leased, else the claim's outcome. A blob found gone, or not
// leased, is a deletion seen.
func (sm *shardManager) sessionThere() string {
	there, err := sm.proof.after(sm.ctx, sm.sessionHeld)
	switch {
	case err != nil:
		return outcome(err, "claimed")
	case !there:
		sm.o.sawDeletion("a claim found this session's blob gone")
		return "transient"
	}
	return ""
}

// sessionHeld reads whether this session's blob is there and leased: a
// session's blob is never created again, but a create of it sent as the
// session began may land late, on a container created again since; it
// carries no lease (the session's acquire was conditional on the first
// blob's ETag), so only a lease shows the blob is the one the session
// began on.
func (sm *shardManager) sessionHeld(ctx context.Context) (bool, error) {
	info, err := sm.s.term.blob().Inspect(ctx)
	return info.Exists && info.Held(), err
}

// sessionBlobGone reports whether this session's blob is gone (or not
// leased: sessionHeld), read after a listing of the shards and before
// anything is claimed on it: a session's blob goes only with the
// container, and a session that has not noticed that yet (its renewal
// failing on the silence, or not yet sent) must claim nothing on a listing
// of the container created again (shardfloors.go). One request a listing.
func (sm *shardManager) sessionBlobGone() bool {
	held, err := sm.sessionHeld(sm.ctx)
	return err == nil && !held
}
