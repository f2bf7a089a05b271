package leaderelection

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A session keeps the list of the shards it holds (heldlist.go); when it dies,
// the survivors take its shards from that list, with no listing of the
// shards. A list that does not read, or that names shards the dead session
// did not hold, takes nothing from anyone: the survivors find the dead
// session's shards by listing, and another session's stay where they are.
func TestADeadSessionsShardsAreTakenFromItsList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, raw rawBlob, list string, a *ownerRun)
		lists  string // whether the survivors list the shards: "never", "yes", or "" (either)
	}{
		{name: "as written", lists: "never"},
		{name: "garbled", lists: "yes", tamper: func(t *testing.T, raw rawBlob, list string, _ *ownerRun) {
			putList(t, raw, list, "shard-000 x 1 \"0x1\"", "1")
		}},
		{name: "naming another session's shards", tamper: func(t *testing.T, raw rawBlob, list string, a *ownerRun) {
			// a's shards, at their ETags now, and every term and session
			// term a's lease IDs could derive from, as if the dead
			// session held them.
			var lines []string
			for _, name := range a.owner.Owned() {
				props, err := raw.cc.NewBlobClient(a.owner.shardBlob(name)).GetProperties(context.Background(), nil)
				require.NoError(t, err)
				for _, gen := range []string{"0", "1", "2"} {
					lines = append(lines, fmt.Sprintf("%s 1 %s %s", name, gen, *props.ETag))
				}
			}
			putList(t, raw, list, strings.Join(lines, "\n"), strconv.Itoa(len(lines)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inBubble(t, func(t *testing.T, _ *memblob.Service) {
				s := shardSettings(t)
				raw := newRawBlob(t, s)
				names := shardNames(21)
				log := &shardLog{}
				var logs syncBuffer
				logged := func(who string) Option {
					return WithLogger(slog.New(slog.NewTextHandler(io.MultiWriter(&logs, tWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug})).With("contender", who))
				}
				a := startOwner(t, "a", s, names, log.fn("a", nil), logged("a"))
				startOwner(t, "b", s, names, log.fn("b", nil), logged("b"))
				sc, cut := withTransport(t, s)
				c := startOwner(t, "c", sc, names, log.fn("c", nil))
				waitFor(t, 30*time.Second, "21 shards over 3 owners", func() bool { return balanced(log, 21, "a", "b", "c") })
				list := s.Blob + "/" + wire.HeldDir + c.owner.Session()
				held := c.owner.Owned()
				waitFor(t, 10*time.Second, "c's list names its 7 shards", func() bool {
					entries, err := a.owner.readHeld(context.Background(), c.owner.Session())
					if err != nil {
						return false
					}
					var got []string
					for _, e := range entries {
						got = append(got, e.name)
					}
					return slices.Equal(got, held)
				})
				// Long enough for the sessions to have listed the shards once
				// ownership settled, as they did before the lists.
				time.Sleep(2 * (s.withDefaults().RenewInterval + s.RetryInterval))
				aHeld := a.owner.Owned()
				if tc.tamper != nil {
					tc.tamper(t, raw, list, a)
				}
				before := strings.Count(logs.String(), "listed the shards")
				cut.Blackhole()
				waitFor(t, s.LeaseDuration+s.RetryInterval+10*time.Second, "c's shards run on a and b", func() bool { return balanced(log, 21, "a", "b") })
				log.requireNeverTwice(t)
				listings := strings.Count(logs.String(), "listed the shards") - before
				switch tc.lists {
				case "yes":
					assert.Positive(t, listings, "the survivors listed the shards")
				case "never":
					assert.Zero(t, listings, "the survivors took c's shards from its list, with no listing")
				}
				for _, name := range aHeld {
					assert.Equal(t, []string{"a"}, log.running()[name], "a's shard %s stays on a", name)
				}
				waitFor(t, s.LeaseDuration+10*time.Second, "the dead session's list collected", func() bool {
					_, err := a.owner.readHeld(context.Background(), c.owner.Session())
					return err != nil && strings.Contains(err.Error(), "no list")
				})
			})
		})
	}
}

// A session a few shards short, while the sessions' records count nearly
// every shard, finds the free one by reading the others' lists and then the
// one shard they do not name, with no listing of every shard (which, at
// 10,000 shards on a busy account, took seconds).
func TestAShortSessionFindsAFreeShardByTheListsWithoutAListing(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(21)
		log := &shardLog{}
		var logs syncBuffer
		logged := func(who string) Option {
			return WithLogger(slog.New(slog.NewTextHandler(io.MultiWriter(&logs, tWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug})).With("contender", who))
		}
		var victim atomic.Pointer[string]
		kick := make(chan struct{})
		// c's func for the victim returns once, when kicked: its shard is
		// released, and c is one short of its share.
		body := func(ctx context.Context, shard string) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-kick:
			}
			if v := victim.Load(); v != nil && *v == shard && victim.CompareAndSwap(v, nil) {
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		}
		a := startOwner(t, "a", s, names, log.fn("a", nil), logged("a"))
		b := startOwner(t, "b", s, names, log.fn("b", nil), logged("b"))
		c := startOwner(t, "c", s, names, log.fn("c", body), logged("c"))
		waitFor(t, 30*time.Second, "21 shards over 3 owners", func() bool { return balanced(log, 21, "a", "b", "c") })
		// Until the records have settled, and every list names its shards.
		waitFor(t, 20*time.Second, "every session's list names its shards", func() bool {
			n := 0
			for _, r := range []*ownerRun{a, b, c} {
				entries, err := c.owner.readHeld(context.Background(), r.owner.Session())
				if err != nil {
					return false
				}
				n += len(entries)
			}
			return n == 21
		})
		x := c.owner.Owned()[0]
		listed := func() int { return strings.Count(logs.String(), `"leaderelection: listed the shards" contender=c`) }
		before := listed()
		victim.Store(&x)
		close(kick)
		waitFor(t, 10*time.Second, "c's func for "+x+" returns", func() bool { return len(log.running()[x]) == 0 })
		waitFor(t, 30*time.Second, x+" runs again, on c", func() bool { return slices.Equal(log.running()[x], []string{"c"}) })
		log.requireNeverTwice(t)
		assert.Contains(t, logs.String(), "read the shards no session's list names")
		assert.Zero(t, listed()-before, "c found %s by the lists, with no listing", x)
	})
}

