package leaderelection

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/google/uuid"
)

// How a ShardOwner's session finds the free shards (a listing, or what it
// knew a dead session held) and picks its part of them to claim; each is
// then taken by the one path of shardtake.go (claimOne): break, acquire and
// record, each step conditional on the ETag it saw.

// claim claims up to k candidates, claimParallel at a time, toward a
// deficit of shards. It returns how many it won, how many it tried, and
// whether shards of dead sessions are left to try. It runs as steps, in
// this order, over what one round of claims picked (claimRound).
func (sm *shardManager) claim(k, deficit int, view sessionView) (won, tried int, more bool) {
	r := sm.freeNow()
	sm.assignPart(r, deficit, view)
	if !sm.orderPart(r) {
		return 0, 0, false
	}
	sm.freeForLong(r)
	sm.pickUpTo(r, k)
	return sm.claimPicked(r, deficit)
}

// claimRound is what one round of claims found and picked, and its steps
// share.
type claimRound struct {
	now    time.Time
	n      int             // the set's size
	free   []string        // the candidates free to claim now
	mine   map[string]bool // this session's part of the candidates
	order  []string        // those to try, in order: the free ones of its part, then others
	others []string        // the free ones not of its part that are anyone's now
	picked []candidate     // those it claims
}

// freeNow is the candidates of the set that are free to claim now: not
// running here, nor being claimed, with no release left to retry, and past
// their cooldown.
func (sm *shardManager) freeNow() *claimRound {
	r := &claimRound{now: time.Now()}
	r.n, r.free = sm.o.state.freeOf(sm.candidates.cands, r.now)
	return r
}

// assignPart computes this session's part of the free shards, by the rule
// every instance applies alike, once per set of candidates and set of live
// sessions: from a listing, over the whole set by who holds what
// (balance.AssignSet); from the dead sessions' lists or the probe, by the
// rooms the records leave (balance.Assign; records change as shards are
// claimed, and instances read them at different moments). Then the shards
// left free for long, whoever they were assigned to (freeForLong).
//
// Instances that list at about the same moment compute the same parts from
// a listing, whatever claims landed between their listings: each claim
// follows the parts, so a shard one listing shows held is one the others
// assign to its holder anyway. The rooms the records leave, a share less
// the count in each session's record, did not: at a cold start the
// records, rewritten as the sessions renew, lagged the listings by hundreds
// of claims, and each instance's part came out a few shards off the
// others'; a few sessions came up short at the end and listed every shard
// again, for 10 to 20 s more.
func (sm *shardManager) assignPart(r *claimRound, deficit int, view sessionView) {
	o := sm.o
	if live := strings.Join(view.live, ","); (sm.candidates.part == nil || live != sm.candidates.partFor) && sm.candidates.fromListing {
		set := o.state.shards() // sorted
		sm.candidates.part, sm.candidates.partTo = balance.AssignSet(set, view.live, sm.shardListing.holders(), sm.isPeer, r.free, sm.s.id)
		sm.candidates.partFor = live
	} else if sm.candidates.part == nil || live != sm.candidates.partFor {
		room := make(map[string]int, len(view.live))
		for _, id := range view.live {
			room[id] = max(0, balance.FairShare(r.n, view.live, id)-view.owned[id])
			if rm, ok := sm.candidates.deathRoom[id]; ok && live == sm.candidates.deathFor {
				room[id] = rm
			}
		}
		room[sm.s.id] = max(room[sm.s.id], deficit)
		sm.candidates.part, sm.candidates.partTo = balance.Assign(r.free, view.live, room, sm.s.id)
		sm.candidates.partFor = live
	}
}

// orderPart puts first the free shards of this session's part. It reports
// false if there are none left and they were a dead session's: the round
// ends, and the session lists instead.
func (sm *shardManager) orderPart(r *claimRound) bool {
	isFree := make(map[string]bool, len(r.free))
	for _, name := range r.free {
		isFree[name] = true
	}
	r.mine = make(map[string]bool, len(sm.candidates.part))
	for _, name := range sm.candidates.part {
		r.mine[name] = true
		if isFree[name] {
			r.order = append(r.order, name)
		}
	}
	if len(r.order) == 0 {
		sm.candidates.part = nil // spent: assign again at the next claim, from the records then
		if sm.candidates.fromDeath {
			// This session's part of a dead session's shards is claimed
			// (or was empty), and it is still short: the survivors'
			// listings, or its own count, differed. The rest are mostly
			// taken by now: a listing, out of turn, finds those left at
			// less cost than a try of each.
			sm.candidates.stale, sm.balancing.plan.ListNotBefore = true, time.Time{}
			return false
		}
	}
	return true
}

