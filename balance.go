package leaderelection

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/wire"
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
// session of it is below its share, and claims it. What may last is a
// session below its share whose set's other shards other groups hold: it
// finds nothing to claim, and lists again only a lease duration later, or
// when a session comes, goes or changes its set (see shardManager.balance),
// not at every turn. Just after its own set changed, a session counts in its
// group, for a while, the sessions still on its previous set, which may be
// changing too.

// checkShardName keeps shard names to what a blob name carries unchanged
// through URLs and listings, and reads back the same (wire.NameProblem).
func checkShardName(name string) error {
	if why := wire.NameProblem(name); why != "" {
		return fmt.Errorf("leaderelection: invalid shard name %q: %s", name, why)
	}
	return nil
}

// checkShardNames checks every name and that none repeats, and returns the
// set.
func checkShardNames(names []string) (map[string]bool, error) {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		if err := checkShardName(n); err != nil {
			return nil, err
		}
		if set[n] {
			return nil, fmt.Errorf("leaderelection: shard %q is named twice", n)
		}
		set[n] = true
	}
	return set, nil
}

// balancing is what balance remembers from one pass to the next: how the
// live sessions' counts moved, when they last changed, what the other
// groups hold and whether to idle meanwhile, and what it expects to be
// handed. Touched only by the session's goroutine.
type balancing struct {
	grewAt    map[string]time.Time // when each live session's record last said it held more (or it was first seen); see noteGrowth
	lastOwned map[string]int       // what each live session's record said it held, at this pass
	prevOwned map[string]int       // and at the pass before (see takeFromDead)
	liveSig   string               // the live sessions, at the last change
	liveSince time.Time            // when they last changed
	// While the live sessions disagree on the set (see balance.go):
	// how many shards of this session's set its last listing showed held
	// by sessions of other groups, and the sets the sessions ran then
	// (sessionView.sets); and until when a session below its share that
	// found nothing to claim, while the sets stay as they were then
	// (idleFor), does not list again.
	foreign     int
	foreignFor  string
	idleUntil   time.Time
	idleFor     string
	disagree    bool        // this session's group was not every live session, at the last balance
	expectSig   string      // the view's signature when expecting was last judged (see balance)
	expectSince time.Time   // since when it stands
	comingSince time.Time   // since when shards are coming to it, below its share (zero: none are)
	group       sessionView // this session's group, at the last balance (for leave)
}

// balance moves this session toward its share: it stops removed shards,
// hands over the excess, claims free shards while below its share, and
// releases leases left from failed requests. Shares, handovers and claims
// are counted within this session's group (view.group), which is every live
// session while they all agree on the set: view itself is needed only to
// know which shards are held by a live session. It runs as steps, in this
// order, over what one pass found (pass).
func (g *shardManager) balance(view sessionView, wait *time.Duration) error {
	if q := g.quiet(); q > 0 {
		// After a deletion of the container, or a session ended cut off
		// (vanished.go): it claims nothing, but reads its notes and
		// adopts the shards handed to it, as the others see it below
		// its share; and keeps its list of them, and its releases.
		*wait = min(*wait, q)
		g.expect(g.tally(view))
		g.retryLeftovers()
		g.writeHeld()
		return nil
	}
	g.noteGrowth(view)
	p := g.tally(view)
	g.give(p)
	g.expect(p)
	g.takeDeaths(p)
	if g.waitForLive(p, wait) {
		return nil
	}
	if g.shouldList(p) && time.Since(g.lastList) >= g.listSpacing() && !time.Now().Before(g.listNotBefore) {
		if err := g.listNow(p); err != nil {
			return err
		}
	}
	g.claimOrRest(p, wait)
	return nil
}

// pass is what one pass of balance found, and its steps share.
type pass struct {
	view     sessionView // every live session
	mine     sessionView // this session's group
	n        int         // the set's size
	digest   string      // and its digest
	sets     []setID     // the sets this session's group runs (its own, and the one before just after it changed)
	changing bool        // this instance's set changed just now
	agree    bool        // every live session that is not leaving runs this set
	running  string      // the sets the live sessions run (sessionView.sets)
	// own is what this session holds and claims, target its share,
	// deficit the difference.
	own, target, deficit int
	// short is what the group's other sessions lack of their shares, over
	// what they hold beyond them, handing what they are handing over,
	// held what the group holds by their records (and this session's own).
	short, over, held, handing int
	rank                       int  // this session's place in its group
	coming, overdue            bool // shards are on their way to it; and for long
}