// putList writes a session's list as another writer would.
func putList(t *testing.T, raw rawBlob, name, text, count string) {
	t.Helper()
	role := string(RoleHeld)
	md := map[string]*string{wire.MetaRole: &role}
	if count != "" {
		md[wire.MetaHeld] = &count
	}
	_, err := raw.cc.NewBlockBlobClient(name).Upload(context.Background(), streaming.NopCloser(strings.NewReader(text)), &blockblob.UploadOptions{Metadata: md})
	require.NoError(t, err)
}

// Once ownership settles and the sessions' records count every shard, an
// instance reports none unowned, though it no longer lists the shards after
// every change: what its first listing showed free, and another instance
// claimed, is not left counted.
func TestUnownedFallsToZeroOnceTheRecordsCountEveryShard(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		reader, mp := newManualReader(t)
		s := shardSettings(t)
		log := &shardLog{}
		a := startOwner(t, "a", s, shardNames(10), log.fn("a", nil), WithMeterProvider(mp))
		startOwner(t, "b", s, shardNames(10), log.fn("b", nil))
		waitFor(t, 30*time.Second, "10 shards over 2 owners", func() bool { return balanced(log, 10, "a", "b") })
		shards := s.Blob + "/" + wire.ShardsDir
		waitFor(t, 3*(s.withDefaults().RenewInterval+s.RetryInterval)+5*time.Second, "a sees none unowned", func() bool {
			unowned, ok := gaugeOf[int64](reader.collect(), "leaderelection.shards.unowned", shards)
			return ok && unowned == 0
		})
		require.Len(t, a.owner.Owned(), 5)
	})
}

