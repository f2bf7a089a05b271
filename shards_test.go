package leaderelection

import (
	"context"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/require"
)

func TestShardsSpreadEvenlyAndNeverRunTwice(t *testing.T) {
	t.Parallel()
	s := shardSettings(t)
	names := shardNames(20)
	log := &shardLog{}
	for _, who := range []string{"a", "b", "c"} {
		startOwner(t, who, s, names, log.fn(who, nil))
	}
	took := waitFor(t, 30*time.Second, "20 shards spread over 3 owners within 1", func() bool { return balanced(log, 20, "a", "b", "c") })
	t.Logf("balanced after %v: %v", took, log.perOwner())
	// Balanced stays balanced: nothing moves back and forth.
	starts := log.starts()
	time.Sleep(3 * time.Second)
	require.Equal(t, starts, log.starts(), "shards moved after convergence")
	require.True(t, balanced(log, 20, "a", "b", "c"))
	log.requireNeverTwice(t)
}

// A new instance gets its share, and only its share moves: the old
// instances hand over exactly what it claims, and nothing moves back.
func TestNewInstanceGetsItsShare(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(20)
		log := &shardLog{}
		startOwner(t, "a", s, names, log.fn("a", nil))
		startOwner(t, "b", s, names, log.fn("b", nil))
		waitFor(t, 30*time.Second, "20 shards over 2 owners", func() bool { return balanced(log, 20, "a", "b") })
		time.Sleep(time.Second) // settled
		before := log.starts()

		startOwner(t, "c", s, names, log.fn("c", nil))
		took := waitFor(t, 15*time.Second, "the new owner's share", func() bool { return balanced(log, 20, "a", "b", "c") })
		time.Sleep(3 * time.Second)
		require.True(t, balanced(log, 20, "a", "b", "c"), "balance held: %v", log.perOwner())
		moved := log.starts() - before
		t.Logf("c held its share %v after it started; %d shards moved; %v", took, moved, log.perOwner())
		require.Equal(t, log.perOwner()["c"], moved, "only the new owner's share moved, once")
		log.requireNeverTwice(t)
	})
}

// An instance cut off from storage stops its shard funcs at its session's
// safety deadline; the others break its session once its ETag has stood for
// the declared lease duration, and take its shards. When it is back, its old
// session is dead for good: it starts a new one and gets its share again.
func TestCutOffInstanceStopsBeforeItsShardsAreReowned(t *testing.T) {
	t.Parallel()
	s := shardSettings(t)
	names := shardNames(21)
	log := &shardLog{}
	startOwner(t, "a", s, names, log.fn("a", nil))
	startOwner(t, "b", s, names, log.fn("b", nil))
	sc, cut := withTransport(t, s)
	c := startOwner(t, "c", sc, names, log.fn("c", nil))
	waitFor(t, 30*time.Second, "21 shards over 3 owners", func() bool { return balanced(log, 21, "a", "b", "c") })
	time.Sleep(time.Second)
	held := c.owner.Owned()
	require.Len(t, held, 7)
	oldSession := c.owner.Session()

	cutAt := time.Now()
	cut.Blackhole()
	took := waitFor(t, s.LeaseDuration+s.RetryInterval+5*time.Second, "c's shards run on a and b",
		func() bool { return balanced(log, 21, "a", "b") })
	t.Logf("c's shards ran elsewhere %v after the cut (lease %v)", took, s.LeaseDuration)
	require.GreaterOrEqual(t, took, s.LeaseDuration-s.withDefaults().RenewInterval, "not before its last write could have stood a lease duration")
	log.requireNeverTwice(t)

	// Every shard c held stopped, at its deadline, at least StopMargin
	// (less a loaded machine's timer slack) before its next run started.
	terms := log.snapshot()
	for _, shard := range held {
		var old, next *shardTerm
		for i := range terms {
			tm := &terms[i]
			switch {
			case tm.shard == shard && tm.who == "c" && tm.start.Before(cutAt):
				old = tm
			case tm.shard == shard && tm.start.After(cutAt) && next == nil:
				next = tm
			}
		}
		require.NotNil(t, old, shard)
		require.NotNil(t, next, shard)
		require.ErrorIs(t, old.cause, ErrRenewDeadline, "shard %s on c", shard)
		margin := next.start.Sub(old.end)
		require.GreaterOrEqual(t, margin, s.StopMargin-250*time.Millisecond, "shard %s: c stopped %v before %s started", shard, margin, next.who)
	}

	cut.Heal()
	waitFor(t, 20*time.Second, "c back with a new session and its share", func() bool {
		return balanced(log, 21, "a", "b", "c") && c.owner.Session() != oldSession
	})
	log.requireNeverTwice(t)
}