// tally reads the set, stops the shards that left it, and counts the
// shares of this session's group.
func (g *shardManager) tally(view sessionView) *pass {
	o := g.o
	p := &pass{view: view}
	o.mu.Lock()
	p.n, p.digest = len(o.set), o.digest
	p.sets = []setID{{p.digest, p.n}}
	// Just after this instance's set changed, the sessions whose records
	// still carry the set it had may be changing theirs too (a deploy
	// that calls SetShards everywhere at once): their records say so
	// within a RenewInterval (two, if a write must be retried), read
	// within a RetryInterval. Until then they count in this session's
	// group, as they did, and it hands nothing over: else each instance
	// would count itself alone with the new set, claim up to all of its
	// new shards, and hand most of them back. That is less than
	// LeaseDuration - StopMargin + RetryInterval.
	p.changing = time.Since(o.setAt) < 2*o.settings.RenewInterval+o.settings.RetryInterval
	if p.changing {
		p.sets = append(p.sets, o.previous)
	}
	for name, r := range o.runs {
		if !o.set[name] && !r.leaving && !r.returned.Load() {
			r.leaving, r.leftAt = true, time.Now()
			r.ts.pleaseStop(ErrShardRemoved)
		}
	}
	for name := range g.cands {
		if !o.set[name] {
			// Free at the last listing, but no longer in the set: it must
			// not pass for a candidate, or a session below its share
			// would wait on it instead of listing again.
			delete(g.cands, name)
		}
	}
	p.own = len(o.claiming)
	for _, r := range o.runs {
		if !r.leaving && !r.returned.Load() {
			p.own++
		}
	}
	p.mine = view.group(g.s.id, p.sets...)
	p.target = balance.FairShare(p.n, p.mine.live, g.s.id)
	o.target, o.live = p.target, len(view.live)
	o.mu.Unlock()
	leavers := 0
	for id := range view.leave {
		if id != g.s.id && slices.Contains(view.live, id) {
			leavers++
		}
	}
	p.agree = len(p.mine.live) == len(view.live)-leavers
	p.running = view.sets(g.s.id, p.digest)
	if p.agree == g.disagree {
		g.disagree = !p.agree
		if g.disagree {
			o.logger.Info("leaderelection: the live sessions disagree on the set of shards; each counts its share among those that have its set",
				"container", o.settings.Container, "prefix", o.prefix, "shards", p.n, "agreeing", len(p.mine.live), "liveSessions", len(view.live))
		} else {
			o.logger.Info("leaderelection: the live sessions agree on the set of shards again", "container", o.settings.Container, "prefix", o.prefix,
				"shards", p.n, "liveSessions", len(view.live))
		}
	}
	p.held = p.own
	g.listers = 0
	for _, id := range p.mine.live {
		if id != g.s.id {
			share := balance.FairShare(p.n, p.mine.live, id)
			lack := max(0, share-view.owned[id])
			p.short += lack
			p.over += max(0, view.owned[id]-share)
			p.handing += view.handing[id]
			p.held += view.owned[id]
			if lack > 0 {
				g.listers++
			}
		}
	}
	if !p.agree && g.foreignFor == p.running {
		// Other groups may hold shards of this set: count those this
		// session's last listing showed, if the sessions still run the
		// sets they ran then (else none: see strayAt below).
		p.held = min(p.n, p.held+g.foreign)
	}
	p.deficit = p.target - p.own
	return p
}

// give hands this session's excess over to the sessions of its group below
// their share, and sends what it must send anyway: the releases a failed
// request left, and its list of the shards it holds (held.go).
func (g *shardManager) give(p *pass) {
	if excess := p.own - p.target; excess > 0 && p.short > 0 && !p.changing {
		g.handOver(min(excess, p.short), p.mine)
	}
	g.retryLeftovers()
	g.writeHeld()
}

