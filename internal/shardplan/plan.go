// Package shardplan holds what a ShardOwner's session decides at each pass of
// its balance from one listing of the sessions: its share and what its group
// lacks (Count), how many shards to hand over (Shares.HandOver), how often to
// read its notes (Expect), when a death lets it list (Deaths), whether to wait
// for the live sessions to stand (WaitForLive), whether to list the shards
// (ShouldList, MayList), how long to idle after a listing (Listed), and how
// long to rest before its next pass (RestWait). Each is a function of a
// Snapshot of that listing, the session's Memory of its earlier passes and the
// time, returning a decision and the Memory to keep: no lock, no I/O, no
// clock. The library (shardbalance.go) takes the snapshot, does what the decision
// says (stops, hands over, reads lists, lists, claims) and logs it. The
// arithmetic of shares and assignments is internal/balance's.
package shardplan

import (
	"slices"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
)

// Settings are the durations and bounds a session's decisions use.
type Settings struct {
	RenewInterval time.Duration
	RetryInterval time.Duration
	// HandoverWait is the longest a session waits for shards coming to it
	// before it lists them anyway, and the longest it idles while other
	// groups hold the rest of its set: LeaseDuration, at most a minute.
	HandoverWait time.Duration
	// StrayAfter is how long fewer shards than the set must stay held
	// before the sessions at their share look for a lease nobody counts:
	// drawn by each between StrayAfter and twice that (Snapshot.StrayDraw).
	StrayAfter time.Duration
	// ProbeMax is the most shards missing for which the sessions' lists
	// are read instead of a listing (Listing.Probe).
	ProbeMax int
}

// Snapshot is what one listing of the sessions showed, as one pass of the
// balance reads it.
type Snapshot struct {
	Self     string         // this session's ID
	N        int            // the set's size
	Digest   string         // and its digest
	Own      int            // what this session holds and claims
	Live     int            // how many sessions are live
	Leavers  int            // the live sessions other than this one whose record says they are leaving
	Group    []string       // the live sessions of this session's group (itself included), sorted
	Owned    map[string]int // what each live session's record says it holds
	Handing  map[string]int // and is handing over
	Changing bool           // this instance's set changed just now
	Running  string         // the sets the live sessions run
	// Signature sums up the view: it changes when a session comes or goes,
	// says it holds another number of shards, or runs another set.
	Signature string
	Leaving   bool // a session of its group is leaving: shards come to it
	Died      bool // this listing found sessions dead
	// StrayDraw is a random duration in [0, Settings.StrayAfter): when
	// fewer shards than the set start to stay held, this session looks
	// for strays StrayAfter+StrayDraw later.
	StrayDraw time.Duration
}

// Memory is what a session keeps from one pass to the next to decide:
// when it listed and what that told, how the view moved, and what it
// expects. The library writes the fields its I/O decides (LastList,
// ListTook, StrayAt after a listing that found strays, ListNotBefore and
// Probed when it takes a dead session's shards).
type Memory struct {
	LastList      time.Time     // when the last listing of the shards ended
	ListTook      time.Duration // and how long it took
	ListNotBefore time.Time     // its next listing waits its turn until then, after a death
	StrayAt       time.Time     // when to look for leases nobody counts, if fewer shards than the set stay held
	Listers       int           // the other live sessions of its group below their share, by their records
	Probed        bool          // the sessions' lists were read for the shards they do not name since the last listing
	// The view of the sessions (who is live, what each holds) settles after
	// ownership moved; the shards are then listed once, each instance in
	// its turn, so that what it knows of their holders is fresh.
	ViewSig   string
	ViewSince time.Time
	SettleAt  time.Time
	Settled   bool
	// LiveSig is the group's live sessions at the last change, LiveSince
	// when one came.
	LiveSig   string
	LiveSince time.Time
	// ExpectSig is the view's signature when expecting was last judged,
	// ExpectSince since when it stands; ComingSince since when shards are
	// coming to it, below its share (zero: none are).
	ExpectSig   string
	ExpectSince time.Time
	ComingSince time.Time
	// While the live sessions disagree on the set: how many shards of
	// this session's set its last listing showed held by sessions of other
	// groups, and the sets the sessions ran then (Snapshot.Running); and
	// until when a session below its share that found nothing to claim,
	// while the sets stay as they were then (IdleFor), does not list again.
	Foreign    int
	ForeignFor string
	IdleUntil  time.Time
	IdleFor    string
	Disagree   bool // this session's group was not every live session, at the last pass
}