// Shards added at runtime are claimed, and only they start; removed ones are
// stopped, with ErrShardRemoved, and released.
func TestShardsAddedAndRemovedAtRuntime(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(10)
		log := &shardLog{}
		a := startOwner(t, "a", s, names, log.fn("a", nil))
		b := startOwner(t, "b", s, names, log.fn("b", nil))
		waitFor(t, 30*time.Second, "10 shards over 2 owners", func() bool { return balanced(log, 10, "a", "b") })

		time.Sleep(time.Second) // settled
		before := log.starts()

		next := append(append([]string{}, names[3:]...), "extra-1", "extra-2", "tenant/42", "tenant/43")
		require.NoError(t, a.owner.SetShards(next))
		require.NoError(t, b.owner.SetShards(next))
		waitFor(t, 15*time.Second, "the new set of 11 over 2 owners", func() bool { return balanced(log, 11, "a", "b") })
		time.Sleep(3 * time.Second)
		require.True(t, balanced(log, 11, "a", "b"), "balance held: %v", log.perOwner())
		// Neither owner held more than its new share: only the new shards
		// started, and nothing moved back and forth while each owner's record
		// still showed the old set to the other.
		require.Equal(t, 4, log.starts()-before, "only the 4 new shards started")
		last := map[string]shardTerm{}
		for _, tm := range log.snapshot() {
			last[tm.shard] = tm
		}
		for _, removed := range names[:3] {
			require.False(t, last[removed].end.IsZero(), "removed shard %s still runs", removed)
			require.ErrorIs(t, last[removed].cause, ErrShardRemoved)
		}
		require.ElementsMatch(t, next, append(a.owner.Owned(), b.owner.Owned()...))
		info, err := a.owner.Inspect(context.Background())
		require.NoError(t, err)
		for _, sh := range info.Shards {
			if sh.Name == names[0] {
				require.False(t, sh.Held, "a removed shard's lease is released")
			}
		}
		log.requireNeverTwice(t)
	})
}

// Cancelling Run hands every shard on to the other instances (see
// TestGracefulStopHandsShardsStraightOn for how soon), then ends the session
// (deleting its blob).
func TestShutdownHandsShardsOverWithinAPoll(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(12)
		log := &shardLog{}
		startOwner(t, "a", s, names, log.fn("a", nil))
		b := startOwner(t, "b", s, names, log.fn("b", nil))
		waitFor(t, 30*time.Second, "12 shards over 2 owners", func() bool { return balanced(log, 12, "a", "b") })
		session := b.owner.Session()

		start := time.Now()
		require.ErrorIs(t, b.stop(t), context.Canceled)
		stopped := time.Since(start)
		require.Empty(t, log.perOwner()["b"])
		took := waitFor(t, 2*s.RetryInterval+2*time.Second, "a runs every shard", func() bool { return balanced(log, 12, "a") })
		t.Logf("b's Run returned %v after its cancel; a ran every shard %v later", stopped, took)
		for _, tm := range log.snapshot() {
			if tm.who == "b" && !tm.end.Before(start) {
				require.ErrorIs(t, tm.cause, ErrShardHandedOver)
			}
		}
		info, err := b.owner.Inspect(context.Background())
		require.NoError(t, err)
		for _, ses := range info.Sessions {
			require.NotEqual(t, session, ses.ID, "b's session blob is deleted")
		}
		log.requireNeverTwice(t)
	})
}
