package leaderelection

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// preferBound is how long a handover to a preferred candidate may take in
// these tests: the leader's next look at the candidates (a RetryInterval),
// the candidate's next poll (a jittered RetryInterval) and a few round
// trips, with a loaded machine's margin.
func preferBound(s BlobSettings) time.Duration {
	return 6*s.withDefaults().RetryInterval + 4*time.Second
}

// A contender of higher priority takes over gracefully: the leader's func
// is asked to stop with ErrPreferredCandidate and returns, and only then
// does the candidate's func start; a contender of the leader's own
// priority never takes over, before or after.
func TestPreferredCandidateTakesOverGracefully(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		stops := make(chan Event, 10)
		events := WithEvents(func(e Event) {
			if e.Kind == StoppedLeading {
				stops <- e
			}
		})
		startContender(t, "old-a", s, log.leaderFunc("old-a", untilCancelled), WithIdentity("old-a"), WithPriority(1), events)
		require.Equal(t, "old-a", log.next(t, 30*time.Second).who)
		startContender(t, "old-b", s, log.leaderFunc("old-b", untilCancelled), WithIdentity("old-b"), WithPriority(1))

		started := time.Now()
		startContender(t, "new", s, log.leaderFunc("new", untilCancelled), WithIdentity("new"), WithPriority(2))
		tm := log.next(t, preferBound(s)+10*time.Second)
		require.Equal(t, "new", tm.who, "the preferred candidate leads next")
		took := time.Since(started)
		terms := log.snapshot()
		require.Len(t, terms, 2)
		assert.ErrorIs(t, terms[0].cause, ErrPreferredCandidate, "the leader's func was asked to stop for the candidate")
		assert.False(t, terms[0].end.IsZero())
		log.requireNoOverlap(t)
		select {
		case e := <-stops:
			assert.Equal(t, ReasonPreferred, e.Reason)
		case <-time.After(5 * time.Second):
			t.Fatal("no StoppedLeading event for the leader that handed over")
		}
		t.Logf("the candidate led %v after it started", took)

		// Nothing moves again: old-b has a lower priority, new none higher.
		time.Sleep(4 * s.withDefaults().RetryInterval)
		assert.Len(t, log.snapshot(), 2, "leadership moved once")
		log.requireNoOverlap(t)
	})
}

// Contenders of equal priority never take over from each other.
func TestEqualPriorityNeverTakesOver(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		startContender(t, "a", s, log.leaderFunc("a", untilCancelled), WithIdentity("a"), WithPriority(3))
		require.Equal(t, "a", log.next(t, 30*time.Second).who)
		startContender(t, "b", s, log.leaderFunc("b", untilCancelled), WithIdentity("b"), WithPriority(3))
		startContender(t, "c", s, log.leaderFunc("c", untilCancelled), WithIdentity("c")) // no priority: no candidate
		time.Sleep(preferBound(s))
		assert.Len(t, log.snapshot(), 1, "a still leads, in its first term")
		assert.Len(t, log.running(), 1)
	})
}

// A preferred candidate that leaves hands back to the old order: once it
// stops, a contender of the lower priority leads again, at once (its
// candidacy withdrawn, nobody waits for it).
func TestPreferredCandidateThatLeavesLeavesTheOldOrder(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		startContender(t, "old", s, log.leaderFunc("old", untilCancelled), WithIdentity("old"), WithPriority(1))
		require.Equal(t, "old", log.next(t, 30*time.Second).who)
		preferred := startContender(t, "new", s, log.leaderFunc("new", untilCancelled), WithIdentity("new"), WithPriority(2))
		require.Equal(t, "new", log.next(t, preferBound(s)+10*time.Second).who)
		require.NoError(t, ignoreCancel(preferred.stop(t)))
		require.Equal(t, "old", log.next(t, preferBound(s)).who, "the old order leads again")
		log.requireNoOverlap(t)
	})
}

// A ShardOwner has no single leader to prefer: WithPriority is refused.
func TestShardOwnerRefusesWithPriority(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		_, err := NewShardOwner(testSettings(t), []string{"a"}, func(ctx context.Context, _ string) error { return nil }, WithPriority(1))
		require.ErrorContains(t, err, "WithPriority")
	})
}

