package leaderelection

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of a blob created again while the leader of the deleted one is
// cut off from storage: that leader acts on until its own deadline, which
// the settle wait of everyone who takes the blob created again outlasts,
// whatever lease duration each of them has (recreated.go).

// A leader cut off from storage while its container is deleted runs on to
// its deadline; the follower that read its term, and an instance started
// after the deletion that never saw a term of it, start a func only once
// the cut-off leader's context has ended StopMargin before: on a long
// native lease, a long ETag lease, a fleet that mixes a long ETag lease
// with the default lease, and a blob a script created again at once,
// empty (the follower raises it, marked as created again). The follower
// says at Warn what it found.
func TestABlobCreatedAgainIsNotTakenWhileACutOffLeaderMayAct(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		leader, follower time.Duration // LeaseDuration, 0: the default
		byScript         bool          // a script creates the container and the blob again, empty
		beingDeleted     bool          // b is told the container is being deleted meanwhile, so it next acquires at once, without a read
	}{
		{"native 60 s", 60 * time.Second, 60 * time.Second, false, false},
		{"etag 5 min", 5 * time.Minute, 5 * time.Minute, false, false},
		{"etag 5 min leader, default follower", 5 * time.Minute, 0, false, false},
		{"native 60 s, created again empty by a script", 60 * time.Second, 0, true, false},
		{"native 60 s, created again empty by a script while b is told it is being deleted", 60 * time.Second, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inBubble(t, func(t *testing.T, _ *memblob.Service) {
				s := testSettings(t)
				sa, sb, sc := s, s, s
				sa.LeaseDuration, sb.LeaseDuration = tc.leader, tc.follower
				sa, cut := withTransport(t, sa)
				sb, tb := withTransport(t, sb)
				sc, _ = withTransport(t, sc)
				log := newTermLog()
				startContender(t, "a", sa, log.leaderFunc("a", untilCancelled), WithIdentity("a"))
				require.Equal(t, "a", log.next(t, 10*time.Second).who)
				var said syncBuffer
				startContender(t, "b", sb, log.leaderFunc("b", untilCancelled), WithIdentity("b"),
					WithLogger(slog.New(slog.NewTextHandler(&said, nil))))
				time.Sleep(2 * s.RetryInterval) // b reads a's term

				cut.Blackhole()
				raw := newRawBlob(t, s)
				_, err := raw.cc.Delete(context.Background(), nil)
				require.NoError(t, err)
				if tc.beingDeleted {
					tb.Fail(http.StatusConflict, "ContainerBeingDeleted")
				}
				if tc.byScript {
					raw = newRawBlob(t, s)
					_, err = raw.cc.NewBlockBlobClient(s.Blob).UploadBuffer(context.Background(), nil, nil)
					require.NoError(t, err)
				}
				if tc.beingDeleted {
					time.Sleep(3 * s.RetryInterval)
					tb.Heal()
				}
				// c starts once b has created the blob again, or raised
				// it (one created first by an instance that never saw its
				// terms, and taken by it, is a stated limit: docs/limits.md).
				waitFor(t, time.Minute, "the blob created again", func() bool {
					return !leaderOn(t, s).Recreated.IsZero()
				})
				startContender(t, "c", sc, log.leaderFunc("c", untilCancelled), WithIdentity("c"))

				next := log.next(t, 20*time.Minute)
				terms := log.snapshot()
				require.Len(t, terms, 2)
				first := terms[0]
				require.Equal(t, "a", first.who)
				require.False(t, first.cancelled.IsZero(), "%s started while the cut-off leader's func ran on", next.who)
				stop := sa.withDefaults().StopMargin
				assert.GreaterOrEqual(t, next.start.Sub(first.cancelled), stop,
					"%s started %v after the cut-off leader's context ended, within its StopMargin (%v)", next.who, next.start.Sub(first.cancelled), stop)
				log.requireNoOverlap(t)
				assert.Greater(t, leaderOn(t, s).Leader.Number, int64(1), "the term went on above the deleted blob's")
				if tc.byScript {
					assert.Contains(t, said.String(), "raised the term on the blob to the highest this instance saw there")
				} else {
					assert.Contains(t, said.String(), "level=WARN msg=\"leaderelection: the container was gone")
					assert.Contains(t, said.String(), "level=WARN msg=\"leaderelection: the lease blob was gone")
				}
				t.Logf("%s started %v after the cut-off leader's context ended", next.who, next.start.Sub(first.cancelled))
			})
		})
	}
}

