package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// slack is what a loaded 2-core machine may add to any timing asserted here.
const slack = time.Second

func TestOneContenderBecomesLeader(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, _ := withTransport(t, testSettings(t))
		log := newTermLog()
		startContender(t, "a", s, log.leaderFunc("a", untilCancelled))

		tm := log.next(t, 10*time.Second)
		assert.Equal(t, "a", tm.who)
	})
}

func TestFiveContendersExactlyOneLeads(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		for i := range 5 {
			name := fmt.Sprintf("c%d", i)
			si, _ := withTransport(t, s)
			startContender(t, name, si, log.leaderFunc(name, untilCancelled))
		}
		first := log.next(t, 10*time.Second)

		// While everyone is healthy, the first leader keeps the lease: sample
		// over several renewals and follower retries.
		for range 30 {
			time.Sleep(200 * time.Millisecond)
			running := log.running()
			require.Len(t, running, 1, "exactly one leader func must run")
			require.Equal(t, first.who, running[0].who)
		}
		require.Len(t, log.snapshot(), 1, "no other term may have started")
	})
}

func TestFiveContendersWithChurnNeverOverlap(t *testing.T) {
	t.Parallel()
	s := testSettings(t)
	s.RetryInterval = 200 * time.Millisecond
	log := newTermLog()
	for i := range 5 {
		name := fmt.Sprintf("c%d", i)
		si, _ := withTransport(t, s)
		// Each term ends on its own after a short while (returning nil or
		// an error), so leadership changes hands many times.
		startContender(t, name, si, log.leaderFunc(name, func(ctx context.Context) error {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(50+rand.IntN(250)) * time.Millisecond):
			}
			if rand.IntN(2) == 0 {
				return errors.New("work failed")
			}
			return nil
		}))
	}
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		require.LessOrEqual(t, len(log.running()), 1, "two leader funcs running at once")
	}
	terms := log.snapshot()
	log.requireNoOverlap(t)
	require.GreaterOrEqual(t, len(terms), 8, "leadership should have changed hands many times")
	t.Logf("%d terms in 8s, no overlap", len(terms))
}

func TestGracefulHandoverWithinOneRetryInterval(t *testing.T) {
	t.Parallel()
	s := testSettings(t)
	log := newTermLog()
	sa, _ := withTransport(t, s)
	a := startContender(t, "a", sa, log.leaderFunc("a", untilCancelled))
	log.next(t, 10*time.Second)
	sb, _ := withTransport(t, s)
	startContender(t, "b", sb, log.leaderFunc("b", untilCancelled))
	time.Sleep(s.RetryInterval) // b is now a follower, retrying

	stopped := time.Now()
	require.ErrorIs(t, a.stop(t), context.Canceled)
	aTerm := log.snapshot()[0]
	require.False(t, aTerm.end.IsZero(), "a's func must have returned when RunTaskWhenMutexAcquired returned")

	bTerm := log.next(t, 10*time.Second)
	require.Equal(t, "b", bTerm.who)
	handover := bTerm.start.Sub(aTerm.end)
	t.Logf("graceful handover: %v from a's func returning to b's func starting (%v from cancel)", handover, bTerm.start.Sub(stopped))
	// Within one retry interval, plus request latency on a loaded machine.
	assert.Less(t, handover, s.RetryInterval+500*time.Millisecond)
	log.requireNoOverlap(t)
}

