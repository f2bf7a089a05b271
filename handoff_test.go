package leaderelection

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/require"
)

// handoffSettings: sessions list each other only every 5 s, so that a shard
// that waits for a listing to be found idles for seconds, while one handed
// straight on idles for a few round trips.
func handoffSettings(t *testing.T) BlobSettings {
	s := testSettings(t)
	s.LeaseDuration, s.StopMargin, s.RetryInterval = 15*time.Second, 3*time.Second, 5*time.Second
	return s
}

// handoffGaps returns, for every shard whose run started after since on an
// owner in to, how long it idled: from the end of its previous run to that
// start.
func handoffGaps(t *testing.T, l *shardLog, since time.Time, to ...string) []time.Duration {
	t.Helper()
	last := map[string]shardTerm{}
	var gaps []time.Duration
	for _, tm := range l.snapshot() {
		prev, ok := last[tm.shard]
		last[tm.shard] = tm
		if !ok || tm.start.Before(since) || !slices.Contains(to, tm.who) {
			continue
		}
		require.Falsef(t, prev.end.IsZero(), "shard %s: run on %s started while %s still ran it", tm.shard, tm.who, prev.who)
		gaps = append(gaps, tm.start.Sub(prev.end))
	}
	slices.Sort(gaps)
	return gaps
}

// The bound the handover tests hold the idle time of a moved shard to: a
// third of the 5 s between two listings of the sessions. A shard left for
// its receiver to find at a listing idles up to 5 s, and at random within
// them: of the four givers' batches below, all four land in the last third
// of a listing's wait once in 81 runs. Handed straight on, a shard idles for
// a few round trips and the receiver's next look at its notes (100 ms).
const handoffBound = 5 * time.Second / 3

// A new instance receives its share straight from the givers: each shard
// runs on it within a few round trips of its func's return on the giver,
// not at the receiver's next listing of the shards.
func TestJoinHandsShardsStraightToTheNewInstance(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := handoffSettings(t)
		names := shardNames(40)
		log := &shardLog{}
		owners := []string{"a", "b", "c", "d"}
		givers := map[string]string{} // session -> owner
		var runs []*ownerRun
		for _, n := range owners {
			runs = append(runs, startOwner(t, n, s, names, log.fn(n, nil)))
		}
		waitFor(t, 90*time.Second, "40 shards over 4 owners", func() bool { return balanced(log, 40, owners...) })
		// Until the records count them, a giver could take another owner for
		// e's fellow receiver (CI saw b hand its two shards to c, whose record
		// still said 0, and e wait 31 s for its last two).
		recordsCount(t, 30*time.Second, runs[0].owner, 4, 40)
		time.Sleep(2 * time.Second)
		for _, r := range runs {
			givers[r.owner.Session()] = r.name
		}

		joined := time.Now()
		e := startOwner(t, "e", s, names, log.fn("e", nil))
		took := waitFor(t, 60*time.Second, "the new owner's share", func() bool { t.Log(log.perOwner()); return balanced(log, 40, append(owners, "e")...) })
		gaps := handoffGaps(t, log, joined, "e")
		require.Len(t, gaps, 8, "e's share, each moved once")
		t.Logf("e held its share %v after it started; idle times of the shards handed to it: min %v, median %v, max %v",
			took.Round(time.Millisecond), gaps[0].Round(time.Millisecond), gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond))
		require.Less(t, gaps[len(gaps)-1], handoffBound, "a shard handed to e idled for %v", gaps[len(gaps)-1])
		log.requireNeverTwice(t)

		// One note per giver, rewritten as it hands more on: not one per batch.
		prefix := e.owner.handoffPrefix(e.owner.Session())
		var notes []string
		for page, err := range e.owner.storage.client.List(context.Background(), blobstore.ListOptions{Prefix: prefix}) {
			require.NoError(t, err)
			for _, b := range page.Items {
				notes = append(notes, strings.TrimPrefix(b.Name, prefix))
			}
		}
		require.NotEmpty(t, notes)
		from := map[string]bool{}
		for _, n := range notes {
			giver, ok := strings.CutSuffix(n, "-0")
			require.True(t, ok, "note %s: the first (and, for 8 shards, only) part of a giver's note", n)
			require.Contains(t, givers, giver, "note %s: named for a giver's session", n)
			require.False(t, from[giver], "two notes from %s", givers[giver])
			from[giver] = true
		}
		t.Logf("%d notes, one from each giver", len(notes))
	})
}