// expect decides how often this session reads its notes, and whether
// shards are on their way to it. A session below its share may be handed
// shards (see handoff.go), even by one whose record does not say yet that
// it holds more than its share: it reads its notes, for as long as the
// records keep changing and a while after (they change as shards move),
// not for good if nothing comes; often (every handoffPoll) only while
// another session of its group is above its share, or leaving, and once a
// second otherwise, while another has reached its share (a giver is one of
// those): a listing of the notes costs the account in proportion to the
// container on Azurite (8 ms at 10,000 shards, measured with listprobe),
// and ten instances claiming at a cold start read theirs a hundred times a
// second, then 613 times in a minute while every session was below its
// share, with nobody to hand them anything. While shards are sure to come
// to it (another session of its group is above its share, leaving, or
// handing shards over: a giver's record counts the shards it hands over
// apart, as it asks their funcs to stop), it does not list the shards:
// they come to it. (It did, when a giver's record said it was at its share
// as soon as it had picked what to hand over: the joiner of a fleet at
// 10,000 shards read its notes once a second, and listed every shard, 4 s
// of Azurite's one thread, while 700 were on their way to it.)
func (g *shardManager) expect(p *pass) {
	o := g.o
	if sig := p.view.signature(); sig != g.expectSig {
		g.expectSig, g.expectSince = sig, time.Now()
	}
	recent := time.Since(g.expectSince) < o.settings.RenewInterval+2*o.settings.RetryInterval
	leaving := p.view.leaving(g.s.id, p.sets...)
	p.coming = leaving || p.deficit > 0 && (p.over > 0 || p.handing > 0) && recent
	switch {
	case p.coming:
		g.expecting.Store(expectOften)
	case p.deficit > 0 && recent && g.listers < len(p.mine.live)-1:
		g.expecting.Store(expectSeldom)
	default:
		g.expecting.Store(expectNothing)
	}
	g.group = p.mine
	g.setPeers(p.view.live)
	p.rank, _ = slices.BinarySearch(p.mine.live, g.s.id)
}

// takeDeaths takes in hand the sessions that this pass's listing found
// dead. Every survivor is below its share now. Those that must list (see
// takeFromDead) do so at once; any other listing waits its turn, by rank,
// rather than all at once.
func (g *shardManager) takeDeaths(p *pass) {
	if len(p.view.died) == 0 {
		return
	}
	g.listNotBefore = time.Now().Add(time.Duration(p.rank) * g.listTurn())
	if p.deficit > 0 {
		g.takeFromDead(p.mine, p.n)
	}
}

// waitForLive reports whether this session, below its share, must wait
// before it claims, and shortens wait to the end of that wait: it claims
// only once the live sessions have stood one poll, so that instances that
// start at about the same moment agree on who is alive, and so on who
// claims what. (A death needs no such wait: every instance that sees it
// sees one session fewer. It is taken in hand above, as only this listing
// of the sessions reports it.)
func (g *shardManager) waitForLive(p *pass, wait *time.Duration) bool {
	if live := strings.Join(p.mine.live, ","); live != g.liveSig {
		grew := false
		for _, id := range p.mine.live {
			if !strings.Contains(g.liveSig, id) {
				grew = true
			}
		}
		g.liveSig = live
		if grew {
			g.liveSince = time.Now()
		}
	}
	if left := g.o.settings.RetryInterval - time.Since(g.liveSince); p.deficit > 0 && left > 0 {
		*wait = min(*wait, left)
		return true
	}
	return false
}

