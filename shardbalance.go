package leaderelection

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/shardplan"
	"go.opentelemetry.io/otel/metric"
)

// How a ShardOwner spreads shards. The arithmetic (the shares, rendezvous
// hashing, the assignment of free shards, the matching of a handover's
// givers to its receivers, the sets' digests) is internal/balance's: every
// instance computes it alike from the same listing of the sessions, and
// every live session's share (balance.FairShare) from the sorted IDs; the
// shares add up to n, so once every session holds its share no shard is
// free and no two sessions differ by more than one. This file acts on it.
//
// A session below its share claims free shards; one above it hands the
// excess over, and only while some other session is below its own (so that
// a view that lags does not set shards free for nobody). Nobody claims past
// its share, so nothing moves back: after a join the old sessions hand over
// exactly the new one's share, and after a death the survivors claim
// exactly the dead one's shards. Free shards are assigned (balance.Assign,
// balance.AssignSet) to the sessions with room by the same rule on every
// instance, so instances claiming at once (a cold start, a death) claim
// disjoint shards; a shard left free for long is anyone's. A session hands
// over first the shards another session prefers (balance.Preferred).
//
// Instances may disagree on the set (a rolling update that changes it,
// SetShards called on some only). Each session's record carries its set's
// digest (balance.SetDigest) and size, and the sessions whose records carry
// the same form a group (one whose record carries none, an older version, is
// a group of its own). Everything above happens within a group: n is the
// group's set's size, the shares are counted among the group's live
// sessions, and handovers, assignments and the shares of a dead session's
// shards go only to the group's sessions. With a single group, that is all
// the above. Every shard of a live session's set still runs: a group's
// sessions hold only shards of its set (a session stops those that leave its
// own, and claims none outside it), and the group's shares add up to n; so
// while a shard of the set is free the group holds fewer than n, some
// session of it is below its share, and claims it: from its candidates
// while it knows some it may claim, now or once their cooldown or release
// is over (each is dropped once tried, and at each pass those it came to
// run or claim since, and those that left the set: stopRemoved), else from
// a listing. What may last is a session below its share whose set's other
// shards other groups hold: it finds nothing to claim, and lists again only
// a lease duration later, or when a session comes, goes or changes its set
// (see shardManager.balance), not at every turn. Just after its own set
// changed, a session counts in its group, for a while, the sessions still
// on its previous set, which may be changing too.

// balance moves this session toward its share: it stops removed shards,
// hands over the excess, claims free shards while below its share, and
// releases leases left from failed requests. Shares, handovers and claims
// are counted within this session's group (view.group), which is every live
// session while they all agree on the set: view itself is needed only to
// know which shards are held by a live session. What to do is decided by
// internal/shardplan from a snapshot of the pass (tally) and what earlier
// passes left (balancing.plan); this does it, as steps, in this order.
func (sm *shardManager) balance(view sessionView, wait *time.Duration) error {
	q, err := sm.quiet(sm.balancing.plan.ListSpacing(sm.planSettings()))
	if err != nil {
		return err
	}
	if q > 0 {
		// After a deletion of the container, or a session ended cut off
		// (shardfloors.go): it claims nothing, but reads its notes and
		// adopts the shards handed to it, as the others see it below
		// its share; and keeps its list of them, and its releases.
		*wait = min(*wait, q)
		sm.stopRemoved()
		sm.expect(sm.tally(view))
		sm.retryLeftovers()
		sm.writeHeld()
		return nil
	}
	sm.balancing.noteGrowth(view)
	sm.stopRemoved()
	p := sm.tally(view)
	sm.give(p)
	sm.expect(p)
	sm.takeDeaths(p)
	if sm.waitForLive(p, wait) || sm.waitToStand(wait) {
		return nil
	}
	if sm.shouldList(p) && sm.balancing.plan.MayList(time.Now(), sm.planSettings()) {
		if err := sm.listNow(p); err != nil {
			return err
		}
	}
	sm.claimOrRest(p, wait)
	return nil
}

// pass is what one pass of balance found, and its steps share.
type pass struct {
	view    sessionView        // every live session
	mine    sessionView        // this session's group
	sets    []setID            // the sets this session's group runs (its own, and the one before just after it changed)
	snap    shardplan.Snapshot // what the decisions read of it
	shares  shardplan.Shares   // and what they counted
	listing shardplan.Listing  // whether it lists, and whether shards are coming (see expect)
}