// An instance stopped by its caller (SIGTERM) hands each of its shards
// straight on to the others as it ends, while its own funcs run until each
// is handed: each runs elsewhere within a few round trips of its func's
// return, not once the others find the session gone.
func TestGracefulStopHandsShardsStraightOn(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := handoffSettings(t)
		names := shardNames(40)
		log := &shardLog{}
		owners := []string{"a", "b", "c", "d", "e"}
		runs := map[string]*ownerRun{}
		for _, n := range owners {
			runs[n] = startOwner(t, n, s, names, log.fn(n, nil))
		}
		waitFor(t, 90*time.Second, "40 shards over 5 owners", func() bool { return balanced(log, 40, owners...) })
		recordsCount(t, 30*time.Second, runs["a"].owner, 5, 40) // else e could hand more to one receiver than its share
		time.Sleep(2 * time.Second)

		stopped := time.Now()
		require.ErrorIs(t, runs["e"].stop(t), context.Canceled)
		returned := time.Since(stopped)
		require.Empty(t, log.perOwner()["e"])
		took := waitFor(t, 30*time.Second, "e's shards elsewhere", func() bool { t.Log(log.perOwner(), len(log.running())); return balanced(log, 40, owners[:4]...) })
		gaps := handoffGaps(t, log, stopped, owners[:4]...)
		require.Len(t, gaps, 8, "e's shards, each moved once")
		t.Logf("e's Run returned %v after its cancel (grace %v); every shard ran elsewhere %v later; idle times: min %v, median %v, max %v",
			returned.Round(time.Millisecond), s.withDefaults().handoffGrace(), took.Round(time.Millisecond),
			gaps[0].Round(time.Millisecond), gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond))
		require.Less(t, gaps[len(gaps)-1], handoffBound, "a shard of e idled for %v", gaps[len(gaps)-1])
		for _, tm := range log.snapshot() {
			if tm.who == "e" && !tm.end.Before(stopped) {
				require.ErrorIs(t, tm.cause, ErrShardHandedOver)
			}
		}
		log.requireNeverTwice(t)
	})
}

// At a cold start, while every session is still below its share, none reads
// its notes: nobody can hand it anything (each read is a listing, which on
// Azurite costs 8 ms of its one thread at 10,000 shards).
func TestNoNotesAreReadWhileEverySessionClaimsItsShare(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(60)
		log := &shardLog{}
		var mu sync.Mutex
		var reads []time.Time
		start := func(who string) {
			ws, tr := withTransport(t, s)
			tr.Delay(150 * time.Millisecond) // claims take seconds: the records change meanwhile
			tr.Observe(func(x faults.Exchange) {
				if x.Method == http.MethodGet && strings.Contains(x.URL, "comp=list") && strings.Contains(x.URL, strings.TrimSuffix(wire.HandoffDir, "/")) {
					mu.Lock()
					reads = append(reads, x.Sent)
					mu.Unlock()
				}
			})
			startOwner(t, who, ws, names, log.fn(who, nil))
		}
		start("a")
		start("b")
		var first time.Time
		waitFor(t, 60*time.Second, "a or b at its share", func() bool {
			if p := log.perOwner(); p["a"] >= 30 || p["b"] >= 30 {
				first = time.Now()
				return true
			}
			return false
		})
		waitFor(t, 60*time.Second, "60 shards over a and b", func() bool { return balanced(log, 60, "a", "b") })
		mu.Lock()
		defer mu.Unlock()
		early := 0
		for _, at := range reads {
			if at.Before(first) {
				early++
			}
		}
		require.Zero(t, early, "notes read before either session reached its share (%d reads in all)", len(reads))
		log.requireNeverTwice(t)
	})
}

