package leaderelection

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/shardplan"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShardNameRules(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "tenant-42", "orders/eu/3", "q:high@v=2", "x_y.z~1", string(make([]byte, 0)) + "A9"} {
		assert.NoError(t, checkShardName(ok), ok)
	}
	for _, bad := range []string{"", "a b", "a//b", "/a", "a/", "./a", "a/..", "a.", "ä", "a?b", "a#b", "a%20", `a\b`} {
		assert.Error(t, checkShardName(bad), bad)
	}
}

// A list with several bad names reports every one at once, each once, in
// the list's order, and builds no set.
func TestEveryBadShardNameIsReportedAtOnce(t *testing.T) {
	t.Parallel()
	set, err := checkShardNames([]string{"ok", "a b", "ok", "", "a b", "x.", "ok", "fine"})
	require.Error(t, err)
	assert.Nil(t, set)
	assert.Equal(t, `leaderelection: invalid shard name "a b": may contain only letters, digits, '/' and - _ . ~ : @ =, got ' '`+"\n"+
		`leaderelection: shard "ok" is named twice`+"\n"+
		`leaderelection: invalid shard name "": must not be empty`+"\n"+
		`leaderelection: invalid shard name "x.": must not end with a dot`, err.Error())
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
	a, b := setID{balance.SetDigest(setA), len(setA)}, setID{balance.SetDigest(setB), len(setB)}
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
		sum[set] += balance.FairShare(set.size, g.live, id)
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

// A candidate this instance came to run or claim since it was found free,
// or whose shard left the set, is one no more: a session below its share
// drops it at its next pass, and so lists again rather than wait on it for
// good (seed 773775984822: lane 7 adopted by a note a shard its probe had
// found free, and stayed one below its share for 14 minutes while another
// shard was free). One in its cooldown, or with a release left to retry,
// stays: it becomes claimable again.
func TestShardCandidatesRunOrClaimedHereAreDropped(t *testing.T) {
	t.Parallel()
	set, err := checkShardNames([]string{"s04", "s05", "s06", "s07", "s08"})
	require.NoError(t, err)
	o := &ShardOwner{}
	o.state = newOwnerState(set, &o.fleetMemory)
	st := &o.state
	st.ownership.addRun(&shardRun{name: "s05"})                // handed to it by a note, and adopted
	st.ownership.claiming["s06"] = true                        // a claim in flight
	st.ownership.cooldown["s07"] = time.Now().Add(time.Minute) // its func returned here
	st.ownership.leftover["s08"] = uuid.NewString()            // a release to retry
	sm := &shardManager{o: o, candidates: candidates{cands: map[string]candidate{}}}
	for _, name := range []string{"s04", "s05", "s06", "s07", "s08", "s09"} { // s09: left the set
		sm.candidates.cands[name] = candidate{name: name}
	}
	sm.stopRemoved() // as each pass starts (balance)
	assert.ElementsMatch(t, []string{"s04", "s07", "s08"}, slices.Collect(maps.Keys(sm.candidates.cands)))

	// As lane 7 was: one short, its only candidate running here.
	sm.candidates.cands = map[string]candidate{"s05": {name: "s05"}}
	sm.stopRemoved()
	d, _ := shardplan.Memory{}.ShouldList(time.Now(), shardplan.Snapshot{N: len(set)}, shardplan.Shares{Deficit: 1}, false,
		shardplan.Claims{Cands: len(sm.candidates.cands)}, shardplan.Settings{RenewInterval: time.Second, RetryInterval: time.Second})
	assert.True(t, d.List, "below its share with no candidate it may claim, it lists")
}

// A listing of the shards during a quiet that fails leaves the spacing of
// the next listings as the last one that answered left it: it took what
// its timeout let it (here 30 s, cut off), not what listing costs, and
// counted as a listing's time it held back the next ones, and each
// instance's turn to list after a death, by up to four times that.
func TestAFailedQuietListingDoesNotSpaceTheNextListings(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, tr := withTransport(t, shardSettings(t))
		newRawBlob(t, s) // the container
		o, err := NewShardOwner(s, []string{"x"}, func(context.Context, string) error { return nil })
		require.NoError(t, err)
		t.Cleanup(o.storage.closeIdle)
		sm := bareManager(o)
		tr.Delay(2 * time.Second) // a listing that answers, and takes a time of its own
		_, err = sm.quietList(false)
		require.NoError(t, err)
		took := sm.balancing.plan.ListTook
		require.GreaterOrEqual(t, took, 2*time.Second, "a listing that answered")
		require.Less(t, took, listPageTimeout)

		tr.Blackhole()
		start := time.Now()
		done, err := sm.quietList(false)
		require.NoError(t, err)
		require.False(t, done)
		require.GreaterOrEqual(t, time.Since(start), listPageTimeout, "the listing was cut off")
		assert.Equal(t, took, sm.balancing.plan.ListTook, "the spacing the listing that answered left")
		tr.Heal()
	})
}