// A contender that finds the container being deleted (Azure refuses to
// create it again for about 30 s) polls it every RetryInterval, not with a
// backoff that grows to the lease duration, nor with the one earlier
// failures built: it may be the witness whose raise must land within the
// creator's wait.
func TestAContainerBeingDeletedIsPolledEveryRetryInterval(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.LeaseDuration = time.Minute
		sa, _ := withTransport(t, s)
		sb, tb := withTransport(t, s)
		log := newTermLog()
		startContender(t, "a", sa, log.leaderFunc("a", untilCancelled), WithIdentity("a"))
		require.Equal(t, "a", log.next(t, 10*time.Second).who)
		startContender(t, "b", sb, log.leaderFunc("b", untilCancelled), WithIdentity("b"))
		time.Sleep(2 * s.RetryInterval)

		// Storage fails for a while first: the backoff grows towards
		// the lease's 60 s.
		tb.Fail(http.StatusServiceUnavailable, "ServerBusy")
		time.Sleep(30 * time.Second)
		var sent atomic.Int64
		tb.Observe(func(faults.Exchange) { sent.Add(1) })
		tb.Fail(http.StatusConflict, "ContainerBeingDeleted")
		const window = time.Minute
		time.Sleep(window)
		tb.Heal()
		// Once told, at least one request every 2 R (a backoff that kept
		// growing, or kept what the failures before built, would send 2).
		assert.GreaterOrEqual(t, sent.Load(), int64((window-16*time.Second)/(2*s.RetryInterval)), "requests in %v", window)
	})
}

// A blob created again carries, in its seed, the longest lease any of its
// seeders knew a holder to have declared; a raise keeps the longer; a
// contender that never saw the deleted blob waits that long for it; and a
// longest that does not read is reported, and waited for as the longest
// declarable until a repair, which keeps one that reads.
func TestASeedCarriesTheLongestLeaseItsSeedersKnew(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		s := testSettings(t)
		raw := newRawBlob(t, s)
		raw.put(s.Blob, "", map[string]string{wire.MetaTerm: "7", wire.MetaRole: string(RoleMutex),
			wire.MetaIdentity: "gone", wire.MetaLeaseDuration: "4m0s"})
		witness := settlingManager(t, s)
		_, err := witness.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 4*time.Minute, witness.floor.longestDeclared(), "a record's declared lease is remembered")

		raw.breakAndDelete(s.Blob)
		require.NoError(t, witness.ensureBlob(ctx))
		info, err := witness.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, info.Recreated.IsZero())
		assert.Equal(t, 4*time.Minute, info.seedLongest, "the seed carries the longest lease its creator knew")

		newcomer := settlingManager(t, s)
		info, err = newcomer.Inspect(ctx)
		require.NoError(t, err)
		wait := newcomer.seedFresh(ctx, info)
		assert.Greater(t, wait, 3*time.Minute, "a contender that never saw the deleted blob waits as long as its seed says")

		// A seeder that knew a longer lease raises the seed to it; a
		// mutex counts its own.
		s10 := s
		s10.LeaseDuration = 10 * time.Minute
		longer := settlingManager(t, s10)
		info, err = longer.Inspect(ctx)
		require.NoError(t, err)
		require.Less(t, longer.seedFresh(ctx, info), time.Second, "it raised the seed, and reads it again")
		info, err = longer.Inspect(ctx)
		require.NoError(t, err)
		assert.Greater(t, longer.seedFresh(ctx, info), 9*time.Minute, "a mutex waits at least its own lease")
		info, err = newcomer.Inspect(ctx)
		require.NoError(t, err)
		assert.Equal(t, 10*time.Minute, info.seedLongest, "raised to the longer lease")
		assert.Equal(t, int64(7), info.Leader.Number, "the term kept")

		// Garbage is reported, and waited for as the longest declarable.
		raw.set(s.Blob, map[string]string{wire.MetaTerm: "7", wire.MetaRole: string(RoleMutex), wire.MetaEnded: "2000-01-01T00:00:00Z",
			wire.MetaRecreated: "2000-01-01T00:00:00Z", wire.MetaLongest: "forever"})
		info, err = newcomer.Inspect(ctx)
		require.NoError(t, err)
		require.NotNil(t, info.RecordError)
		assert.Equal(t, wire.MetaLongest, info.RecordError.Key)
		assert.False(t, info.RecordError.blocks(), "it does not block a term, it makes the blob wait")
		assert.Equal(t, wire.MaxDeclarable, info.seedLongest)
		assert.Greater(t, newcomer.seedFresh(ctx, info), 23*time.Hour)

		_, err = newcomer.RepairRecord(ctx, 7)
		require.NoError(t, err)
		info, err = newcomer.Inspect(ctx)
		require.NoError(t, err)
		assert.Nil(t, info.RecordError, "repaired")
		assert.False(t, info.Recreated.IsZero(), "still marked created again")
		assert.Zero(t, info.seedLongest, "the repair drops a longest that did not read")

		// So does a raise by an instance that saw a higher term, which
		// writes what it knows instead.
		raw.set(s.Blob, map[string]string{wire.MetaTerm: "7", wire.MetaRole: string(RoleMutex), wire.MetaEnded: "2000-01-01T00:00:00Z",
			wire.MetaRecreated: "2000-01-01T00:00:00Z", wire.MetaLongest: "forever"})
		higher := settlingManager(t, s)
		higher.floor.see(8)
		info, err = higher.Inspect(ctx)
		require.NoError(t, err)
		higher.seedFresh(ctx, info)
		info, err = newcomer.Inspect(ctx)
		require.NoError(t, err)
		assert.Nil(t, info.RecordError, "raised")
		assert.Equal(t, int64(8), info.Leader.Number)
		assert.Equal(t, higher.settings.LeaseDuration, info.seedLongest, "the raiser's own lease, the longest it knows")
	})
}