// What watching for candidates costs a leader: one listing of the
// candidates per RetryInterval, whether any stand or not; and a candidate
// that outranks the leader one lease request per RenewInterval or less
// (its acquire, then renewals) beside its polls.
func TestPreferenceCostsOneListingPerRetryInterval(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		sa, ta := withTransport(t, s)
		var lists, candidateLease atomic.Int32
		ta.Observe(func(x faults.Exchange) {
			if strings.Contains(x.URL, "comp=list") {
				lists.Add(1)
			}
		})
		startContender(t, "a", sa, log.leaderFunc("a", untilCancelled), WithIdentity("a"), WithPriority(1))
		log.next(t, 30*time.Second)
		const watch = 5 * time.Second
		lists.Store(0)
		time.Sleep(watch)
		ri := s.withDefaults().RetryInterval
		assert.InDelta(t, float64(watch/ri), float64(lists.Load()), 1.5, "listings of the candidates in %v at a %v retry interval", watch, ri)
		t.Logf("the leader listed the candidates %d times in %v (RetryInterval %v)", lists.Load(), watch, ri)

		// A candidate of the same priority stands not: it costs its polls only.
		sb, tb := withTransport(t, s)
		tb.Observe(func(x faults.Exchange) {
			if strings.Contains(x.URL, wire.CandidatesDir) {
				candidateLease.Add(1)
			}
		})
		startContender(t, "b", sb, log.leaderFunc("b", untilCancelled), WithIdentity("b"), WithPriority(1))
		time.Sleep(watch)
		assert.Zero(t, candidateLease.Load(), "a contender that does not outrank the leader writes no candidate blob")
		assert.Len(t, log.snapshot(), 1)
	})
}

// standGhost keeps a candidate's blob beside m's lease (a quorum's account
// for candidates, besideAccount), as a contender of identity id and priority p would, under a
// lease that nobody renews: a candidate that died just after it stood. An
// unleased one is a candidate gone.
func standGhost(t *testing.T, m *BlobDistributedMutex, id string, p int, leased bool) *blob.Client {
	t.Helper()
	lm := m.besideLease()
	ctx := context.Background()
	bc := newRawBlob(t, lm.settings).cc.NewBlockBlobClient(lm.blob + wire.CandidatesDir + id)
	pr := strconv.Itoa(p)
	_, err := bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: map[string]*string{
		wire.MetaPriority: &pr, wire.MetaIdentity: &id, wire.MetaInstance: to.Ptr("ghost"), wire.MetaRole: to.Ptr(string(RoleCandidate))}})
	require.NoError(t, err)
	if leased {
		lc, err := lease.NewBlobClient(bc.BlobClient(), nil)
		require.NoError(t, err)
		_, err = lc.AcquireLease(ctx, int32(candidateLease/time.Second), nil)
		require.NoError(t, err)
	}
	return bc.BlobClient()
}

// A candidate that dies after the lease was handed to it moves leadership
// once, not again and again: the leader that takes the lease after the
// others' wait passes it over while its blob outlives it.
func TestACandidateThatNeverComesIsPassedOver(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		a := startContender(t, "a", s, log.leaderFunc("a", untilCancelled), WithIdentity("a"), WithPriority(1))
		require.Equal(t, "a", log.next(t, 30*time.Second).who)
		startContender(t, "b", s, log.leaderFunc("b", untilCancelled), WithIdentity("b"), WithPriority(1))
		stood := time.Now()
		standGhost(t, a.mutex, "ghost", 2, true)
		second := log.next(t, preferBound(s)+10*time.Second) // after a handed the lease to the ghost, and the wait
		terms := log.snapshot()
		require.Len(t, terms, 2)
		assert.ErrorIs(t, terms[0].cause, ErrPreferredCandidate)
		// The ghost's blob stays leased until candidateLease after it stood.
		time.Sleep(time.Until(stood.Add(candidateLease + time.Second)))
		assert.Len(t, log.snapshot(), 2, "%s still leads: the ghost is passed over", second.who)
		assert.Len(t, log.running(), 1)
		log.requireNoOverlap(t)
	})
}

// A leader deletes the blob of a candidate gone (unleased) for a candidate
// lease: blobs of instances that stood once do not pile up.
func TestALeaderDeletesTheBlobsOfCandidatesGone(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		a := startContender(t, "a", s, log.leaderFunc("a", untilCancelled), WithIdentity("a"), WithPriority(1))
		log.next(t, 30*time.Second)
		gone := standGhost(t, a.mutex, "gone", 2, false)
		waitFor(t, candidateLease+10*time.Second, "the gone candidate's blob deleted", func() bool {
			_, err := gone.GetProperties(context.Background(), nil)
			return bloberror.HasCode(err, bloberror.BlobNotFound)
		})
		assert.Len(t, log.snapshot(), 1, "an unleased candidate is no candidate")
	})
}