// A leaving instance hands on at most handoverPerGiver shards at a time;
// when their funcs return too late, those it had not yet asked to stop by
// the end of its grace are released, and as it ends its list names them and its
// blob stays, released: the others see it dead, and take them from that list
// (with an acquire, If-Match the ETag the list gives), if they have not
// found them by a listing first.
func TestShardsLeftBehindByALeavingInstanceAreNamedInItsList(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(2 * (handoverPerGiver + 4))
		log := &shardLog{}
		a := startOwner(t, "a", s, names, log.fn("a", nil))
		grace := s.withDefaults().handoffGrace()
		slow := func(ctx context.Context, _ string) error {
			<-ctx.Done()
			time.Sleep(grace + time.Second) // past the grace: released, not handed on
			return ctx.Err()
		}
		b := startOwner(t, "b", s, names, log.fn("b", slow))
		waitFor(t, 30*time.Second, "the shards over 2 owners", func() bool { return balanced(log, len(names), "a", "b") })
		held, session := b.owner.Owned(), b.owner.Session()
		require.Len(t, held, handoverPerGiver+4)
		require.ErrorIs(t, b.stop(t), context.Canceled)
		entries, err := a.owner.readHeld(context.Background(), session)
		require.NoError(t, err, "b's list, as it ended")
		assert.GreaterOrEqual(t, len(entries), 4, "the shards b left behind")
		for _, e := range entries {
			assert.Contains(t, held, e.name)
		}
		waitFor(t, s.LeaseDuration+5*time.Second, "b's shards on a", func() bool { return balanced(log, len(names), "a") })
		log.requireNeverTwice(t)
		waitFor(t, s.LeaseDuration+10*time.Second, "b's blob and list collected", func() bool {
			_, err := a.owner.readHeld(context.Background(), session)
			return err != nil && strings.Contains(err.Error(), "no list")
		})
	})
}

// A probe of the shards no session's list names (probeUnlisted) that finds a
// shard with no blob claims nothing, and notes a deletion, if its session's
// blob is gone: the container was deleted and created again under the
// session before its renewal noticed, and the shard's blob is missing only
// with it. (The simulator's seed 971092012212: a session read a dead
// session's list as ContainerNotFound, then probed the container that
// another instance had just created again, and recorded term 1 on a shard
// whose last term was 24.) With its session's blob there, the shard is
// free, as at a fleet's first start.
func TestAProbeOfAContainerCreatedAgainClaimsNothing(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		_, raw, o, logs := ownerOfX(t)
		sm := probingSession(t, o)
		clear(sm.candidates.cands)

		_, err := raw.cc.Delete(ctx, nil)
		require.NoError(t, err)
		_, err = raw.cc.Create(ctx, nil)
		require.NoError(t, err)
		found, ok := sm.probeUnlisted(sessionView{})
		assert.False(t, ok, "a listing decides")
		assert.Zero(t, found)
		assert.Empty(t, sm.candidates.cands, "nothing to claim on the container created again")
		assert.Contains(t, logs.String(), "the container was deleted under this instance's session")
	})
}

// A claim of a shard with no term (here found with no blob) records no term
// if its session's blob is gone once the claim's lease is granted: the
// container was deleted and created again between the read that found the
// shard free and the claim, which then created the shard's blob on the new
// container; the session's own create, landing late there, does not make
// its blob the one it began on. With the container kept, the proof holds.
func TestAClaimOnAContainerCreatedAgainRecordsNoTerm(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		s, raw, o, logs := ownerOfX(t)
		sm := probingSession(t, o)
		_, err := raw.cc.Delete(ctx, nil)
		require.NoError(t, err)
		_, err = raw.cc.Create(ctx, nil)
		require.NoError(t, err)
		// and the session's create, sent as it began, lands now, late:
		// its blob is there again, but not leased.
		_, err = sm.s.term.blob().createBlob(ctx)
		require.NoError(t, err)
		require.True(t, o.reserve("x", takingBack, nil))
		won, why := sm.claimOne(sm.candidates.cands["x"])
		assert.False(t, won)
		assert.Equal(t, "transient", why)
		info := leaderOnBlob(t, s, o.shardBlob("x"))
		assert.False(t, info.Held(), "given back")
		assert.Zero(t, info.Leader.Number, "no term recorded on the container created again")
		assert.Contains(t, logs.String(), "a claim found this session's blob gone")

		sm = probingSession(t, o)
		assert.Empty(t, sm.sessionThere(), "its blob is there, leased: the claim would go on")
	})
}

// probingSession is a session of o's by hand, begun (its blob leased), that
// has probed the shards no list names and found x free, with no blob.
func probingSession(t *testing.T, o *ShardOwner) *shardManager {
	ctx := context.Background()
	sm := bareManager(o)
	sm.s = o.newSession(sm.s.id)
	sm.releases, sm.shardsCtx, sm.stopNow = ctx, ctx, ctx
	sm.candidates = candidates{cands: map[string]candidate{}, freeSince: map[string]time.Time{}}
	_, err := sm.s.term.blob().Acquire(ctx)
	require.NoError(t, err)
	found, ok := sm.probeUnlisted(sessionView{})
	require.True(t, ok)
	require.Equal(t, 1, found, "x has no blob yet: free")
	return sm
}
