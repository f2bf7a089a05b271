package shardplan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/stretchr/testify/require"
)

// Property tests: many random snapshots and memories drawn from a fixed
// seed, so that a failure comes back at every run, each checked against the
// rules the package's and the functions' doc comments state.

var settings = Settings{RenewInterval: 2 * time.Second, RetryInterval: time.Second, HandoverWait: 15 * time.Second,
	StrayAfter: 5 * time.Minute, ProbeMax: 256}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// snapshot draws a view of a group of 1 to 8 sessions (self among them) and
// up to 3 sessions of other groups, over up to 200 shards.
func snapshot(r *rand.Rand) Snapshot {
	n := r.IntN(201)
	var group []string
	for len(group) < 1+r.IntN(8) {
		group = append(group, fmt.Sprintf("s%04d", r.IntN(10000)))
		slices.Sort(group)
		group = slices.Compact(group)
	}
	s := Snapshot{Self: group[r.IntN(len(group))], N: n, Digest: "d", Group: group,
		Owned: map[string]int{}, Handing: map[string]int{}, Changing: r.IntN(4) == 0, Running: fmt.Sprint(r.IntN(2)),
		Signature: fmt.Sprint(r.IntN(3)), Leaving: r.IntN(5) == 0, Died: r.IntN(4) == 0,
		StrayDraw: time.Duration(r.Int64N(int64(settings.StrayAfter)))}
	for _, id := range group {
		share := balance.FairShare(n, group, id)
		s.Owned[id] = max(0, share+r.IntN(5)-2)
		if r.IntN(4) == 0 {
			s.Handing[id] = r.IntN(3)
		}
	}
	s.Own = s.Owned[s.Self]
	others := r.IntN(4)
	s.Live = len(group) + others
	s.Leavers = r.IntN(others + 1)
	return s
}

// memory draws what earlier passes may have left.
func memory(r *rand.Rand) Memory {
	at := func() time.Time {
		if r.IntN(3) == 0 {
			return time.Time{}
		}
		return t0.Add(-time.Duration(r.Int64N(int64(10 * time.Minute))))
	}
	return Memory{LastList: at(), ListTook: time.Duration(r.Int64N(int64(3 * time.Second))), ListNotBefore: at(),
		StrayAt: at(), Listers: r.IntN(4), Probed: r.IntN(2) == 0, ViewSig: fmt.Sprint(r.IntN(3)) + "d", ViewSince: at(),
		SettleAt: at(), Settled: r.IntN(2) == 0, LiveSince: at(), ExpectSig: fmt.Sprint(r.IntN(3)), ExpectSince: at(),
		ComingSince: at(), Foreign: r.IntN(20), ForeignFor: fmt.Sprint(r.IntN(2)), IdleUntil: at().Add(time.Minute),
		IdleFor: fmt.Sprint(r.IntN(2)), Disagree: r.IntN(2) == 0}
}

// counted draws a snapshot and a memory, and counts the snapshot's shares
// with that memory: the memory returned is the one Count leaves.
func counted(r *rand.Rand) (Snapshot, Shares, Memory) {
	s := snapshot(r)
	p, m := memory(r).Count(s)
	return s, p, m
}

// Count gives this session its FairShare, its deficit against it, and counts
// the others' lacks, excesses and what is handing, as their records say;
// what is held never passes the set's size by what other groups hold.
func TestPropertyCountCountsTheGroupsShares(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 1))
	for range 2000 {
		s, m := snapshot(r), memory(r)
		p, m2 := m.Count(s)
		require.Equal(t, balance.FairShare(s.N, s.Group, s.Self), p.Target)
		require.Equal(t, p.Target-s.Own, p.Deficit)
		short, over, held, listers := 0, 0, s.Own, 0
		for _, id := range s.Group {
			if id == s.Self {
				continue
			}
			share := balance.FairShare(s.N, s.Group, id)
			short += max(0, share-s.Owned[id])
			over += max(0, s.Owned[id]-share)
			held += s.Owned[id]
			if s.Owned[id] < share {
				listers++
			}
		}
		require.Equal(t, short, p.Short)
		require.Equal(t, over, p.Over)
		require.Equal(t, listers, m2.Listers)
		require.Equal(t, len(s.Group) == s.Live-s.Leavers, p.Agree)
		require.Equal(t, !p.Agree, m2.Disagree)
		require.Equal(t, m.Disagree != m2.Disagree, p.AgreeChanged)
		if p.Agree || m.ForeignFor != s.Running {
			require.Equal(t, held, p.Held)
		} else {
			require.Equal(t, min(s.N, held+m.Foreign), p.Held)
		}
		require.Equal(t, s.Self, s.Group[p.Rank])
	}
}