// planSettings are the durations and bounds balance's decisions use.
func (sm *shardManager) planSettings() shardplan.Settings {
	s := sm.o.settings
	return shardplan.Settings{RenewInterval: s.RenewInterval, RetryInterval: s.RetryInterval,
		HandoverWait: min(s.LeaseDuration, maxLeaseDuration), StrayAfter: sm.o.strayAfter(), ProbeMax: probeMax}
}

// stopRemoved asks the funcs of the shards that left the set to stop, and
// drops from the candidates those no longer in the set, and those this
// instance now runs or is claiming (ownerState.stopRemoved): free when it
// found them, such a shard must not pass for a candidate, or a session
// below its share would wait on it for good instead of listing again (the
// simulator's seed 773775984822: a session one below its share for 14
// minutes while a shard was free, its probe having found free a shard that
// another session claimed first, then handed to it by a note). Those in
// their cooldown or with a release left to retry stay: they become
// claimable again, and waiting for them is meant.
func (sm *shardManager) stopRemoved() {
	sm.o.state.stopRemoved(sm.candidates.cands)
}

// tally reads the set and takes the pass's snapshot: what this session
// holds and claims, and the shares of its group (shardplan's Count).
func (sm *shardManager) tally(view sessionView) *pass {
	o := sm.o
	p := &pass{view: view}
	sn := &p.snap
	sn.Self, sn.Live, sn.Died = sm.s.id, len(view.live), len(view.died) > 0
	// Just after this instance's set changed, the sessions whose records
	// still carry the set it had may be changing theirs too (a deploy
	// that calls SetShards everywhere at once): their records say so
	// within a RenewInterval (two, if a write must be retried), read
	// within a RetryInterval. Until then they count in this session's
	// group, as they did, and it hands nothing over: else each instance
	// would count itself alone with the new set, claim up to all of its
	// new shards, and hand most of them back. That is less than
	// LeaseDuration - StopMargin + RetryInterval. (The share is set
	// under the same lock as the set is read: ownerState.tally.)
	t := o.state.tally(view, sm.s.id, 2*o.settings.RenewInterval+o.settings.RetryInterval)
	sn.N, sn.Digest, sn.Changing, sn.Own = t.n, t.digest, t.changing, t.own
	p.sets, p.mine = t.sets, t.mine
	sn.Group, sn.Owned, sn.Handing = p.mine.live, view.owned, view.handing
	for id := range view.leave {
		if id != sm.s.id && slices.Contains(view.live, id) {
			sn.Leavers++
		}
	}
	sn.Running = view.sets(sm.s.id, sn.Digest)
	sn.Signature = view.signature()
	sn.Leaving = view.leaving(sm.s.id, p.sets...)
	sn.StrayDraw = time.Duration(rand.Int64N(int64(o.strayAfter())))
	p.shares, sm.balancing.plan = sm.balancing.plan.Count(p.snap)
	if p.shares.AgreeChanged {
		if sm.balancing.plan.Disagree {
			o.logger.Info("leaderelection: the live sessions disagree on the set of shards; each counts its share among those that have its set",
				"container", o.settings.Container, "prefix", o.prefix, "shards", sn.N, "agreeing", len(p.mine.live), "liveSessions", len(view.live))
		} else {
			o.logger.Info("leaderelection: the live sessions agree on the set of shards again", "container", o.settings.Container, "prefix", o.prefix,
				"shards", sn.N, "liveSessions", len(view.live))
		}
	}
	return p
}

// give hands this session's excess over to the sessions of its group below
// their share, and sends what it must send anyway: the releases a failed
// request left, and its list of the shards it holds (heldlist.go).
func (sm *shardManager) give(p *pass) {
	if k := p.shares.HandOver(p.snap.Changing); k > 0 {
		sm.handOver(k, p.mine)
	}
	sm.retryLeftovers()
	sm.writeHeld()
}