// A leader cut off from storage without releasing must stop before its lease
// can expire, and nobody else may start before it has stopped.
func TestCrashWithoutReleaseStopsLeaderBeforeLeaseExpires(t *testing.T) {
	t.Parallel()
	s := testSettings(t)
	log := newTermLog()
	sa, ta := withTransport(t, s)
	var lastRenewSent atomic.Int64 // unix nanos of the last renewal the server confirmed
	var start = time.Now()
	ta.Observe(func(x faults.Exchange) {
		if (x.LeaseAction == "renew" || x.LeaseAction == "acquire") && x.Status >= 200 && x.Status < 300 {
			lastRenewSent.Store(int64(x.Sent.Sub(start)))
		}
	})
	startContender(t, "a", sa, log.leaderFunc("a", untilCancelled))
	aTerm := log.next(t, 10*time.Second)
	require.Equal(t, "a", aTerm.who)
	sb, _ := withTransport(t, s)
	startContender(t, "b", sb, log.leaderFunc("b", untilCancelled))
	time.Sleep(3 * time.Second) // a renews at least once in between

	ta.Blackhole()
	cut := time.Now()
	bTerm := log.next(t, 2*s.withDefaults().LeaseDuration+10*time.Second)
	require.Equal(t, "b", bTerm.who)

	a := log.snapshot()[0]
	lastSent := start.Add(time.Duration(lastRenewSent.Load()))
	expiresNoEarlierThan := lastSent.Add(s.withDefaults().LeaseDuration)
	require.False(t, a.cancelled.IsZero(), "a's context was never cancelled")
	require.ErrorIs(t, a.cause, ErrRenewDeadline)
	assert.True(t, a.cancelled.Before(expiresNoEarlierThan),
		"a's context cancelled %v after its lease could expire", a.cancelled.Sub(expiresNoEarlierThan))
	require.False(t, a.end.IsZero(), "a's func still running when b started")
	assert.True(t, a.end.Before(bTerm.start), "a's func returned %v after b's started", a.end.Sub(bTerm.start))
	assert.False(t, bTerm.start.Before(expiresNoEarlierThan), "b started before a's lease could have expired")
	t.Logf("crash failover: b leads %v after the cut, %v after a's lease could expire; a stopped %v before that (margin %v)",
		bTerm.start.Sub(cut), bTerm.start.Sub(expiresNoEarlierThan), expiresNoEarlierThan.Sub(a.cancelled), s.withDefaults().StopMargin)
}

// Faults that heal before the safety deadline must not end the term.
func TestTransientFaultsDoNotCancelLeader(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, svc *memblob.Service) {
		s := memorySettings(t, svc)
		s.RenewInterval = 2 * time.Second // the deadline is 12 s after each confirmed renewal
		log := newTermLog()
		sa, ta := withTransport(t, s)
		startContender(t, "a", sa, log.leaderFunc("a", untilCancelled))
		log.next(t, 10*time.Second)
		sb, _ := withTransport(t, s)
		startContender(t, "b", sb, log.leaderFunc("b", untilCancelled))

		var failed atomic.Int32
		renewed := make(chan time.Time, 100)
		ta.Observe(func(x faults.Exchange) {
			switch {
			case x.LeaseAction == "renew" && x.Status == 200:
				renewed <- x.Sent
			case x.LeaseAction == "renew":
				failed.Add(1)
			}
		})
		requireStillLeading := func(fault string) {
			t.Helper()
			running := log.running()
			require.Len(t, running, 1, "after %s", fault)
			require.Equal(t, "a", running[0].who, "after %s: leadership moved", fault)
			require.Len(t, log.snapshot(), 1, "after %s: another term started", fault)
		}
		for _, fault := range []struct {
			name   string
			inject func()
		}{
			{"503 ServerBusy", func() { ta.Fail(503, "ServerBusy") }},
			{"500 InternalError", func() { ta.Fail(500, "InternalError") }},
			{"408 timeout", func() { ta.Fail(408, "OperationTimedOut") }},
			{"429 throttled", func() { ta.Fail(429, "ServerBusy") }},
			{"slow responses (1.5 s)", func() { ta.Delay(1500 * time.Millisecond) }},
			{"connection resets", func() { ta.ResetConnections() }},
		} {
			fault.inject()
			time.Sleep(4 * time.Second)
			ta.Heal()
			time.Sleep(2500 * time.Millisecond) // renewals succeed again
			requireStillLeading(fault.name)
		}

		// A silent server from just after a confirmed renewal until shortly
		// before the deadline that renewal set: early enough that a renewal
		// sent after the heal (the one in flight at the heal hangs for up to
		// RequestTimeout) lands before it.
		for len(renewed) > 0 {
			<-renewed
		}
		last := <-renewed
		ta.Blackhole()
		d := s.withDefaults()
		healBefore := d.RequestTimeout + time.Second
		time.Sleep(time.Until(last.Add(d.LeaseDuration - d.StopMargin - healBefore)))
		ta.Heal()
		time.Sleep(healBefore + time.Second)
		requireStillLeading(fmt.Sprintf("a blackhole healed %v before the deadline", healBefore))
		assert.Positive(t, failed.Load(), "the faults should have failed some renewals")
	})
}

