package leaderelection

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every session computes every session's share from the same sorted list:
// the shares add up to the number of shards and differ by at most one.
func TestFairSharesAddUpAndDifferByAtMostOne(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 7, 100, 10000} {
		for _, l := range []int{1, 2, 3, 10, 11, 200} {
			live := make([]string, l)
			for i := range live {
				live[i] = uuid.NewString()
			}
			slices.Sort(live)
			sum, lo, hi := 0, n, 0
			for _, id := range live {
				s := fairShare(n, live, id)
				sum += s
				lo, hi = min(lo, s), max(hi, s)
			}
			require.Equal(t, n, sum, "n=%d l=%d", n, l)
			require.LessOrEqual(t, hi-lo, 1, "n=%d l=%d", n, l)
		}
	}
	assert.Equal(t, 5, fairShare(5, nil, "x"), "no live session listed yet: all of them")
}

// Rendezvous hashing spreads the preferred sessions evenly, and a join
// changes the preference of about 1/(L+1) of the shards, all toward the
// newcomer.
func TestRendezvousPreferenceSpreadsAndMovesLittleOnAJoin(t *testing.T) {
	t.Parallel()
	// Fixed session IDs (as random as any, named rather than drawn): the
	// bounds below are four standard deviations wide, and a drawn set
	// would miss them now and then.
	id := func(i int) string { return uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprint("session-", i))).String() }
	live := []string{id(1), id(2), id(3), id(4)}
	slices.Sort(live)
	const n = 20000
	count := map[string]int{}
	before := make([]string, n)
	for i := range before {
		before[i] = preferred(live, fmt.Sprintf("shard-%05d", i))
		count[before[i]]++
	}
	for _, id := range live {
		assert.InDelta(t, n/4, count[id], n/4*0.05, "session %s", id)
	}
	joined := id(5)
	moved := 0
	for i := range before {
		now := preferred(append(slices.Clone(live), joined), fmt.Sprintf("shard-%05d", i))
		if now != before[i] {
			moved++
			require.Equal(t, joined, now, "a preference only ever moves to the newcomer")
		}
	}
	assert.InDelta(t, n/5, moved, n/5*0.05)
}

func TestShardNameRules(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "tenant-42", "orders/eu/3", "q:high@v=2", "x_y.z~1", string(make([]byte, 0)) + "A9"} {
		assert.NoError(t, checkShardName(ok), ok)
	}
	for _, bad := range []string{"", "a b", "a//b", "/a", "a/", "./a", "a/..", "a.", "ä", "a?b", "a#b", "a%20", `a\b`} {
		assert.Error(t, checkShardName(bad), bad)
	}
}

// Instances that see the same free shards and the same records assign them
// the same way: disjoint parts, each within its session's room, all the
// free shards while there is room.
func TestAssignGivesDisjointPartsWithinRoom(t *testing.T) {
	t.Parallel()
	live := make([]string, 10)
	room := map[string]int{}
	for i := range live {
		live[i] = uuid.NewString()
		room[live[i]] = 100 + i // 1,045 of room
	}
	slices.Sort(live)
	free := make([]string, 1000)
	for i := range free {
		free[i] = fmt.Sprintf("shard-%05d", i)
	}
	seen := map[string]string{}
	total := 0
	for _, id := range live {
		part, to := assign(free, live, room, id)
		require.LessOrEqual(t, len(part), room[id])
		for _, name := range part {
			require.Empty(t, seen[name], "%s assigned twice", name)
			seen[name] = id
		}
		for _, name := range free {
			if slices.Contains(part, name) {
				require.Equal(t, id, to[name], "each of its part is said to be its")
			} else {
				require.NotEqual(t, id, to[name], "none other is")
			}
		}
		total += len(part)
		for i := 1; i < len(part); i++ {
			require.GreaterOrEqual(t, rendezvous(id, part[i-1]), rendezvous(id, part[i]), "best first")
		}
	}
	require.Equal(t, 1000, total)
	room[live[0]] = 0
	part, _ := assign(free, live, room, live[0])
	assert.Empty(t, part, "no room, nothing")
}