// A session hands over no more than its excess, no more than the others
// lack, and nothing while its set changes.
func TestPropertyHandOverIsBoundedByExcessAndLack(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 2))
	for range 2000 {
		s := snapshot(r)
		p, _ := memory(r).Count(s)
		k := p.HandOver(s.Changing)
		require.LessOrEqual(t, k, max(0, p.Own-p.Target))
		require.LessOrEqual(t, k, p.Short)
		if s.Changing {
			require.Zero(t, k)
		} else {
			require.Equal(t, max(0, min(p.Own-p.Target, p.Short)), k)
		}
	}
}

// Shards come while a session of the group leaves, or, below its share, while
// the records changed lately and another holds more than its share or hands
// shards over; at its share, with nobody leaving, a session never reads its
// notes; and records that stood still long expect nothing but a leaver's.
func TestPropertyExpectReadsNotesOnlyWhileShardsMayCome(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 3))
	for range 2000 {
		s, p, m := counted(r)
		now := t0
		notes, coming, m2 := m.Expect(now, s, p, settings)
		if s.Leaving {
			require.True(t, coming)
		}
		require.Equal(t, coming, notes == NotesOften)
		if p.Deficit <= 0 && !s.Leaving {
			require.Equal(t, NotesNever, notes)
		}
		require.Equal(t, s.Signature, m2.ExpectSig)
		// The same records, long after: only a leaver's shards come.
		later := now.Add(settings.RenewInterval + 2*settings.RetryInterval)
		notes, coming, _ = m2.Expect(later, s, p, settings)
		require.Equal(t, s.Leaving, coming)
		if !s.Leaving {
			require.Equal(t, NotesNever, notes)
		}
	}
}

// After a death, a session lists no sooner than its turn by rank, and takes
// its part of the dead sessions' shards only while below its share.
func TestPropertyDeathsTakeTurnsByRank(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 4))
	for range 2000 {
		s, p, m := counted(r)
		take, m2 := m.Deaths(t0, s, p, settings)
		if !s.Died {
			require.False(t, take)
			require.Equal(t, m, m2)
			continue
		}
		require.Equal(t, p.Deficit > 0, take)
		require.Equal(t, t0.Add(time.Duration(p.Rank)*max(2*m.ListTook, settings.RetryInterval/2)), m2.ListNotBefore)
		if p.Rank > 0 {
			require.False(t, m2.MayList(t0, settings), "listed before its turn")
		}
	}
}

// A session waits only below its share, never longer than a RetryInterval,
// and a group that only shrinks does not start the wait again.
func TestPropertyWaitForLiveWaitsOnlyForAGroupThatGrew(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 5))
	for range 2000 {
		s, p, m := counted(r)
		left, m2 := m.WaitForLive(t0, s, p, settings)
		require.LessOrEqual(t, left, settings.RetryInterval)
		if p.Deficit <= 0 {
			require.Zero(t, left)
		}
		// One RetryInterval later the same group has stood: no wait.
		left, _ = m2.WaitForLive(t0.Add(settings.RetryInterval), s, p, settings)
		require.Zero(t, left)
		if len(s.Group) > 1 {
			fewer := s
			fewer.Group = slices.DeleteFunc(slices.Clone(s.Group), func(id string) bool { return id != s.Self })
			_, m3 := m2.WaitForLive(t0.Add(time.Second/2), fewer, p, settings)
			require.Equal(t, m2.LiveSince, m3.LiveSince)
		}
	}
}