func TestLeaderFuncReturningReleasesLeaseAndContentionResumes(t *testing.T) {
	t.Parallel()
	for _, result := range []error{nil, errors.New("coordinator failed")} {
		t.Run(fmt.Sprint(result), func(t *testing.T) {
			t.Parallel()
			inBubble(t, func(t *testing.T, _ *memblob.Service) {
				s, tr := withTransport(t, testSettings(t))
				var mu sync.Mutex
				var releases []time.Time
				var runningAtRelease []int // terms running as each release was answered
				log := newTermLog()
				tr.Observe(func(x faults.Exchange) {
					if x.LeaseAction == "release" && x.Status == 200 {
						mu.Lock()
						releases = append(releases, x.Done)
						runningAtRelease = append(runningAtRelease, len(log.running()))
						mu.Unlock()
					}
				})
				var runs atomic.Int32
				startContender(t, "a", s, log.leaderFunc("a", func(ctx context.Context) error {
					if runs.Add(1) == 1 {
						return result
					}
					<-ctx.Done()
					return nil
				}))
				log.next(t, 10*time.Second)
				second := log.next(t, 10*time.Second)
				assert.Equal(t, "a", second.who, "contention resumes after the func returns")
				first := log.snapshot()[0]
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, releases, 1, "the lease is released once, between the terms")
				// In virtual time the release and the end of the first term
				// may share an instant: that the first had ended is what
				// the release saw.
				assert.Equal(t, []int{0}, runningAtRelease, "the lease was released while a term ran")
				assert.True(t, !releases[0].Before(first.end) && releases[0].Before(second.start),
					"released at %v, first term ended %v, second started %v", releases[0], first.end, second.start)
				log.requireNoOverlap(t)
			})
		})
	}
}

func TestLeaderFuncReturnHandsOverToWaitingContender(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		done := make(chan struct{})
		sa, _ := withTransport(t, s)
		startContender(t, "a", sa, log.leaderFunc("a", func(ctx context.Context) error {
			<-done
			return nil
		}))
		log.next(t, 10*time.Second)
		sb, _ := withTransport(t, s)
		startContender(t, "b", sb, log.leaderFunc("b", untilCancelled))
		time.Sleep(s.RetryInterval)
		close(done)
		// b retries within one retry interval; a waits a little longer than
		// that before contending again, so the waiting contender wins.
		next := log.next(t, 10*time.Second)
		require.Equal(t, "b", next.who)
		aTerm := log.snapshot()[0]
		t.Logf("b took over %v after a's func returned", next.start.Sub(aTerm.end))
		assert.Less(t, next.start.Sub(aTerm.end), s.RetryInterval+500*time.Millisecond)
		log.requireNoOverlap(t)
	})
}

func TestPanicReleasesLeaseThenPropagates(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, _ := withTransport(t, testSettings(t))
		m, err := NewBlobDistributedMutex(s, func(ctx context.Context) error { panic("boom") }, WithLogger(testLogger(t, "a")))
		require.NoError(t, err)

		recovered := make(chan any, 1)
		go func() {
			defer func() { recovered <- recover() }()
			_ = m.RunTaskWhenMutexAcquired(context.Background())
		}()
		var r any
		select {
		case r = <-recovered:
		case <-time.After(20 * time.Second):
			t.Fatal("the panic did not propagate out of RunTaskWhenMutexAcquired")
		}
		assert.Equal(t, "boom", r)
		info, err := m.LeaseManager().Inspect(context.Background())
		require.NoError(t, err)
		assert.Equal(t, lease.StateTypeAvailable, info.State, "the lease must be released before the panic propagates")
	})
}

func TestBrokenLeaseCancelsLeaderAsLost(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.RenewInterval = time.Second
		log := newTermLog()
		sa, _ := withTransport(t, s)
		c := startContender(t, "a", sa, log.leaderFunc("a", untilCancelled))
		log.next(t, 10*time.Second)

		broken := time.Now()
		_, err := c.mutex.LeaseManager().Break(context.Background(), 0)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return !log.snapshot()[0].end.IsZero() }, 5*time.Second, 20*time.Millisecond)
		a := log.snapshot()[0]
		assert.ErrorIs(t, a.cause, ErrLeaseLost)
		t.Logf("leader stopped %v after its lease was broken", a.cancelled.Sub(broken))
	})
}

