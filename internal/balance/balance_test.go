package balance

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
				s := FairShare(n, live, id)
				sum += s
				lo, hi = min(lo, s), max(hi, s)
			}
			require.Equal(t, n, sum, "n=%d l=%d", n, l)
			require.LessOrEqual(t, hi-lo, 1, "n=%d l=%d", n, l)
		}
	}
	assert.Equal(t, 5, FairShare(5, nil, "x"), "no live session listed yet: all of them")
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
		before[i] = Preferred(live, fmt.Sprintf("shard-%05d", i))
		count[before[i]]++
	}
	for _, id := range live {
		assert.InDelta(t, n/4, count[id], n/4*0.05, "session %s", id)
	}
	joined := id(5)
	moved := 0
	for i := range before {
		now := Preferred(append(slices.Clone(live), joined), fmt.Sprintf("shard-%05d", i))
		if now != before[i] {
			moved++
			require.Equal(t, joined, now, "a preference only ever moves to the newcomer")
		}
	}
	assert.InDelta(t, n/5, moved, n/5*0.05)
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
		part, to := Assign(free, live, room, id)
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
			require.GreaterOrEqual(t, Rendezvous(id, part[i-1]), Rendezvous(id, part[i]), "best first")
		}
	}
	require.Equal(t, 1000, total)
	room[live[0]] = 0
	part, _ := Assign(free, live, room, live[0])
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
		part, to := AssignSet(set, live, nil, none, set, id)
		require.Len(t, part, FairShare(len(set), live, id), "%s gets its share", id)
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
		part, _ := AssignSet(set, live, holders, none, free, id)
		want := slices.DeleteFunc(slices.Clone(parts[id]), func(name string) bool { return holders[name] != "" })
		assert.ElementsMatch(t, want, part, "%s: its part less what it claimed", id)
	}
	// A shard another live session holds outside the group counts for no
	// one; one of a dead session is anyone's.
	holders = map[string]string{set[0]: "other", set[1]: "dead"}
	skip := func(id string) bool { return id == "other" }
	got := map[string]bool{}
	for _, id := range live {
		part, _ := AssignSet(set, live, holders, skip, set[1:], id)
		for _, name := range part {
			got[name] = true
		}
	}
	assert.False(t, got[set[0]], "held by a live session of another group")
	assert.True(t, got[set[1]], "held by a dead session")
	assert.Len(t, got, len(set)-1)
}