// shouldList decides whether this pass lists the shards (if its turn and
// spacing allow: balance), and first, a few shards short, looks for them
// the cheap way (probeUnlisted).
func (g *shardManager) shouldList(p *pass) bool {
	o := g.o
	sig := p.view.signature() + p.digest
	if sig != g.viewSig {
		g.viewSig, g.viewSince, g.settled, g.settleAt = sig, time.Now(), false, time.Time{}
		o.logger.Debug("leaderelection: the sessions' records changed", "prefix", o.prefix, "shards", p.n, "share", p.target, "own", p.own,
			"held", p.held, "group", len(p.mine.live), "liveSessions", len(p.view.live), "rank", p.rank, "changing", p.changing)
	}
	if p.held < p.n {
		if g.strayAt.IsZero() {
			d := g.o.strayAfter()
			g.strayAt = time.Now().Add(d + time.Duration(rand.Int64N(int64(d))))
		}
	} else {
		g.strayAt = time.Time{}
	}
	// Shards that are coming may fail to come: a giver that counts this
	// session's share otherwise (its record was not yet read, or a set is
	// changing) hands it nothing. Waiting for them does not hold back a
	// listing for more than a lease duration.
	if !p.coming {
		g.comingSince = time.Time{}
	} else if g.comingSince.IsZero() {
		g.comingSince = time.Now()
	}
	p.overdue = p.coming && time.Since(g.comingSince) >= g.waitForHandover() && time.Since(g.lastList) >= g.waitForHandover()
	list := false
	switch {
	case p.deficit > 0:
		// Claims are conditional, so claiming from an old listing is safe;
		// list again only when it has nothing left, or its shards were
		// mostly taken meanwhile. But not while it idles (see below).
		list = (len(g.cands) == 0 || g.stale) && !g.idle(p.running, p.over) && (!p.coming || p.overdue)
	case !g.settled && time.Since(g.viewSince) >= o.settings.RenewInterval+o.settings.RetryInterval:
		// At its share or above, and the records have stood still since
		// they last changed (a session came or went, or one holds another
		// number of shards). If they count every shard, and every live
		// session runs this set (else what other groups hold of it is
		// only as fresh as the last listing), every shard runs, and
		// nothing is to be found: none is unowned. Else list once,
		// each instance in its turn by rank: to find a shard handed to
		// this session that it did not expect, as it counted itself at
		// its share (a giver's view, a record behind, differed): its
		// record names this session, so only this session can take it up
		// (see listShards), and it reads no notes. (Every instance listed
		// after every change, to know who held what when one of them
		// died, until the sessions' lists (held.go) told that.)
		if p.held >= p.n && p.agree {
			g.settled = true
			o.counts.sawAllHeld(time.Now())
			break
		}
		if g.settleAt.IsZero() {
			g.settleAt = time.Now().Add(time.Duration(p.rank) * g.listTurn())
		}
		list = !time.Now().Before(g.settleAt)
	case p.held < p.n:
		// Fewer shards are held than the set has, and it lasts: a session
		// below its share would have claimed them, so some may be held by
		// a lease that nobody's record counts (a claim whose record was
		// written with its answer lost, then given up, then its release
		// lost too): only the session its record names can tell. Look,
		// seldom, and not all at once. (While the groups disagree, and
		// run other sets than at this session's last listing, what they
		// hold of this set is not known: then too a listing tells.)
		list = !time.Now().Before(g.strayAt)
		if list {
			g.strayAt = time.Time{}
		}
	}
	if list && p.deficit > 0 && p.agree && !g.probed && p.n-p.held <= probeMax {
		// A few shards short while the records count nearly every shard:
		// the sessions' lists tell which shards nobody holds, at a small
		// part of a listing's cost (see probeUnlisted). Once between
		// listings: if that leaves this session short, a listing tells.
		g.probed = true
		if found, ok := g.probeUnlisted(p.view); ok && found > 0 {
			list = false
		}
	}
	return list
}

// listNow lists the shards, and notes what that tells of the other groups.
func (g *shardManager) listNow(p *pass) error {
	if err := g.listShards(p.view); err != nil {
		return err
	}
	g.settled = p.deficit <= 0
	g.foreign, g.foreignFor = g.heldByOthers(p.mine), p.running
	if p.changing {
		g.foreignFor = "" // its group is not yet what it will be
	}
	g.idleUntil, g.idleFor = time.Time{}, ""
	if p.deficit > 0 && len(g.cands) == 0 && !p.agree && p.over == 0 {
		// Below its share, nothing free, and no session of its group
		// above its own share to hand it shards: other groups hold the
		// rest of this set (a rolling update). Listing on at the pace
		// of a session waiting for a handover would list thousands of
		// shards every few seconds for as long as they disagree: wait
		// a lease duration (at most a minute) instead, unless a
		// session comes, goes or changes its set, which is when shards
		// of this set are set free. A shard freed otherwise (its func
		// returned by itself) waits that long at most.
		g.idleUntil, g.idleFor = g.lastList.Add(max(g.listSpacing(), min(g.o.settings.LeaseDuration, maxLeaseDuration))), p.running
	}
	return nil
}

