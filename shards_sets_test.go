package leaderelection

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/require"
)

// While instances disagree on the set of shards, every shard of some live
// instance's set must run on one of the instances that have it within a
// lease duration and a RetryInterval of that becoming true; setsBound adds
// what a loaded machine's late timers and slow requests may take.
func setsBound(s BlobSettings) time.Duration {
	return s.LeaseDuration + s.RetryInterval + 5*time.Second
}

// setWatch follows the sets the owners of a test run, and checks every
// 100 ms that each shard of some owner's set runs, once, on an owner whose
// set has it, no later than setsBound after it last did (or entered a set),
// and that a shard in nobody's set stops within two polls and a few
// seconds.
type setWatch struct {
	t     testing.TB
	log   *shardLog
	bound time.Duration
	stop  time.Duration

	mu       sync.Mutex
	sets     map[string]map[string]bool // by owner
	okAt     map[string]time.Time       // shard in some set: when it last ran as it should, or entered the sets
	outAt    map[string]time.Time       // shard in no set: since when
	worst    time.Duration              // the longest a shard of some set went without running as it should
	failed   map[string]bool            // shards already reported
	failures []string
	done     chan struct{}
	stopped  chan struct{}
}

func newSetWatch(t testing.TB, s BlobSettings, log *shardLog) *setWatch {
	return &setWatch{t: t, log: log, bound: setsBound(s), stop: 2*s.RetryInterval + 5*time.Second,
		sets: map[string]map[string]bool{}, okAt: map[string]time.Time{}, outAt: map[string]time.Time{}, failed: map[string]bool{},
		done: make(chan struct{}), stopped: make(chan struct{})}
}

// setShards gives owner r the set names, and tells the watch first.
func (w *setWatch) setShards(r *ownerRun, names []string) {
	w.t.Helper()
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	w.mu.Lock()
	w.sets[r.name] = set
	w.mu.Unlock()
	require.NoError(w.t, r.owner.SetShards(names))
}

func (w *setWatch) start() {
	go func() {
		defer close(w.stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
				w.check(time.Now())
			}
		}
	}()
}

func (w *setWatch) check(now time.Time) {
	run := w.log.running()
	w.mu.Lock()
	defer w.mu.Unlock()
	fail := func(name, format string, args ...any) {
		if !w.failed[name] {
			w.failed[name] = true
			w.failures = append(w.failures, fmt.Sprintf(now.Format("15:04:05.000 ")+format, args...))
		}
	}
	in := map[string][]string{} // shard -> owners whose set has it
	for who, set := range w.sets {
		for name := range set {
			in[name] = append(in[name], who)
		}
	}
	for name, have := range in {
		delete(w.outAt, name)
		whos := run[name]
		ok := len(whos) == 1 && slices.Contains(have, whos[0])
		at, known := w.okAt[name]
		if ok || !known {
			w.okAt[name] = now
			continue
		}
		gap := now.Sub(at)
		w.worst = max(w.worst, gap)
		if gap > w.bound {
			fail(name, "shard %s, in the set of %v, has not run on one of them for %v (runs on %v)", name, have, gap.Round(time.Millisecond), whos)
		}
	}
	for name, whos := range run {
		if len(in[name]) > 0 {
			continue
		}
		delete(w.okAt, name)
		at, known := w.outAt[name]
		if !known {
			w.outAt[name] = now
			continue
		}
		if now.Sub(at) > w.stop {
			fail(name, "shard %s, in nobody's set, still runs on %v %v later", name, whos, now.Sub(at).Round(time.Millisecond))
		}
	}
}

// finish stops the watch and reports what it found.
func (w *setWatch) finish() {
	w.t.Helper()
	close(w.done)
	<-w.stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Logf("the longest a shard of some set went without running on one of its owners: %v (bound %v)", w.worst.Round(time.Millisecond), w.bound)
	require.Empty(w.t, w.failures)
}

// An instance with 10 shards beside one whose set is empty runs all 10:
// each counts its share among the instances that have its set.
func TestEveryShardRunsBesideAnInstanceWithAnEmptySet(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		log := &shardLog{}
		b := startOwner(t, "b", s, nil, log.fn("b", nil))
		waitFor(t, 30*time.Second, "b's session", func() bool { return b.owner.Session() != "" })
		time.Sleep(2 * s.RetryInterval) // b is live in every listing of the sessions from now on

		startOwner(t, "a", s, shardNames(10), log.fn("a", nil))
		took := waitFor(t, 10*time.Second+setsBound(s), "every shard runs on a (10 s for a's session to start)", func() bool { return balanced(log, 10, "a") })
		t.Logf("all 10 ran on a %v after it started", took)
		starts := log.starts()
		time.Sleep(3 * time.Second)
		require.True(t, balanced(log, 10, "a"), "still: %v", log.perOwner())
		require.Equal(t, starts, log.starts(), "nothing moved")
		require.Empty(t, b.owner.Owned())
		log.requireNeverTwice(t)
	})
}