// ShouldList: the same inputs give the same decision; a probe comes only
// with a listing, below its share, with every session agreeing, once between
// listings; a session with candidates left that are not stale does not list;
// nor does one at its share whose group's records count every shard; nor one
// that idles.
func TestPropertyShouldListListsOnlyWhenAListingCanTellSomething(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 6))
	for range 5000 {
		s, p, m := counted(r)
		c := Claims{Cands: r.IntN(3), Stale: r.IntN(3) == 0}
		coming := r.IntN(3) == 0
		d, m2 := m.ShouldList(t0, s, p, coming, c, settings)
		d2, m3 := m.ShouldList(t0, s, p, coming, c, settings)
		require.Equal(t, d, d2)
		require.Equal(t, m2, m3)
		if d.Probe {
			require.True(t, d.List && p.Deficit > 0 && p.Agree && !m.Probed && s.N-p.Held <= settings.ProbeMax)
			require.True(t, m2.Probed)
			again, _ := m2.ShouldList(t0, s, p, coming, c, settings)
			require.False(t, again.Probe, "a second probe before a listing")
		}
		if p.Deficit > 0 && c.Cands > 0 && !c.Stale {
			require.False(t, d.List)
		}
		if p.Deficit > 0 && m.Idle(t0, s.Running, p.Over) {
			require.False(t, d.List)
		}
		if p.Deficit <= 0 && p.Held >= s.N && p.Agree {
			require.False(t, d.List)
		}
		if d.SawAllHeld {
			require.True(t, m2.Settled)
			require.False(t, d.List)
		}
		if p.Deficit > 0 && coming && !d.Overdue {
			require.False(t, d.List, "listed while shards are on their way")
		}
		// Strays are looked for only while fewer shards than the set are
		// held, from StrayAfter (and a draw) after that began.
		if p.Held >= s.N {
			require.True(t, m2.StrayAt.IsZero())
		} else if m.StrayAt.IsZero() && !d.List {
			require.Equal(t, t0.Add(settings.StrayAfter+s.StrayDraw), m2.StrayAt)
		}
	}
}

// A listing is spaced: none within a RetryInterval of the last, nor before
// this session's turn; and the rest before the next one is never negative,
// and ends once a listing may be made and any coming shards are overdue.
func TestPropertyListingsAreSpaced(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 7))
	for range 2000 {
		m := memory(r)
		now := t0
		if now.Sub(m.LastList) < settings.RetryInterval || now.Before(m.ListNotBefore) {
			require.False(t, m.MayList(now, settings))
		}
		d := Listing{Coming: r.IntN(2) == 0, Overdue: r.IntN(2) == 0}
		wait := m.RestWait(now, d, settings)
		require.GreaterOrEqual(t, wait, time.Duration(0))
		require.True(t, m.MayList(now.Add(wait), settings))
	}
}

// After a listing, a session idles only below its share with nothing free,
// its group disagreeing with the others and none of it above its share; it
// idles at most until a lease duration after that listing, and only while
// the sessions run the sets they ran at it.
func TestPropertyListedIdlesOnlyWhenOtherGroupsHoldTheRest(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 8))
	for range 2000 {
		s, p, m := counted(r)
		m.LastList = t0
		cands, foreign := r.IntN(2), r.IntN(10)
		m2 := m.Listed(s, p, foreign, cands, settings)
		require.Equal(t, p.Deficit <= 0, m2.Settled)
		require.Equal(t, foreign, m2.Foreign)
		idles := m2.Idle(t0, s.Running, p.Over)
		require.Equal(t, p.Deficit > 0 && cands == 0 && !p.Agree && p.Over == 0, idles)
		if idles {
			require.False(t, m2.Idle(t0.Add(max(m2.ListSpacing(settings), settings.HandoverWait)), s.Running, p.Over))
			require.False(t, m2.Idle(t0, s.Running+"x", p.Over))
		}
	}
}