// Shares is what one pass counts: this session's share (Target), what it
// holds and claims (Own) and the difference (Deficit); what the group's
// other sessions lack of their shares (Short), hold beyond them (Over) and
// are handing over (Handing); what the group holds by their records and
// this session's count (Held); this session's place in its group (Rank);
// and whether every live session that is not leaving runs its set (Agree).
type Shares struct {
	Target, Own, Deficit int
	Short, Over, Held    int
	Handing              int
	Rank                 int
	Agree                bool
	// AgreeChanged: the sessions came to agree, or to disagree, at this pass.
	AgreeChanged bool
}

// Count counts the shares of this session's group.
func (m Memory) Count(s Snapshot) (Shares, Memory) {
	p := Shares{Own: s.Own, Held: s.Own}
	p.Target = balance.FairShare(s.N, s.Group, s.Self)
	p.Agree = len(s.Group) == s.Live-s.Leavers
	if p.Agree == m.Disagree {
		m.Disagree = !p.Agree
		p.AgreeChanged = true
	}
	m.Listers = 0
	for _, id := range s.Group {
		if id != s.Self {
			share := balance.FairShare(s.N, s.Group, id)
			lack := max(0, share-s.Owned[id])
			p.Short += lack
			p.Over += max(0, s.Owned[id]-share)
			p.Handing += s.Handing[id]
			p.Held += s.Owned[id]
			if lack > 0 {
				m.Listers++
			}
		}
	}
	if !p.Agree && m.ForeignFor == s.Running {
		// Other groups may hold shards of this set: count those this
		// session's last listing showed, if the sessions still run the
		// sets they ran then (else none: ShouldList's strays tell).
		p.Held = min(s.N, p.Held+m.Foreign)
	}
	p.Deficit = p.Target - p.Own
	p.Rank, _ = slices.BinarySearch(s.Group, s.Self)
	return p, m
}

// HandOver is how many shards this session hands over: its excess, as far
// as the group's other sessions lack shares, and none while its set is
// changing.
func (p Shares) HandOver(changing bool) int {
	if excess := p.Own - p.Target; excess > 0 && p.Short > 0 && !changing {
		return min(excess, p.Short)
	}
	return 0
}

// Notes is how often a session reads the notes of the shards handed to it.
type Notes int32

const (
	NotesNever  Notes = iota // at its share: never
	NotesSeldom              // below its share, the records changing: now and then
	NotesOften               // another session of its group above its share, or leaving: often
)

// Expect decides how often this session reads its notes, and whether
// shards are coming to it (a session of its group leaving, or, while the
// records changed lately, one above its share or handing shards over).
func (m Memory) Expect(now time.Time, s Snapshot, p Shares, set Settings) (Notes, bool, Memory) {
	if s.Signature != m.ExpectSig {
		m.ExpectSig, m.ExpectSince = s.Signature, now
	}
	recent := now.Sub(m.ExpectSince) < set.RenewInterval+2*set.RetryInterval
	coming := s.Leaving || p.Deficit > 0 && (p.Over > 0 || p.Handing > 0) && recent
	switch {
	case coming:
		return NotesOften, coming, m
	case p.Deficit > 0 && recent && m.Listers < len(s.Group)-1:
		return NotesSeldom, coming, m
	}
	return NotesNever, coming, m
}

// Deaths decides, when this pass found sessions dead, when this session may
// list in its turn, by rank, and whether it takes its part of the dead
// sessions' shards (it is below its share).
func (m Memory) Deaths(now time.Time, s Snapshot, p Shares, set Settings) (bool, Memory) {
	if !s.Died {
		return false, m
	}
	m.ListNotBefore = now.Add(time.Duration(p.Rank) * m.listTurn(set))
	return p.Deficit > 0, m
}

