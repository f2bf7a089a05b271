package leaderelection

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestNewShardOwnerRejectsBadInput(t *testing.T) {
	t.Parallel()
	good := BlobSettings{ConnectionString: "UseDevelopmentStorage=true", Container: "shards", Blob: "workers"}
	fn := func(context.Context, string) error { return nil }
	for _, tc := range []struct {
		name     string
		settings BlobSettings
		shards   []string
		fn       func(context.Context, string) error
		opts     []Option
		want     string
	}{
		{"nil func", good, []string{"a"}, nil, nil, "the shard func is nil"},
		{"bad container", BlobSettings{ConnectionString: good.ConnectionString, Container: "Shards", Blob: "w"}, nil, fn, nil, "BlobSettings.Container"},
		{"no prefix", BlobSettings{ConnectionString: good.ConnectionString, Container: "shards"}, nil, fn, nil, "BlobSettings.Blob: is required"},
		{"prefix too long", BlobSettings{ConnectionString: good.ConnectionString, Container: "shards", Blob: strings.Repeat("p", 800)}, nil, fn, nil, "BlobSettings.Blob: is the ShardOwner's prefix"},
		{"bad timing", BlobSettings{ConnectionString: good.ConnectionString, Container: "shards", Blob: "w", LeaseDuration: time.Second}, nil, fn, nil, "BlobSettings.LeaseDuration"},
		{"empty shard name", good, []string{"a", ""}, fn, nil, `invalid shard name "": must not be empty`},
		{"space in a shard name", good, []string{"a b"}, fn, nil, `invalid shard name "a b": may contain only`},
		{"dot segment", good, []string{"a/../b"}, fn, nil, `invalid shard name "a/../b": '/' must separate`},
		{"trailing slash", good, []string{"a/"}, fn, nil, `invalid shard name "a/"`},
		{"trailing dot", good, []string{"a."}, fn, nil, "must not end with a dot"},
		{"too long", good, []string{strings.Repeat("x", 257)}, fn, nil, "at most 256 characters"},
		{"named twice", good, []string{"a", "b", "a"}, fn, nil, `shard "a" is named twice`},
		{"several bad names, all reported", good, []string{"a b", "c", "d.", "c"}, fn, nil, `invalid shard name "a b": may contain only letters, digits, '/' and - _ . ~ : @ =, got ' '` +
			"\nleaderelection: invalid shard name \"d.\": must not end with a dot\nleaderelection: shard \"c\" is named twice"},
		{"stall timeout", good, nil, fn, []Option{WithStallTimeout(time.Minute)}, "WithStallTimeout is not supported"},
		{"empty lease ID file", good, nil, fn, []Option{WithLeaseIDFile("")}, "WithLeaseIDFile: the path is empty"},
		{"bad identity", good, nil, fn, []Option{WithIdentity(" pod")}, "identity must not begin or end with a space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := NewShardOwner(tc.settings, tc.shards, tc.fn, tc.opts...)
			require.Nil(t, o)
			require.ErrorContains(t, err, tc.want)
		})
	}
	o, err := NewShardOwner(good, []string{"tenant-1", "orders/eu-west/7", "q:high@v=2.~x"}, fn)
	require.NoError(t, err)
	require.Equal(t, []string{"orders/eu-west/7", "q:high@v=2.~x", "tenant-1"}, o.Shards())
	require.ErrorContains(t, o.SetShards([]string{"ok", "not ok"}), `invalid shard name "not ok"`)
	require.Equal(t, []string{"orders/eu-west/7", "q:high@v=2.~x", "tenant-1"}, o.Shards(), "a refused set changes nothing")
}

