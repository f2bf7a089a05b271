package leaderelection

import (
	"context"
	"log/slog"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The shutdown bound (see BlobSettings.RequestTimeout): once the funcs have
// returned after the caller's cancel, or from the cancel for an instance
// that leads nothing, RunTaskWhenMutexAcquired returns within
// RequestTimeout and ShardOwner.Run within 2 × RequestTimeout, even with
// storage silent. These tests are not parallel: they count goroutines, and
// time a bound that a busy machine's other tests would blur.

// shutdownSlack is what the tests allow beyond the bound: a loaded 2-core
// machine's late timers and scheduling.
const shutdownSlack = 1500 * time.Millisecond

// quietLogs records a contender's logs, for what must not be in them.
func quietLogs(t *testing.T, name string) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	h := slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	t.Cleanup(func() { t.Log(buf.String()) })
	return slog.New(h).With("contender", name), buf
}

// runMutex starts RunTaskWhenMutexAcquired; stop cancels it and returns how
// long it took to return after the cancel.
func runMutex(t *testing.T, m *BlobDistributedMutex) (stop func() (time.Duration, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.RunTaskWhenMutexAcquired(ctx) }()
	return func() (time.Duration, error) {
		cancel()
		at := time.Now()
		select {
		case err := <-done:
			return time.Since(at), err
		case <-time.After(time.Minute):
			t.Fatal("RunTaskWhenMutexAcquired did not return within a minute of the cancel")
			return 0, nil
		}
	}
}

// A leader whose storage goes silent, then cancelled: its func returns at
// once, and the term's end (its end mark, its release) takes at most
// RequestTimeout, though neither gets through.
func TestShutdownBoundLeadingStorageSilent(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, tr := withTransport(t, testSettings(t))
		s.RequestTimeout = 2 * time.Second
		before := goleak.IgnoreCurrent()
		var returned atomic.Int64
		started := make(chan struct{})
		m, err := NewBlobDistributedMutex(s, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			returned.Store(time.Now().UnixNano())
			return nil
		}, WithLogger(testLogger(t, "a")))
		require.NoError(t, err)
		stop := runMutex(t, m)
		<-started
		tr.Blackhole()
		time.Sleep(200 * time.Millisecond)
		took, err := stop()
		require.ErrorIs(t, err, context.Canceled)
		afterFunc := time.Since(time.Unix(0, returned.Load()))
		t.Logf("returned %v after the cancel, %v after the func", took.Round(time.Millisecond), afterFunc.Round(time.Millisecond))
		assert.Less(t, took, s.RequestTimeout+shutdownSlack)
		tr.Close()
		goleak.VerifyNone(t, before)
	})
}

// A follower, cancelled with storage silent: its last acquire was answered
// (someone else holds the lease), so it returns at once, gives nothing back
// and says nothing about a release.
func TestShutdownBoundFollowingStorageSilent(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		leaderSettings, _ := withTransport(t, s)
		log := newTermLog()
		startContender(t, "a", leaderSettings, log.leaderFunc("a", untilCancelled))
		log.next(t, 10*time.Second)

		fs, tr := withTransport(t, s)
		before := goleak.IgnoreCurrent()
		logger, logs := quietLogs(t, "b")
		m, err := NewBlobDistributedMutex(fs, untilCancelled, WithLogger(logger))
		require.NoError(t, err)
		stop := runMutex(t, m)
		time.Sleep(3 * s.RetryInterval) // a few polls of a held lease
		tr.Blackhole()
		time.Sleep(200 * time.Millisecond)
		took, err := stop()
		require.ErrorIs(t, err, context.Canceled)
		t.Logf("returned %v after the cancel", took.Round(time.Millisecond))
		assert.Less(t, took, shutdownSlack, "nothing to give back")
		assert.NotContains(t, logs.String(), "release")
		tr.Close()
		goleak.VerifyNone(t, before)
	})
}