// expect decides how often this session reads its notes, and whether
// shards are on their way to it (shardplan.Memory.Expect). A session below
// its share may be handed shards (see handoff.go), even by one whose record
// does not say yet that it holds more than its share: it reads its notes,
// for as long as the records keep changing and a while after (they change
// as shards move), not for good if nothing comes; often (every handoffPoll)
// only while another session of its group is above its share, or leaving,
// and once a second otherwise, while another has reached its share (a giver
// is one of those): a listing of the notes costs the account in proportion
// to the container on Azurite (8 ms at 10,000 shards, measured with
// listprobe), and ten instances claiming at a cold start read theirs a
// hundred times a second, then 613 times in a minute while every session
// was below its share, with nobody to hand them anything. While shards are
// sure to come to it (another session of its group is above its share,
// leaving, or handing shards over: a giver's record counts the shards it
// hands over apart, as it asks their funcs to stop), it does not list the
// shards: they come to it. (It did, when a giver's record said it was at
// its share as soon as it had picked what to hand over: the joiner of a
// fleet at 10,000 shards read its notes once a second, and listed every
// shard, 4 s of Azurite's one thread, while 700 were on their way to it.)
func (sm *shardManager) expect(p *pass) {
	var notes shardplan.Notes
	notes, p.listing.Coming, sm.balancing.plan = sm.balancing.plan.Expect(time.Now(), p.snap, p.shares, sm.planSettings())
	sm.handoffs.expecting.Store(int32(notes))
	sm.balancing.group = p.mine
	sm.handoffs.setPeers(p.view.live)
}

// takeDeaths takes in hand the sessions that this pass's listing found
// dead. Every survivor is below its share now. Those that must list (see
// takeFromDead) do so at once; any other listing waits its turn, by rank,
// rather than all at once.
func (sm *shardManager) takeDeaths(p *pass) {
	var take bool
	if take, sm.balancing.plan = sm.balancing.plan.Deaths(time.Now(), p.snap, p.shares, sm.planSettings()); take {
		sm.takeFromDead(p.mine, p.snap.N)
	}
}

// waitForLive reports whether this session, below its share, must wait
// before it claims, and shortens wait to the end of that wait: it claims
// only once the live sessions have stood one poll, so that instances that
// start at about the same moment agree on who is alive, and so on who
// claims what. (A death needs no such wait: every instance that sees it
// sees one session fewer. It is taken in hand above, as only this listing
// of the sessions reports it.)
func (sm *shardManager) waitForLive(p *pass, wait *time.Duration) bool {
	var left time.Duration
	if left, sm.balancing.plan = sm.balancing.plan.WaitForLive(time.Now(), p.snap, p.shares, sm.planSettings()); left > 0 {
		*wait = min(*wait, left)
		return true
	}
	return false
}

// shouldList decides whether this pass lists the shards (if its turn and
// spacing allow: balance), and first, a few shards short, looks for them
// the cheap way (probeUnlisted). When to list, and why, is
// shardplan.Memory.ShouldList's: a session below its share lists when it
// has no candidate left (or they were mostly taken), unless it idles or
// shards are coming to it and not yet overdue; one at its share lists once,
// in its turn, after the records stood still, unless they count every
// shard; and, fewer shards held than the set has for minutes, it looks for
// leases nobody's record counts (a claim whose record was written with its
// answer lost, then given up, then its release lost too). (Every instance
// listed after every change, to know who held what when one of them died,
// until the sessions' lists (heldlist.go) told that.)
func (sm *shardManager) shouldList(p *pass) bool {
	o := sm.o
	coming := p.listing.Coming
	p.listing, sm.balancing.plan = sm.balancing.plan.ShouldList(time.Now(), p.snap, p.shares, coming, shardplan.Claims{Cands: len(sm.candidates.cands), Stale: sm.candidates.stale}, sm.planSettings())
	if p.listing.ViewChanged {
		o.logger.Debug("leaderelection: the sessions' records changed", "prefix", o.prefix, "shards", p.snap.N, "share", p.shares.Target, "own", p.shares.Own,
			"held", p.shares.Held, "group", len(p.mine.live), "liveSessions", len(p.view.live), "rank", p.shares.Rank, "changing", p.snap.Changing)
	}
	if p.listing.SawAllHeld {
		o.counts.sawAllHeld(time.Now())
	}
	list := p.listing.List
	if p.listing.Probe {
		if found, ok := sm.probeUnlisted(p.view); ok && found > 0 {
			list = false
		}
	}
	return list
}

// listNow lists the shards, and notes what that tells of the other groups.
func (sm *shardManager) listNow(p *pass) error {
	if err := sm.listShards(p.view); err != nil {
		return err
	}
	sm.balancing.plan = sm.balancing.plan.Listed(p.snap, p.shares, sm.heldByOthers(p.mine), len(sm.candidates.cands), sm.planSettings())
	return nil
}