// WaitForLive is how long this session, below its share, waits before it
// claims (0: it does not): until the group's live sessions have stood one
// RetryInterval since one came, so that instances that start at about the
// same moment agree on who is alive, and so on who claims what.
func (m Memory) WaitForLive(now time.Time, s Snapshot, p Shares, set Settings) (time.Duration, Memory) {
	if live := strings.Join(s.Group, ","); live != m.LiveSig {
		grew := false
		for _, id := range s.Group {
			if !strings.Contains(m.LiveSig, id) {
				grew = true
			}
		}
		m.LiveSig = live
		if grew {
			m.LiveSince = now
		}
	}
	if left := set.RetryInterval - now.Sub(m.LiveSince); p.Deficit > 0 && left > 0 {
		return left, m
	}
	return 0, m
}

// Listing is whether a pass lists the shards, and what goes with it.
type Listing struct {
	List bool // it lists (if MayList, once any probe is done)
	// Probe: a few shards short, it first reads the sessions' lists for
	// the shards they do not name; finding some, it does not list.
	Probe       bool
	SawAllHeld  bool // the records, standing still, count every shard of a set every session runs
	ViewChanged bool // the sessions' records changed since the last pass
	Coming      bool // shards are coming to it
	Overdue     bool // and have been for long
}

// Claims is what the session's candidates are, for ShouldList.
type Claims struct {
	Cands int  // the shards it found free and may claim: none it runs or is claiming, none out of the set
	Stale bool // its last claims from them mostly failed
}

// ShouldList decides whether this pass lists the shards, if its turn and
// spacing allow (MayList).
func (m Memory) ShouldList(now time.Time, s Snapshot, p Shares, coming bool, c Claims, set Settings) (Listing, Memory) {
	var d Listing
	if sig := s.Signature + s.Digest; sig != m.ViewSig {
		m.ViewSig, m.ViewSince, m.Settled, m.SettleAt = sig, now, false, time.Time{}
		d.ViewChanged = true
	}
	if p.Held < s.N {
		if m.StrayAt.IsZero() {
			m.StrayAt = now.Add(set.StrayAfter + s.StrayDraw)
		}
	} else {
		m.StrayAt = time.Time{}
	}
	// Shards that are coming may fail to come: a giver that counts this
	// session's share otherwise (its record was not yet read, or a set is
	// changing) hands it nothing. Waiting for them does not hold back a
	// listing for more than a lease duration.
	if !coming {
		m.ComingSince = time.Time{}
	} else if m.ComingSince.IsZero() {
		m.ComingSince = now
	}
	d.Coming = coming
	d.Overdue = coming && now.Sub(m.ComingSince) >= m.waitForHandover(set) && now.Sub(m.LastList) >= m.waitForHandover(set)
	switch {
	case p.Deficit > 0:
		// Claims are conditional, so claiming from an old listing is safe;
		// list again only when it has nothing left, or its shards were
		// mostly taken meanwhile. But not while it idles. (Each of its
		// candidates is one it may claim, now or once a cooldown or a
		// release is over: one it came to run or claim, or that left the
		// set, is none, and one it tried, won or not, is dropped; so
		// while it lists no more, it claims on.)
		d.List = (c.Cands == 0 || c.Stale) && !m.Idle(now, s.Running, p.Over) && (!coming || d.Overdue)
	case !m.Settled && now.Sub(m.ViewSince) >= set.RenewInterval+set.RetryInterval:
		// At its share or above, and the records have stood still since
		// they last changed. If they count every shard, and every live
		// session runs this set, every shard runs: nothing is to be found.
		// Else list once, each instance in its turn by rank: to find a
		// shard handed to this session that it did not expect.
		if p.Held >= s.N && p.Agree {
			m.Settled, d.SawAllHeld = true, true
			break
		}
		if m.SettleAt.IsZero() {
			m.SettleAt = now.Add(time.Duration(p.Rank) * m.listTurn(set))
		}
		d.List = !now.Before(m.SettleAt)
	case p.Held < s.N:
		// Fewer shards are held than the set has, and it lasts: some may
		// be held by a lease that nobody's record counts. Look, seldom,
		// and not all at once.
		d.List = !now.Before(m.StrayAt)
		if d.List {
			m.StrayAt = time.Time{}
		}
	}
	if d.List && p.Deficit > 0 && p.Agree && !m.Probed && s.N-p.Held <= set.ProbeMax {
		// A few shards short while the records count nearly every shard:
		// once between listings, the sessions' lists tell which shards
		// nobody holds, at a small part of a listing's cost.
		m.Probed, d.Probe = true, true
	}
	return d, m
}