// A session's lease is always an ETag lease, so a ShardOwner takes any
// LeaseDuration from 3 s to 24 h: 15.5 s, which a mutex refuses as a native
// lease of a fractional second, runs; out of range, the message names the
// ETag lease's limits.
func TestShardOwnerTakesAnyETagLeaseDuration(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		s.LeaseDuration = 15500 * time.Millisecond
		require.ErrorContains(t, s.Validate(), "whole number of seconds", "a mutex's lease of 15.5 s would be native")
		log := &shardLog{}
		a := startOwner(t, "a", s, shardNames(3), log.fn("a", nil))
		require.Equal(t, 15500*time.Millisecond, a.owner.Settings().LeaseDuration)
		waitFor(t, 30*time.Second, "3 shards run", func() bool { return balanced(log, 3, "a") })
		info, err := a.owner.Inspect(context.Background())
		require.NoError(t, err)
		require.Len(t, info.Sessions, 1)
		require.Equal(t, 15500*time.Millisecond, info.Sessions[0].DeclaredDuration)

		s.LeaseDuration = 2500 * time.Millisecond
		_, err = NewShardOwner(s, nil, log.fn("b", nil))
		require.ErrorContains(t, err, "BlobSettings.LeaseDuration: must be from 3s to 24h0m0s (a ShardOwner's session lease is always an ETag lease), got 2.5s")
		require.NotContains(t, err.Error(), "native")
	})
}

func TestShardOwnerWithAWrongKeyFailsPromptlyWithoutLeakingIt(t *testing.T) {
	t.Parallel()
	s, _ := withTransport(t, shardSettings(t))
	wrongKey := "d3JvbmdrZXl3cm9uZ2tleXdyb25na2V5d3JvbmdrZXl3cm9uZ2tleQ=="
	s.ConnectionString = strings.Replace(s.ConnectionString, azurite.AccountKey, wrongKey, 1)
	require.Contains(t, s.ConnectionString, wrongKey)
	var logs syncBuffer
	o, err := NewShardOwner(s, shardNames(3), func(ctx context.Context, _ string) error { <-ctx.Done(); return nil },
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = o.Run(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrPermanent)
	assert.Less(t, took, 5*time.Second)
	assert.Contains(t, err.Error(), "403")
	assert.NotContains(t, err.Error(), wrongKey)
	assert.NotContains(t, logs.String(), wrongKey)
	t.Logf("returned after %v: %v", took, err)
}

// With the default settings (the library's own transport), nothing Run
// started is left once it returns. Not parallel: it counts goroutines.
func TestNoGoroutineOutlivesShardOwnerRun(t *testing.T) {
	s := shardSettings(t) // starts the shared Azurite before goroutines are counted
	require.Nil(t, s.ClientOptions)
	before := goleak.IgnoreCurrent()
	log := &shardLog{}
	a := startOwner(t, "a", s, shardNames(6), log.fn("a", nil))
	b := startOwner(t, "b", s, shardNames(6), log.fn("b", func(ctx context.Context, shard string) error {
		if shard == "shard-001" {
			return errors.New("fails at once") // released, claimed again later
		}
		<-ctx.Done()
		return nil
	}))
	waitFor(t, 30*time.Second, "6 shards over 2 owners", func() bool { return len(log.running()) >= 5 })
	time.Sleep(2 * time.Second)
	require.ErrorIs(t, a.stop(t), context.Canceled)
	require.ErrorIs(t, b.stop(t), context.Canceled)
	require.Empty(t, log.running())
	goleak.VerifyNone(t, before)
}

// Inspect without Run, before it or after it, leaves no pooled connection
// behind either. Not parallel: it counts goroutines.
func TestNoGoroutineOutlivesShardOwnerInspect(t *testing.T) {
	s := shardSettings(t) // starts the shared Azurite before goroutines are counted
	require.Nil(t, s.ClientOptions)
	before := goleak.IgnoreCurrent()
	o, err := NewShardOwner(s, shardNames(2), func(ctx context.Context, _ string) error { <-ctx.Done(); return nil },
		WithLogger(testLogger(t, "a")))
	require.NoError(t, err)
	info, err := o.Inspect(context.Background())
	require.NoError(t, err)
	require.Empty(t, info.Sessions, "nothing there yet")
	goleak.VerifyNone(t, before)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	waitFor(t, 30*time.Second, "both shards run", func() bool { return len(o.Owned()) == 2 })
	info, err = o.Inspect(context.Background()) // while Run runs: its connection is Run's to close
	require.NoError(t, err)
	require.Len(t, info.Shards, 2)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	info, err = o.Inspect(context.Background())
	require.NoError(t, err)
	require.Len(t, info.Shards, 2)
	goleak.VerifyNone(t, before)
}

// Run called while it runs is refused in the ShardOwner's own words (not
// the mutex's), matching ErrAlreadyRunning, and leaves the first run be.
func TestSecondConcurrentShardOwnerRunIsRefused(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		log := &shardLog{}
		r := startOwner(t, "a", shardSettings(t), shardNames(2), log.fn("a", func(ctx context.Context, _ string) error {
			<-ctx.Done()
			return nil
		}))
		waitFor(t, time.Minute, "both shards running", func() bool { return log.perOwner()["a"] == 2 })
		err := r.owner.Run(context.Background())
		require.ErrorIs(t, err, ErrAlreadyRunning)
		assert.EqualError(t, err, "leaderelection: ShardOwner.Run is already running on this ShardOwner")
		assert.Equal(t, 2, log.perOwner()["a"], "the first run goes on")
		require.ErrorIs(t, r.stop(t), context.Canceled)
	})
}