// A rolling update from one set to another, one instance at a time (a
// pause longer than setsBound between two): at every moment every shard of
// some live instance's set runs, once, on an instance that has it, no later
// than setsBound after it last did; a shard in nobody's set stops; and once
// the instances agree the spread is within one again.
func TestRollingUpdateOfTheSetKeepsEveryShardRunning(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		setA := shardNames(12)
		setB := slices.Clone(setA[6:]) // half of A stays
		for i := range 6 {
			setB = append(setB, fmt.Sprintf("new-%03d", i))
		}
		log := &shardLog{}
		w := newSetWatch(t, s, log)
		var owners []*ownerRun
		for _, who := range []string{"a", "b", "c"} {
			r := startOwner(t, who, s, nil, log.fn(who, nil))
			w.setShards(r, setA)
			owners = append(owners, r)
		}
		waitFor(t, 30*time.Second, "set A over 3 owners", func() bool { return balanced(log, 12, "a", "b", "c") })
		w.start()
		pause := setsBound(s) + 3*time.Second
		for _, r := range owners {
			w.setShards(r, setB)
			t.Logf("%s runs set B now", r.name)
			time.Sleep(pause)
		}
		took := waitFor(t, 30*time.Second, "set B over 3 owners", func() bool { return balanced(log, 12, "a", "b", "c") })
		var running []string
		for name := range log.running() {
			running = append(running, name)
		}
		require.ElementsMatch(t, setB, running)
		t.Logf("set B spread within one %v after the last instance changed its set: %v", pause+took, log.perOwner())
		digestB, _ := checkShardNames(setB)
		waitFor(t, 5*time.Second, "every session's record shows set B", func() bool {
			info, err := owners[0].owner.Inspect(context.Background())
			require.NoError(t, err)
			n := 0
			for _, ses := range info.Sessions {
				if ses.Live && ses.ShardSet == balance.SetDigest(digestB) && ses.SetSize == len(setB) {
					n++
				}
			}
			return n == len(owners)
		})
		w.finish()
		log.requireNeverTwice(t)
	})
}

// An instance part of whose set another instance holds, by a set of its
// own, cannot reach its share: it lists the shards about once a lease
// duration, not at the pace of an instance waiting for a handover.
func TestAnInstanceThatCannotReachItsShareListsTheShardsSeldom(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		setA := shardNames(10)
		setB := slices.Clone(setA)
		for i := range 12 {
			setB = append(setB, fmt.Sprintf("more-%03d", i))
		}
		log := &shardLog{}
		var listings [2]atomic.Int32
		var owners [2]*ownerRun
		for i, set := range [][]string{setA, setB} {
			who := []string{"a", "b"}[i]
			si, tr := withTransport(t, s)
			tr.Observe(func(ex faults.Exchange) {
				if u, err := url.Parse(ex.URL); err == nil && u.Query().Get("comp") == "list" && strings.HasSuffix(u.Query().Get("prefix"), "/"+wire.ShardsDir) {
					listings[i].Add(1)
				}
			})
			owners[i] = startOwner(t, who, si, set, log.fn(who, nil))
			if i == 0 {
				waitFor(t, 30*time.Second, "a runs its 10 shards", func() bool { return balanced(log, 10, "a") })
			}
		}
		took := waitFor(t, 10*time.Second+setsBound(s), "all 22 shards run", func() bool { return len(log.running()) == 22 })
		t.Logf("all 22 ran %v after b started: %v", took, log.perOwner())
		time.Sleep(s.LeaseDuration) // b lists once more at most, and finds nothing
		const leases = 3
		before := [2]int32{listings[0].Load(), listings[1].Load()}
		time.Sleep(leases * s.LeaseDuration)
		for i, who := range []string{"a", "b"} {
			t.Logf("%s listed the shards %d times in %v, holding %d of its %d", who, listings[i].Load()-before[i],
				leases*s.LeaseDuration, len(owners[i].owner.Owned()), len(owners[i].owner.Shards()))
		}
		require.Len(t, owners[1].owner.Owned(), 12, "a holds the rest of b's set")
		require.LessOrEqual(t, listings[1].Load()-before[1], int32(leases+1), "b lists about once a lease duration")
		require.Len(t, log.running(), 22)
		log.requireNeverTwice(t)
	})
}