// MayList reports whether this session's turn and spacing let it list now.
func (m Memory) MayList(now time.Time, set Settings) bool {
	return now.Sub(m.LastList) >= m.ListSpacing(set) && !now.Before(m.ListNotBefore)
}

// Listed is what a listing leaves: whether the view is settled, what other
// groups hold of this set (foreign), and, below its share with nothing free
// (cands) while other groups hold the rest of its set, until when it idles.
func (m Memory) Listed(s Snapshot, p Shares, foreign, cands int, set Settings) Memory {
	m.Settled = p.Deficit <= 0
	m.Foreign, m.ForeignFor = foreign, s.Running
	if s.Changing {
		m.ForeignFor = "" // its group is not yet what it will be
	}
	m.IdleUntil, m.IdleFor = time.Time{}, ""
	if p.Deficit > 0 && cands == 0 && !p.Agree && p.Over == 0 {
		// Below its share, nothing free, and no session of its group
		// above its own share to hand it shards: other groups hold the
		// rest of this set (a rolling update). Wait a lease duration (at
		// most a minute) rather than list at the pace of a handover,
		// unless a session comes, goes or changes its set.
		m.IdleUntil, m.IdleFor = m.LastList.Add(m.waitForHandover(set)), s.Running
	}
	return m
}

// Idle reports whether this session, below its share, lists the shards
// again only later, as its last listing found nothing free while other
// groups hold the rest of its set, and the sessions still run the sets they
// ran then (running) with none of its group above its share (over).
func (m Memory) Idle(now time.Time, running string, over int) bool {
	return m.IdleFor == running && over == 0 && now.Before(m.IdleUntil)
}

// RestWait is how long a session whose candidates are stale waits for its
// next listing: until it may be made, and, while shards are coming, until
// they are overdue.
func (m Memory) RestWait(now time.Time, d Listing, set Settings) time.Duration {
	next := max(m.LastList.Add(m.ListSpacing(set)).Sub(now), m.ListNotBefore.Sub(now))
	if d.Coming && !d.Overdue {
		next = max(next, m.ComingSince.Add(m.waitForHandover(set)).Sub(now), m.LastList.Add(m.waitForHandover(set)).Sub(now))
	}
	return max(0, next)
}

// ListSpacing is the least time between two listings of the shards by this
// instance: one RetryInterval, or what its last one took times the sessions
// below their share (itself included; at most four), if more. A listing
// costs the storage account in proportion to the shards, and every instance
// below its share lists; a lone one lists again after one listing's time.
func (m Memory) ListSpacing(set Settings) time.Duration {
	return max(set.RetryInterval, time.Duration(min(4, max(1, m.Listers+1)))*m.ListTook)
}

// waitForHandover is how long a session below its share waits for shards
// that are coming to it before it lists the shards anyway.
func (m Memory) waitForHandover(set Settings) time.Duration {
	return max(m.ListSpacing(set), set.HandoverWait)
}

// listTurn is how long each instance's turn to list the shards lasts when
// they take turns: what its last listing took, twice, or half a
// RetryInterval if more.
func (m Memory) listTurn(set Settings) time.Duration {
	return max(2*m.ListTook, set.RetryInterval/2)
}