// A contender whose storage is silent from the start never learns whether
// its acquire took the lease: leaving, it gives it back, within
// RequestTimeout of the cancel, and a failure to is no warning.
func TestShutdownBoundMayHoldStorageSilent(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, tr := withTransport(t, testSettings(t))
		s.RequestTimeout = 2 * time.Second
		tr.Blackhole()
		before := goleak.IgnoreCurrent()
		logger, logs := quietLogs(t, "a")
		m, err := NewBlobDistributedMutex(s, untilCancelled, WithLogger(logger))
		require.NoError(t, err)
		stop := runMutex(t, m)
		time.Sleep(s.RequestTimeout + 500*time.Millisecond) // an acquire timed out: it may hold the lease
		took, err := stop()
		require.ErrorIs(t, err, context.Canceled)
		t.Logf("returned %v after the cancel", took.Round(time.Millisecond))
		assert.Less(t, took, s.RequestTimeout+shutdownSlack)
		out := logs.String()
		assert.NotContains(t, out, "could not release the lease")
		assert.Contains(t, out, "level=DEBUG msg=\"leaderelection: could not give back a lease")
		tr.Close()
		goleak.VerifyNone(t, before)
	})
}

// A contender that never connected (storage refuses connections) never
// sent an acquire: it gives nothing back, returns at its caller's deadline,
// and logs nothing about a release.
func TestShutdownBoundNeverConnected(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		closed := l.Addr().String()
		require.NoError(t, l.Close())
		s.ConnectionString = regexp.MustCompile(`127\.0\.0\.1:\d+`).ReplaceAllString(s.ConnectionString, closed)
		require.Contains(t, s.ConnectionString, closed)
		s, tr := withTransport(t, s)
		before := goleak.IgnoreCurrent()
		logger, logs := quietLogs(t, "a")
		m, err := NewBlobDistributedMutex(s, untilCancelled, WithLogger(logger))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		err = m.RunTaskWhenMutexAcquired(ctx)
		late := time.Since(mustDeadline(ctx))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		t.Logf("returned %v after the caller's deadline", late.Round(time.Millisecond))
		assert.Less(t, late, 500*time.Millisecond)
		assert.NotContains(t, logs.String(), "release")
		assert.NotContains(t, logs.String(), "give back")
		tr.Close()
		goleak.VerifyNone(t, before)
	})
}

func mustDeadline(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		panic("no deadline")
	}
	return d
}

// ShardOwner.Run with many shards, storage silent, then cancelled: every
// shard func returns at once, and Run returns within 2 × RequestTimeout of
// the last, whatever the number of shards (before, releases were sent one
// RequestTimeout each).
func TestShutdownBoundShardOwnerManyShardsStorageSilent(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		const n = 200
		s := shardSettings(t)
		s.LeaseDuration, s.StopMargin = 15*time.Second, 3*time.Second // RequestTimeout 4 s, the default
		s, tr := withTransport(t, s)
		before := goleak.IgnoreCurrent()
		took, sinceFuncs := shutdownShardOwner(t, s, tr.Blackhole, n, testLogger(t, "a"))
		rt := s.withDefaults().RequestTimeout
		t.Logf("%d shards: Run returned %v after the cancel, %v after the last shard func returned (bound %v)",
			n, took.Round(time.Millisecond), sinceFuncs.Round(time.Millisecond), 2*rt)
		assert.Less(t, sinceFuncs, 2*rt+shutdownSlack)
		assert.Less(t, took, 2*rt+shutdownSlack)
		tr.Close()
		goleak.VerifyNone(t, before)
	})
}

// shutdownShardOwner runs a ShardOwner until it runs all n shards, calls
// cut (which makes storage unreachable), cancels, and returns how long Run
// took to return after the cancel and after the last shard func returned.
func shutdownShardOwner(tb testing.TB, s BlobSettings, cut func(), n int, logger *slog.Logger) (took, sinceFuncs time.Duration) {
	var (
		mu       sync.Mutex
		running  int
		lastDone time.Time
	)
	o, err := NewShardOwner(s, shardNames(n), func(ctx context.Context, _ string) error {
		mu.Lock()
		running++
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		running--
		lastDone = time.Now()
		mu.Unlock()
		return nil
	}, WithLogger(logger))
	require.NoError(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	start := time.Now()
	for {
		mu.Lock()
		r := running
		mu.Unlock()
		if r == n {
			break
		}
		if time.Since(start) > 10*time.Minute {
			tb.Fatalf("%d of %d shards run after %v", r, n, time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cut()
	time.Sleep(100 * time.Millisecond)
	cancel()
	at := time.Now()
	select {
	case err := <-done:
		require.ErrorIs(tb, err, context.Canceled)
	case <-time.After(5 * time.Minute):
		tb.Fatalf("Run did not return within 5 minutes of the cancel (%d shards)", n)
	}
	returned := time.Now()
	mu.Lock()
	defer mu.Unlock()
	require.Zero(tb, running)
	return returned.Sub(at), returned.Sub(lastDone)
}