// What an instance remembers of a blob's leases: the lease the highest
// term's record declares (each earlier holder's had passed), the longer of
// two for one term or a lower one, never lowered by a record another
// writer made (its duration does not read), and not moved by the largest
// term number; and a raise marks a blob below a term seen recorded, not
// one below a term only proposed (no func ran under it).
func TestAnInstanceRemembersTheLeaseOfTheLastTermItRead(t *testing.T) {
	rec := func(n int64, declared string) record {
		md := map[string]*string{}
		for k, v := range map[string]string{wire.MetaTerm: strconv.FormatInt(n, 10), wire.MetaLeaseDuration: declared} {
			md[k] = &v
		}
		return readRecord("c", "b", md)
	}
	var f termFloor
	f.ownLease(15 * time.Second)
	f.remember(rec(3, "2h0m0s"))
	assert.Equal(t, 2*time.Hour, f.longestDeclared())
	f.remember(rec(4, "30s"))
	assert.Equal(t, 30*time.Second, f.longestDeclared(), "a later term's holder replaces an earlier one's")
	f.remember(rec(2, "45s"))
	assert.Equal(t, 45*time.Second, f.longestDeclared(), "a lower term (repaired lower, then recorded above) keeps the longer")
	f.remember(rec(5, "soon"))
	assert.Equal(t, 45*time.Second, f.longestDeclared(), "a duration that does not read lowers nothing")
	f.remember(rec(math.MaxInt64, "1m0s"))
	f.remember(rec(6, "20s"))
	assert.Equal(t, 20*time.Second, f.longestDeclared(), "the largest term number is not taken as the last")
	f.remember(rec(7, "3s"))
	assert.Equal(t, 15*time.Second, f.longestDeclared(), "its own, at least")

	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		m := settlingManager(t, testSettings(t))
		m.floor.propose(Term{Number: 5})
		md := m.raisedSeed(0, false, 0)
		require.NotNil(t, md)
		assert.Empty(t, wire.Value(md, wire.MetaRecreated), "raised above a term only proposed: not marked")
		m.floor.see(4)
		md = m.raisedSeed(0, false, 0)
		assert.NotEmpty(t, wire.Value(md, wire.MetaRecreated), "raised above a term seen recorded: marked")
		assert.Equal(t, "5", wire.Value(md, wire.MetaTerm))
	})
}