// freeForLong adds, after this session's part, the free shards that are
// anyone's now. A shard free for long that another session was assigned,
// while that session's record has not said it holds more for as long as a
// record takes to be rewritten and read again (its room was overstated, or
// it is stuck), is anyone's; so is one assigned to nobody (no room was
// left). Not one of a session that claims on: at a cold start, every shard
// of the first listing was free for long while each session was still
// claiming its part, and those done first took the others' parts, leaving
// them short by a few, to be found by listing 10,000 shards again on a busy
// account: 10 to 15 s more.
func (sm *shardManager) freeForLong(r *claimRound) {
	// However a session's count moves (a func that fails over and over
	// makes it dip and grow again), a shard free for 4 × that is anyone's.
	long := sm.o.settings.RenewInterval + 2*sm.o.settings.RetryInterval
	// So is, once this session's part is claimed, a shard a dead session
	// held by a listing: the survivors' records, and so their parts, may
	// differ, but not what must be claimed.
	for _, name := range r.free {
		if r.mine[name] {
			continue
		}
		free := r.now.Sub(sm.candidates.freeSince[name])
		stuck := free >= long && (r.now.Sub(sm.balancing.grewAt[sm.candidates.partTo[name]]) >= long || free >= 4*long)
		if stuck || len(r.order) == 0 && sm.candidates.cands[name].dead {
			r.others = append(r.others, name)
		}
	}
	slices.SortFunc(r.others, func(a, b string) int {
		sa, sb := balance.Rendezvous(sm.s.id, a), balance.Rendezvous(sm.s.id, b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	r.order = append(r.order, r.others...)
}

// pickUpTo picks up to k of them, in order, that no claim has reserved
// meanwhile, and reserves them.
func (sm *shardManager) pickUpTo(r *claimRound, k int) {
	for _, name := range sm.o.state.reserveUpTo(r.order, k-len(r.picked)) {
		r.picked = append(r.picked, sm.candidates.cands[name])
		delete(sm.candidates.cands, name)
	}
	if len(r.picked) > 0 && len(sm.candidates.part) > 0 {
		taken := make(map[string]bool, len(r.picked))
		for _, c := range r.picked {
			taken[c.name] = true
		}
		sm.candidates.part = slices.DeleteFunc(sm.candidates.part, func(name string) bool { return taken[name] })
	}
}

// claimPicked claims the shards picked, claimParallel at a time, and
// judges from how that went whether to list again.
func (sm *shardManager) claimPicked(r *claimRound, deficit int) (won, tried int, more bool) {
	o := sm.o
	picked := r.picked
	got := make([]bool, len(picked))
	why := make([]string, len(picked)) // why each claim that failed did
	atOnce(len(picked), claimParallel, func(i int) { got[i], why[i] = sm.claimOne(picked[i]) })
	wins, living, livingWins := 0, 0, 0 // living: candidates not of a dead session
	for i, c := range picked {
		if got[i] {
			wins++
		}
		if !c.dead {
			living++
			if got[i] {
				livingWins++
			}
		}
	}
	// Half of the candidates or more were taken meanwhile: list again
	// rather than try the rest one by one. A dead session's shards do not
	// count: a survivor tries at most its part of them (then lists, see
	// above) or, from a listing, those left after its part, each once, and
	// must not wait for its turn to list to find the few nobody took.
	sm.candidates.stale = 2*livingWins < living
	for _, name := range r.free {
		if c, ok := sm.candidates.cands[name]; ok && c.dead {
			more = true
			break
		}
	}
	o.logger.Debug("leaderelection: claimed shards", "prefix", o.prefix, "won", wins, "tried", len(picked),
		"deficit", deficit, "part", len(r.mine), "freeForLong", len(r.others), "free", len(r.free), "failed", tally(why))
	return wins, len(picked), more
}

// tally counts the outcomes of the claims that failed ("held", "lost",
// "transient", ...), as "held=3 transient=1"; "" if none did.
func tally(outcomes []string) string {
	n := map[string]int{}
	for _, o := range outcomes {
		if o != "" {
			n[o]++
		}
	}
	var b strings.Builder
	for _, o := range slices.Sorted(maps.Keys(n)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", o, n[o])
	}
	return b.String()
}

// freeStrays breaks the leases that the last listing found stray (see
// candidate.ours): leased for a lease duration or more with this session's
// record, which this session does not hold. A session below its share claims
// them as it claims any free shard; at its share or above, it frees them for
// the others, as nobody else can tell that they are not held (a record that
// names a live session is its holder's, to anyone else), and a session below
// its share then finds them free at its next listing. Each break is If-Match
// the listed ETag, and its term is first marked as this session's own, as
// before any break of a shard recorded for it (see claimOne).
func (sm *shardManager) freeStrays() {
	o := sm.o
	for _, c := range sm.candidates.cands {
		if !c.ours || o.state.holds(c.name) {
			continue
		}
		sm.ownTerms.record(c.name, c.prev)
		res, err := o.managerFor(o.shardBlob(c.name), uuid.NewString()).breakIfUnchangedWithin(sm.ctx, c.etag, o.settings.claimTimeout())
		if res == breakDone {
			o.logger.Info("leaderelection: freed a shard whose record names this session, which has not held it for a lease duration",
				"shard", c.name, "term", c.prev)
		} else if err != nil {
			o.logger.Debug("leaderelection: could not free a stray shard; the next listing tries again", "shard", c.name, "error", err)
		}
	}
}