// A func that ignores its context keeps running after the deadline: it must
// never be started a second time while it runs, and the mutex says so loudly.
func TestFuncIgnoringContextIsNotStartedTwice(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, ta := withTransport(t, testSettings(t))
		var logs syncBuffer
		var running, maxRunning, runs atomic.Int32
		release := make(chan struct{})
		m, err := NewBlobDistributedMutex(s, func(ctx context.Context) error {
			runs.Add(1)
			n := running.Add(1)
			defer running.Add(-1)
			for {
				if cur := maxRunning.Load(); n <= cur || maxRunning.CompareAndSwap(cur, n) {
					break
				}
			}
			if runs.Load() == 1 {
				<-release // ignores ctx
			} else {
				<-ctx.Done()
			}
			return nil
		}, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.RunTaskWhenMutexAcquired(ctx) }()
		var releaseOnce sync.Once
		free := func() { releaseOnce.Do(func() { close(release) }) }
		defer func() { cancel(); free(); <-done }() // a failed assertion must not leave the func blocked

		require.Eventually(t, func() bool { return runs.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
		ta.Blackhole()
		require.Eventually(t, func() bool {
			return strings.Contains(logs.String(), "still running after its lease context was cancelled")
		}, 30*time.Second, 100*time.Millisecond, "no loud log for a func that ignores its context")
		ta.Heal()
		time.Sleep(2 * s.RetryInterval)
		require.Equal(t, int32(1), runs.Load(), "started again while the first run was still running")
		free()
		require.Eventually(t, func() bool { return runs.Load() == 2 }, 10*time.Second, 10*time.Millisecond)
		assert.Equal(t, int32(1), maxRunning.Load())
	})
}

func TestWrongAccountKeyFailsPromptlyWithoutLeakingKey(t *testing.T) {
	t.Parallel()
	s, _ := withTransport(t, testSettings(t))
	wrongKey := "d3JvbmdrZXl3cm9uZ2tleXdyb25na2V5d3JvbmdrZXl3cm9uZ2tleQ=="
	s.ConnectionString = strings.Replace(s.ConnectionString, azurite.AccountKey, wrongKey, 1)
	require.Contains(t, s.ConnectionString, wrongKey)
	var logs syncBuffer
	m, err := NewBlobDistributedMutex(s, untilCancelled, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = m.RunTaskWhenMutexAcquired(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrPermanent)
	assert.Less(t, took, 5*time.Second)
	assert.Contains(t, err.Error(), "403")
	assert.Regexp(t, `Authentication|Authorization`, err.Error())
	assert.NotContains(t, err.Error(), wrongKey)
	assert.NotContains(t, logs.String(), wrongKey)
	t.Logf("returned after %v: %v", took, err)
}

func TestContainerAndBlobCreatedWhenManyStartAtOnce(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t) // a container that does not exist yet
		log := newTermLog()
		var errs sync.Map
		start := make(chan struct{})
		var wg sync.WaitGroup
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); wg.Wait() })
		for i := range 8 {
			name := fmt.Sprintf("c%d", i)
			si, _ := withTransport(t, s)
			m, err := NewBlobDistributedMutex(si, log.leaderFunc(name, untilCancelled), WithLogger(testLogger(t, name)))
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := m.RunTaskWhenMutexAcquired(ctx); !errors.Is(err, context.Canceled) {
					errs.Store(name, err)
				}
			}()
		}
		close(start)
		log.next(t, 15*time.Second)
		time.Sleep(2 * time.Second)
		assert.Len(t, log.running(), 1)
		cancel()
		wg.Wait()
		errs.Range(func(k, v any) bool {
			t.Errorf("%s: %v", k, v)
			return true
		})
	})
}

// Not parallel: it checks that the goroutines started by one call are gone
// when it returns.
func TestNoGoroutineOutlivesRunTaskWhenMutexAcquired(t *testing.T) {
	s, tr := withTransport(t, testSettings(t))
	leadThenStop(t, s, tr.Close)
}