// A panic in a shard func releases that shard, stops every other shard func,
// releases the session, and then propagates from Run.
func TestShardPanicReleasesEverythingThenPropagates(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		log := &shardLog{}
		o, err := NewShardOwner(s, shardNames(4), log.fn("a", func(ctx context.Context, shard string) error {
			if shard == "shard-002" {
				time.Sleep(500 * time.Millisecond)
				panic("shard func blew up")
			}
			<-ctx.Done()
			return nil
		}), WithLogger(testLogger(t, "a")))
		require.NoError(t, err)
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			_ = o.Run(context.Background())
		}()
		require.Equal(t, "shard func blew up", recovered)
		require.Empty(t, log.running(), "every shard func returned before the panic propagated")
		info, err := o.Inspect(context.Background())
		require.NoError(t, err)
		for _, sh := range info.Shards {
			require.False(t, sh.Held, "shard %s released", sh.Name)
		}
		for _, ses := range info.Sessions {
			require.False(t, ses.Live, "session released")
		}
	})
}

// A session's lease is kept on connections of its own when the library
// builds the transport: its renewals never wait for a connection behind the
// claims, releases and listings (on a busy account a new connection waits
// seconds for its first answer; every session of a 10,000-shard cold start
// lost its first renewal that way). On the caller's transport it has none
// of its own: that pool is the caller's.
func TestShardOwnerKeepsItsSessionOnConnectionsOfItsOwn(t *testing.T) {
	t.Parallel()
	s := shardSettings(t)
	require.Nil(t, s.ClientOptions)
	log := &shardLog{}
	o, err := NewShardOwner(s, shardNames(4), log.fn("a", nil), WithIdentity("a"))
	require.NoError(t, err)
	require.True(t, o.storage.client.OwnsTransport())
	require.True(t, o.storage.sessionClient.OwnsTransport(), "a transport of its own: each client the storage package builds has one")
	require.NotSame(t, o.storage.client, o.storage.sessionClient)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	waitFor(t, 30*time.Second, "the 4 shards", func() bool { return len(log.running()) == 4 })
	o.state.mu.Lock()
	lm := o.state.membership.current.term.blob()
	o.state.mu.Unlock()
	require.Same(t, o.storage.sessionClient, lm.containerClient, "the session's lease manager is on the session's client")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	mine, _ := withTransport(t, shardSettings(t))
	o, err = NewShardOwner(mine, shardNames(4), log.fn("b", nil))
	require.NoError(t, err)
	require.False(t, o.storage.client.OwnsTransport())
	require.False(t, o.storage.sessionClient.OwnsTransport())
}