// A contender that takes a blob created again and gives it back to let it
// settle has seen the term it read there: after a deletion it creates the
// blob again seeded with that term, not from nothing (the simulator's
// find: a newcomer read term 1 so, the container was deleted, and it
// created the blob again unmarked and recorded term 1 a second time).
func TestATermReadBeforeABlobSettlesIsSeen(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		s := testSettings(t)
		raw := newRawBlob(t, s)
		raw.put(s.Blob, "", map[string]string{wire.MetaTerm: "5", wire.MetaRole: string(RoleMutex),
			wire.MetaEnded: "2000-01-01T00:00:00Z", wire.MetaRecreated: "2000-01-01T00:00:00Z"})
		newcomer := settlingManager(t, s)
		_, err := takeTerm(t, newcomer, "n")
		require.ErrorIs(t, err, errNotSettled)
		assert.Equal(t, int64(5), newcomer.floor.get(), "the term read as it took the lease is seen")

		_, err = raw.cc.Delete(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, newcomer.ensureBlob(ctx))
		info := leaderOn(t, s)
		assert.Equal(t, int64(5), info.Leader.Number, "created again, seeded with the term seen")
		assert.False(t, info.Recreated.IsZero(), "and marked so")
	})
}

// refuseWrites sends a request that writes a blob's metadata (a term's
// record, a seed) to refuse, and every other to pass: an account that
// answers reads and lease requests but throttles every write.
type refuseWrites struct{ pass, refuse policy.Transporter }

func (r refuseWrites) Do(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("comp") == "metadata" {
		return r.refuse.Do(req)
	}
	return r.pass.Do(req)
}

// A quorum's contender whose only majority includes an account whose
// container was deleted, and which it creates again itself, leads within
// the simulator's recovery bound once that blob has settled, though the
// minority stays faulted: one account down, one that answers reads and
// lease requests but refuses every write, so that each try at a term
// stores it on two accounts only, and raises the contender's floor, and so
// the seed it writes on the blob created again. The contender does not
// lead before the blob has stood its settle wait, nor holds it meanwhile:
// a witness of a higher term raises it, and the term goes above that. (The simulator's seed
// 421500606044: the contender held that blob's lease through its retries,
// and each raise of its own, under that lease, gave the blob an ETag it
// never watched: terms 2 to 9 were used up in 3.5 minutes, and it led only
// once the minority came back.)
func TestAQuorumLeadsOnceTheBlobItCreatedAgainHasSettled(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		f := newQuorumFleet(t, 5, 1, nil)
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		time.Sleep(5 * time.Second)
		_, err := f.stops[0]()
		require.ErrorIs(t, err, context.Canceled)
		_, err = newRawBlob(t, f.accounts[4]).cc.Delete(context.Background(), nil)
		require.NoError(t, err)

		b := f.addWith(nil, func(i int, tr policy.Transporter) policy.Transporter {
			if i != 1 {
				return tr
			}
			refuse := faults.Over(tr)
			t.Cleanup(refuse.Close)
			refuse.Fail(http.StatusServiceUnavailable, "ServerBusy")
			return refuseWrites{pass: tr, refuse: refuse}
		})
		f.cut[b][0].Blackhole()
		calm := time.Now()
		f.stops = append(f.stops, runMutex(t, f.mutexes[b]))

		// Midway through the wait, an instance that saw a higher term
		// raises the seed: the contender leaves the blob free meanwhile.
		time.Sleep(15 * time.Second)
		witness := settlingManager(t, f.accounts[4])
		witness.floor.see(100)
		info, err := witness.Inspect(context.Background())
		require.NoError(t, err)
		require.False(t, info.Held(), "the contender holds the blob created again before it has settled")
		witness.seedFresh(context.Background(), info)

		bound, why := simQuorumBound(f.accounts[0].withDefaults(), true)
		require.Eventually(t, func() bool { return f.leader() == b }, bound-time.Since(calm), 100*time.Millisecond, "no leader within %v (%s)", bound, why)
		runs := f.runs()
		require.Len(t, runs, 2)
		led := runs[1].started.Sub(calm)
		t.Logf("led %v after it started (bound %v: %s)", led, bound, why)
		settle := f.mutexes[b].quorum.accounts[4].settleFor(true, 0)
		assert.GreaterOrEqual(t, led, settle, "led before the blob created again stood its settle wait")
		assert.Equal(t, int64(101), runs[1].term.Number, "next above the term the witness saw: none used up on the minority")
		_, err = f.stops[b]()
		require.ErrorIs(t, err, context.Canceled)
		f.checkApart()
	})
}