// leadThenStop leads for a few renewals, cancels, and checks that no
// goroutine started meanwhile is left once closeTransport has run. Not
// for parallel tests: it counts goroutines.
func leadThenStop(t *testing.T, s BlobSettings, closeTransport func()) {
	t.Helper()
	s.RenewInterval = time.Second
	before := goleak.IgnoreCurrent()
	started := make(chan struct{})
	m, err := NewBlobDistributedMutex(s, func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return nil
	}, WithLogger(testLogger(t, "a")))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.RunTaskWhenMutexAcquired(ctx) }()
	<-started
	time.Sleep(2500 * time.Millisecond) // a few renewals
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	closeTransport()
	goleak.VerifyNone(t, before)
}

func TestSecondConcurrentRunIsRefused(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, _ := withTransport(t, testSettings(t))
		log := newTermLog()
		c := startContender(t, "a", s, log.leaderFunc("a", untilCancelled))
		log.next(t, 10*time.Second)
		assert.ErrorIs(t, c.mutex.RunTaskWhenMutexAcquired(context.Background()), ErrAlreadyRunning)
	})
}

// Not parallel: it checks for leftover goroutines. A panic in a hook (here
// the StartedLeading callback) before the func starts must still stop
// renewing and release the lease.
func TestPanicInEventCallbackReleasesLeaseWithoutLeaks(t *testing.T) {
	s, tr := withTransport(t, testSettings(t))
	before := goleak.IgnoreCurrent()
	m, err := NewBlobDistributedMutex(s, untilCancelled, WithLogger(testLogger(t, "a")), WithEvents(func(e Event) {
		if e.Kind == StartedLeading {
			panic("callback failed")
		}
	}))
	require.NoError(t, err)
	func() {
		defer func() { assert.Equal(t, "callback failed", recover()) }()
		_ = m.RunTaskWhenMutexAcquired(context.Background())
	}()
	assert.False(t, m.IsLeader())
	info, err := m.Leader(context.Background())
	require.NoError(t, err)
	assert.False(t, info.Held(), "the lease must be released before the panic propagates")
	tr.Close()
	goleak.VerifyNone(t, before)
}