// assignSet gives every instance the same parts whatever claims landed
// between their listings, as long as each claim followed the parts: a shard
// one listing shows held by its claimer is assigned to it by the others too.
func TestAssignSetGivesTheSamePartsBeforeAndAfterClaims(t *testing.T) {
	t.Parallel()
	live := []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7"}
	set := make([]string, 1000)
	for i := range set {
		set[i] = fmt.Sprintf("shard-%05d", i)
	}
	none := func(string) bool { return false }
	parts := map[string][]string{}
	seen := map[string]string{}
	for _, id := range live {
		part, to := assignSet(set, live, nil, none, set, id)
		require.Len(t, part, fairShare(len(set), live, id), "%s gets its share", id)
		for _, name := range part {
			require.Empty(t, seen[name], "%s assigned twice", name)
			seen[name] = id
			require.Equal(t, id, to[name])
		}
		parts[id] = part
	}
	require.Len(t, seen, len(set), "every shard assigned")
	// Each session has claimed some of its part, a listing shows them:
	// the rest of each part is what it was.
	holders := map[string]string{}
	var free []string
	for i, name := range set {
		if i%3 == 0 {
			holders[name] = seen[name]
		} else {
			free = append(free, name)
		}
	}
	for _, id := range live {
		part, _ := assignSet(set, live, holders, none, free, id)
		want := slices.DeleteFunc(slices.Clone(parts[id]), func(name string) bool { return holders[name] != "" })
		assert.ElementsMatch(t, want, part, "%s: its part less what it claimed", id)
	}
	// A shard another live session holds outside the group counts for no
	// one; one of a dead session is anyone's.
	holders = map[string]string{set[0]: "other", set[1]: "dead"}
	skip := func(id string) bool { return id == "other" }
	got := map[string]bool{}
	for _, id := range live {
		part, _ := assignSet(set, live, holders, skip, set[1:], id)
		for _, name := range part {
			got[name] = true
		}
	}
	assert.False(t, got[set[0]], "held by a live session of another group")
	assert.True(t, got[set[1]], "held by a dead session")
	assert.Len(t, got, len(set)-1)
}

// Sessions that disagree on the set form groups by their records' digests:
// within each, the shares add up to its set's size and differ by at most
// one; a session whose record carries no digest (an older version) is in
// none but its own; and a session whose set just changed counts in those
// still on its previous set.
func TestGroupSharesAddUpToEachSet(t *testing.T) {
	t.Parallel()
	setA, _ := checkShardNames([]string{"a", "b", "c", "d", "e", "f", "g"})
	setB, _ := checkShardNames([]string{"a", "b", "x"})
	a, b := setID{setDigest(setA), len(setA)}, setID{setDigest(setB), len(setB)}
	require.NotEqual(t, a.digest, b.digest)
	require.Len(t, a.digest, 16)
	v := sessionView{owned: map[string]int{}, set: map[string]string{}, size: map[string]int{}}
	runs := map[string]setID{}
	for i := range 9 {
		id := uuid.NewString()
		v.live = append(v.live, id)
		switch {
		case i == 0:
			v.set[id], v.size[id] = "", -1 // an older version
		case i%2 == 0:
			runs[id], v.set[id], v.size[id] = a, a.digest, a.size
		default:
			runs[id], v.set[id], v.size[id] = b, b.digest, b.size
		}
	}
	slices.Sort(v.live)
	sum := map[setID]int{}
	for id, set := range runs {
		g := v.group(id, set)
		require.True(t, slices.IsSorted(g.live))
		for _, other := range g.live {
			require.Equal(t, set, runs[other], "only sessions of the same set")
		}
		sum[set] += fairShare(set.size, g.live, id)
	}
	assert.Equal(t, map[setID]int{a: a.size, b: b.size}, sum)
	for _, id := range v.live {
		if v.set[id] == "" {
			for other, set := range runs {
				assert.NotContains(t, v.group(other, set).live, id, "an older version is in no group but its own")
			}
		}
	}
	var changing string
	for id, set := range runs {
		if set == b {
			changing = id
			break
		}
	}
	assert.Len(t, v.group(changing, a).live, 4+1, "alone with set A: A's four, and itself")
	assert.Len(t, v.group(changing, a, b).live, 8, "just changed from B: with B's too")
}

// The claims' log line says why those that failed did, by outcome.
func TestTallyCountsTheFailedClaimsByOutcome(t *testing.T) {
	assert.Equal(t, "", tally([]string{"", ""}))
	assert.Equal(t, "held=2 transient=1", tally([]string{"transient", "", "held", "held"}))
}