// A session reads its notes only while shards may come to it: never at its
// share, and while another session of its group is above its share (here,
// as a new instance joins) it does, until the move has settled.
func TestNotesAreReadOnlyWhileShardsMayCome(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(30)
		log := &shardLog{}
		reads := map[string]*atomic.Int64{"a": {}, "b": {}, "c": {}}
		start := func(who string) {
			ws, tr := withTransport(t, s)
			n := reads[who]
			tr.Observe(func(x faults.Exchange) {
				if x.Method == http.MethodGet && strings.Contains(x.URL, "comp=list") && strings.Contains(x.URL, strings.TrimSuffix(wire.HandoffDir, "/")) {
					n.Add(1)
				}
			})
			startOwner(t, who, ws, names, log.fn(who, nil))
		}
		quiet := func(what string, owners ...string) {
			before := map[string]int64{}
			for _, who := range owners {
				before[who] = reads[who].Load()
			}
			time.Sleep(3 * time.Second)
			for _, who := range owners {
				require.Equal(t, before[who], reads[who].Load(), "%s: %s read its notes", what, who)
			}
		}
		start("a")
		start("b")
		waitFor(t, 60*time.Second, "30 shards over a and b", func() bool { return balanced(log, 30, "a", "b") })
		time.Sleep(s.RetryInterval) // the last claims have returned to the session's loop
		quiet("at their share", "a", "b")

		joined := reads["c"].Load()
		start("c")
		took := waitFor(t, 60*time.Second, "c's share", func() bool { return balanced(log, 30, "a", "b", "c") })
		n := reads["c"].Load() - joined
		require.Positive(t, n, "c read its notes while a and b were above their share")
		t.Logf("c read its notes %d times in the %v it took to reach its share", n, took.Round(time.Millisecond))
		time.Sleep(s.withDefaults().RenewInterval + 2*s.RetryInterval)
		quiet("all at their share again", "a", "b", "c")
	})
}

// A session that has taken its share rewrites its record at once, not at its
// next renewal: until then the others count it as short (see recordSoon).
func TestASessionThatTakesItsShareSaysSoAtOnce(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.LeaseDuration, s.RetryInterval = 60*time.Second, time.Second // renewals every 20 s
		names := shardNames(20)
		log := &shardLog{}
		a := startOwner(t, "a", s, names, log.fn("a", nil))
		startOwner(t, "b", s, names, log.fn("b", nil))
		waitFor(t, 60*time.Second, "20 shards over a and b", func() bool { return balanced(log, 20, "a", "b") })
		took := recordsCount(t, s.withDefaults().RenewInterval/4, a.owner, 2, 20)
		t.Logf("the records counted every shard %v after the shards ran (RenewInterval %v)", took.Round(time.Millisecond), s.withDefaults().RenewInterval)
	})
}

// A failed adoption marks the term as its own, then gives up its
// reservation of the shard, then may release the lease: a note read
// meanwhile must see the mark when it reserves the shard, not before (a
// check made before the reservation could miss a mark made between the
// two, and start the shard at once while its lease is being released).
func TestAnAdoptionAsksWhetherTheTermIsItsOwnAsItReserves(t *testing.T) {
	o := &ShardOwner{state: ownerState{ownership: ownership{runs: map[string]*shardRun{}, claiming: map[string]bool{}}}}
	asked := false
	ok := o.reserve("shard-1", adoptingNote, func() bool {
		asked = true
		if o.state.mu.TryLock() {
			o.state.mu.Unlock()
			t.Error("skip was asked outside the lock that reservations are made under")
		}
		return true
	})
	require.True(t, asked)
	require.False(t, ok, "a term marked as its own must not be reserved")
	require.True(t, o.reserve("shard-1", adoptingSeen, nil))
	require.False(t, o.reserve("shard-1", adoptingSeen, nil), "reserved twice")
}