// claimOrRest claims toward this session's share, or, at its share, frees
// the strays only it can tell and says what it took; and shortens wait to
// its next useful pass.
func (sm *shardManager) claimOrRest(p *pass, wait *time.Duration) {
	deficit := p.shares.Deficit
	if deficit <= 0 {
		sm.balancing.plan.Probed = false
		sm.freeStrays()
		if sm.reportTook() { // what was handed to it, if that is how it got there
			sm.recordSoon()
		}
		clear(sm.candidates.cands)
		return
	}
	if !sm.candidates.stale {
		claimed, tried, more := sm.claim(min(deficit, claimBatch), deficit, p.mine)
		sm.candidates.took.Add(int64(claimed))
		if claimed >= deficit {
			// At its share now: it reads its notes no more, from now,
			// not from its next pass (a read then was one a session at
			// its share made).
			sm.handoffs.expecting.Store(expectNothing)
			sm.reportTook()
			sm.recordSoon()
		}
		if claimed < deficit && (claimed > 0 || tried > 0 && more) {
			*wait = 0 // more to claim: list the sessions again and go on
		}
	}
	if sm.candidates.stale && !sm.balancing.plan.Idle(time.Now(), p.snap.Running, p.shares.Over) {
		// Its candidates were mostly taken, or (see claim) a listing
		// finds what is left sooner: wait for the next listing rather
		// than fail on the rest, and no longer than until it may be made.
		// While shards are coming, that is once they are overdue: not
		// sooner, or this loop would list the sessions over and over
		// (it did, at ten times a second, on every instance that a
		// leaving one handed shards to).
		*wait = min(*wait, sm.balancing.plan.RestWait(time.Now(), p.listing, sm.planSettings()))
	}
}

// noteGrowth times, for each live session, when its record last said it held
// more shards than at the last pass (a session first seen counts as grown
// then): one whose count stands still is no longer claiming (see claim).
func (b *balancing) noteGrowth(view sessionView) {
	now := time.Now()
	b.prevOwned = maps.Clone(b.lastOwned)
	for _, id := range view.live {
		if n, ok := b.lastOwned[id]; !ok || view.owned[id] > n {
			b.grewAt[id] = now
		}
		b.lastOwned[id] = view.owned[id]
	}
	if len(b.lastOwned) > len(view.live) {
		for id := range b.lastOwned {
			if !slices.Contains(view.live, id) {
				delete(b.lastOwned, id)
				delete(b.grewAt, id)
			}
		}
	}
}

// heldByOthers counts the shards of the set that the last listing showed
// held by a session outside group: another group's, or one it did not know.
func (sm *shardManager) heldByOthers(group sessionView) int {
	in := make(map[string]bool, len(group.live))
	for _, id := range group.live {
		in[id] = true
	}
	return sm.shardListing.heldOutside(in, sm.candidates.cands)
}

// strayAfter is how long fewer shards than the set must stay held before
// the sessions at their share look for a lease nobody counts: 5 to 10
// minutes, drawn by each.
const strayAfter = 5 * time.Minute

func (o *ShardOwner) strayAfter() time.Duration {
	if o.opts.seams.strayAfter > 0 {
		return o.opts.seams.strayAfter
	}
	return strayAfter
}

// handOver asks k running shards to stop, to be handed to the sessions
// below their share (ownerState.handOver): those another live session prefers first,
// the sessions below their share before the others, then this session's
// least preferred.
func (sm *shardManager) handOver(k int, view sessionView) {
	o := sm.o
	queue, picked, n := o.state.handOver(k, view, sm.s.id)
	if len(queue) > 0 {
		sm.handoffs.pacing.Add(1)
		go sm.pace(sm.shardsCtx, queue, min(handoverPerGiver, handoverAtOnce/balance.Givers(view.live, view.owned, n, sm.s.id)))
	}
	o.counts.handovers.Add(context.Background(), int64(picked), metric.WithAttributeSet(o.shardMetrics.attrs))
	o.logger.Debug("leaderelection: handing shards over to balance the load", "container", o.settings.Container, "prefix", o.prefix,
		"count", picked, "liveSessions", len(view.live))
}