// claimOrRest claims toward this session's share, or, at its share, frees
// the strays only it can tell and says what it took; and shortens wait to
// its next useful pass.
func (g *shardManager) claimOrRest(p *pass, wait *time.Duration) {
	if p.deficit <= 0 {
		g.probed = false
		g.freeStrays()
		if g.reportTook() { // what was handed to it, if that is how it got there
			g.recordSoon()
		}
		clear(g.cands)
		return
	}
	if !g.stale {
		claimed, tried, more := g.claim(min(p.deficit, claimBatch), p.deficit, p.mine)
		g.took.Add(int64(claimed))
		if claimed >= p.deficit {
			// At its share now: it reads its notes no more, from now,
			// not from its next pass (a read then was one a session at
			// its share made).
			g.expecting.Store(expectNothing)
			g.reportTook()
			g.recordSoon()
		}
		if claimed < p.deficit && (claimed > 0 || tried > 0 && more) {
			*wait = 0 // more to claim: list the sessions again and go on
		}
	}
	if g.stale && !g.idle(p.running, p.over) {
		// Its candidates were mostly taken, or (see claim) a listing
		// finds what is left sooner: wait for the next listing rather
		// than fail on the rest, and no longer than until it may be made.
		// While shards are coming, that is once they are overdue: not
		// sooner, or this loop would list the sessions over and over
		// (it did, at ten times a second, on every instance that a
		// leaving one handed shards to).
		next := max(time.Until(g.lastList.Add(g.listSpacing())), time.Until(g.listNotBefore))
		if p.coming && !p.overdue {
			next = max(next, time.Until(g.comingSince.Add(g.waitForHandover())), time.Until(g.lastList.Add(g.waitForHandover())))
		}
		*wait = min(*wait, max(0, next))
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

// idle reports whether this session, below its share, lists the shards
// again only later, as its last listing found nothing free while other
// groups hold the rest of its set (see balance), and the sessions still run
// the sets they ran then (sets) with none of its group above its share
// (over).
func (b *balancing) idle(sets string, over int) bool {
	return b.idleFor == sets && over == 0 && time.Now().Before(b.idleUntil)
}

// heldByOthers counts the shards of the set that the last listing showed
// held by a session outside group: another group's, or one it did not know.
func (g *shardManager) heldByOthers(group sessionView) int {
	in := make(map[string]bool, len(group.live))
	for _, id := range group.live {
		in[id] = true
	}
	n := 0
	g.ownersMu.Lock()
	defer g.ownersMu.Unlock()
	for name, h := range g.owners {
		if _, free := g.cands[name]; !free && !in[h.session] {
			n++
		}
	}
	return n
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

// listSpacing is the least time between two listings of the shards by this
// instance: one RetryInterval, or what its last one took times the sessions
// below their share (itself included; at most four), if more. A listing
// costs the storage account in proportion to the shards (Azurite: about two
// seconds for 10,000), and every instance below its share lists; a lone one
// (one that joined, while the others hand it shards) lists again after one
// listing's time, so as to find soon the shards released for it.
func (g *shardManager) listSpacing() time.Duration {
	return max(g.o.settings.RetryInterval, time.Duration(min(4, max(1, g.listers+1)))*g.listTook)
}

// waitForHandover is how long a session below its share waits for shards
// that are coming to it (see balance) before it lists the shards anyway.
func (g *shardManager) waitForHandover() time.Duration {
	return max(g.listSpacing(), min(g.o.settings.LeaseDuration, maxLeaseDuration))
}

// listTurn is how long each instance's turn to list the shards lasts when
// they take turns: what its last listing took, twice, or half a
// RetryInterval if more.
func (g *shardManager) listTurn() time.Duration {
	return max(2*g.listTook, g.o.settings.RetryInterval/2)
}

// handOver asks k running shards to stop, to be handed to the sessions
// below their share (handOverTo): those another live session prefers first,
// the sessions below their share before the others, then this session's
// least preferred.
func (g *shardManager) handOver(k int, view sessionView) {
	o := g.o
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.set)
	type pick struct {
		r    *shardRun
		rank int
		s    uint64
	}
	var picks []pick
	for _, r := range o.runs {
		if r.leaving || r.returned.Load() {
			continue
		}
		p := pick{r: r, s: balance.Rendezvous(g.s.id, r.name)}
		switch pref := balance.Preferred(view.live, r.name); {
		case pref == g.s.id:
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
	chosen := make([]*shardRun, 0, min(k, len(picks)))
	for _, p := range picks[:min(k, len(picks))] {
		chosen = append(chosen, p.r)
	}
	if queue := g.handOverTo(chosen, view.live, balance.Plan(view.live, view.owned, n, g.s.id, len(chosen)), view.ident); len(queue) > 0 {
		g.pacing.Add(1)
		go g.pace(g.shardsCtx, queue, min(handoverPerGiver, handoverAtOnce/balance.Givers(view.live, view.owned, n, g.s.id)))
	}
	o.counts.handovers.Add(context.Background(), int64(min(k, len(picks))), metric.WithAttributeSet(o.shardMetrics.attrs))
	o.logger.Debug("leaderelection: handing shards over to balance the load", "container", o.settings.Container, "prefix", o.prefix,
		"count", min(k, len(picks)), "liveSessions", len(view.live))
}