// A SAS token must not leak through a connection error, whose message the
// HTTP client builds from the full request URL.
func TestSASNeverInConnectionErrors(t *testing.T) {
	t.Parallel()
	const sig = "c2lnbmF0dXJlc2VjcmV0"
	s := testSettings(t)
	s.ConnectionString = ""
	s.SASURL = "http://127.0.0.1:1/devstoreaccount1?sv=2023-01-01&ss=b&srt=sco&sp=rwc&se=2030-01-01T00:00:00Z&sig=" + sig
	s, _ = withTransport(t, s)
	var logs syncBuffer
	m, err := NewBlobDistributedMutex(s, untilCancelled, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	_, err = m.LeaseManager().Acquire(context.Background())
	require.ErrorIs(t, err, ErrTransient)
	assert.Contains(t, err.Error(), "connection")
	assert.NotContains(t, err.Error(), sig)
	for e := errors.Unwrap(err); e != nil; e = errors.Unwrap(e) {
		assert.NotContains(t, e.Error(), sig, "an error a reporter reaches by unwrapping")
	}
	var opErr *net.OpError
	assert.ErrorAs(t, err, &opErr, "the network error is still there to match")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = m.RunTaskWhenMutexAcquired(ctx)
	assert.Contains(t, logs.String(), "cannot reach the lease")
	assert.NotContains(t, logs.String(), sig)
}

// After the caller cancels, the lease is still renewed while the func winds
// down, even for longer than the lease itself, and released only once the
// func has returned: nobody else leads meanwhile, and a follower takes over
// right after.
func TestLeaseRenewedWhileFuncWindsDownAfterCancel(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.RenewInterval = time.Second
		windDown := s.withDefaults().LeaseDuration + 2*time.Second
		log := newTermLog()
		var logs syncBuffer
		var leaseEnded atomic.Bool
		var unhealthy atomic.Value
		a := startContender(t, "a", s, log.leaderFunc("a", func(ctx context.Context) error {
			<-ctx.Done()
			select { // the caller asked it to finish up; the lease is still ours
			case <-LeaseContext(ctx).Done():
				leaseEnded.Store(true)
			case <-time.After(windDown):
			}
			return nil
		}), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.Equal(t, "a", log.next(t, 10*time.Second).who)
		startContender(t, "b", s, log.leaderFunc("b", untilCancelled))

		cancelled := time.Now()
		a.cancel()
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for time.Since(cancelled) < windDown-time.Second {
				if err := a.mutex.Healthy(); err != nil {
					unhealthy.Store(err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		next := log.next(t, windDown+10*time.Second)
		<-sampled
		assert.Equal(t, "b", next.who)
		assert.GreaterOrEqual(t, next.start.Sub(cancelled), windDown, "b led while a's func was still winding down")
		assert.Less(t, next.start.Sub(cancelled), windDown+s.RetryInterval+2*time.Second, "the lease was released once a's func returned")
		log.requireNoOverlap(t)
		assert.False(t, leaseEnded.Load(), "a's lease context ended while its lease was renewed")
		assert.Nil(t, unhealthy.Load(), "a winding down under a held lease was reported unhealthy")
		assert.NotContains(t, logs.String(), "level=ERROR", "a winding down under a held lease was logged as an error")
		assert.Contains(t, logs.String(), "still winding down", "a long wind-down is worth a warning")
	})
}

// A func winding down after its caller cancelled learns from its lease
// context when the lease may pass to another instance, and stops before
// anyone else starts.
func TestWindingDownFuncIsToldWhenItsLeaseMayPass(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.RenewInterval = time.Second
		d := s.withDefaults()
		log := newTermLog()
		sa, ta := withTransport(t, s)
		var lastRenewSent atomic.Int64 // since start, of the last renewal the server confirmed
		start := time.Now()
		ta.Observe(func(x faults.Exchange) {
			if (x.LeaseAction == "renew" || x.LeaseAction == "acquire") && x.Status >= 200 && x.Status < 300 {
				lastRenewSent.Store(int64(x.Sent.Sub(start)))
			}
		})
		type stopNow struct {
			at    time.Time
			cause error
		}
		told := make(chan stopNow, 1)
		a := startContender(t, "a", sa, log.leaderFunc("a", func(ctx context.Context) error {
			<-ctx.Done()
			lease := LeaseContext(ctx)
			select { // a long graceful wind-down, cut short only if the lease may pass
			case <-lease.Done():
				told <- stopNow{time.Now(), context.Cause(lease)}
			case <-time.After(3 * d.LeaseDuration):
			}
			return nil
		}))
		require.Equal(t, "a", log.next(t, 10*time.Second).who)
		sb, _ := withTransport(t, s)
		startContender(t, "b", sb, log.leaderFunc("b", untilCancelled))

		a.cancel()
		time.Sleep(time.Second)
		ta.Blackhole() // storage goes silent while a winds down
		bTerm := log.next(t, 2*d.LeaseDuration+10*time.Second)
		require.Equal(t, "b", bTerm.who)

		var stop stopNow
		select {
		case stop = <-told:
		default:
			t.Fatal("a's lease context was never cancelled")
		}
		assert.ErrorIs(t, stop.cause, ErrRenewDeadline)
		expires := start.Add(time.Duration(lastRenewSent.Load())).Add(d.LeaseDuration)
		assert.GreaterOrEqual(t, expires.Sub(stop.at), d.StopMargin-250*time.Millisecond, "a was told too late")
		log.requireNoOverlap(t)
		t.Logf("a told to stop now %v before its lease could expire; b started %v after that", expires.Sub(stop.at), bTerm.start.Sub(stop.at))
	})
}

// A caller who gives up while an acquire whose answer was lost waits for its
// retry releases the lease it may hold, so followers need not wait it out.
func TestCancelAfterALostAcquireAnswerReleasesTheLease(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.RetryInterval = 2 * time.Second // the retry after the lost answer waits at least 1.5 s
		s, tr := withTransport(t, s)
		lost := make(chan struct{}, 1)
		tr.Observe(func(x faults.Exchange) {
			if x.LeaseAction == "acquire" && x.Err != nil {
				select {
				case lost <- struct{}{}:
				default:
				}
			}
		})
		tr.LoseNextAnswer("acquire")
		log := newTermLog()
		c := startContender(t, "a", s, log.leaderFunc("a", untilCancelled))
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Fatal("no acquire answer was lost")
		}
		time.Sleep(300 * time.Millisecond) // waiting for its retry now
		require.ErrorIs(t, c.stop(t), context.Canceled)

		info, err := newManager(t, s).Inspect(context.Background())
		require.NoError(t, err)
		assert.False(t, info.Held(), "the lease granted to a contender that left is still %s", info.State)
		assert.Empty(t, log.snapshot(), "no func ran")
	})
}
