package leaderelection

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Unit tests of the renewal timing logic, with a scripted renew in place of
// storage. Durations are short so the tests are quick; every assertion about
// time allows for a loaded machine.

// fastTiming is a shrunken version of the defaults' proportions.
func fastTiming() *termRunner {
	s := BlobSettings{
		Container:      "c",
		Blob:           "b",
		LeaseDuration:  1500 * time.Millisecond,
		RenewInterval:  300 * time.Millisecond,
		StopMargin:     300 * time.Millisecond,
		RequestTimeout: 400 * time.Millisecond,
		RetryInterval:  100 * time.Millisecond,
	}
	lm := &BlobLeaseManager{settings: s, container: s.Container, blob: s.Blob, logger: slog.New(slog.DiscardHandler), floor: &termFloor{}}
	lm.id.Store(&leaseHandle{id: "id"})
	return &termRunner{lease: lm, logger: lm.logger, metrics: newMetrics(nil, s.Container, s.Blob)}
}

// scriptedRenew answers each renewal by calling the current behaviour.
type scriptedRenew struct {
	mu       sync.Mutex
	behave   func(ctx context.Context) error
	lastSent time.Time // send time of the last successful renewal
	calls    int
}

func (r *scriptedRenew) set(b func(ctx context.Context) error) {
	r.mu.Lock()
	r.behave = b
	r.mu.Unlock()
}

func (r *scriptedRenew) renew(lease time.Duration) func(ctx context.Context) (Grant, error) {
	return func(ctx context.Context) (Grant, error) {
		sent, bootSent := time.Now(), clock.SinceBoot()
		r.mu.Lock()
		b := r.behave
		r.calls++
		r.mu.Unlock()
		if err := b(ctx); err != nil {
			return Grant{}, err
		}
		r.mu.Lock()
		r.lastSent = sent
		r.mu.Unlock()
		return Grant{LeaseID: "id", Sent: sent, Expires: sent.Add(lease), bootSent: bootSent}, nil
	}
}

func ok(context.Context) error { return nil }

func transient(context.Context) error {
	return &StorageError{Op: "renew lease", StatusCode: 503, ErrorCode: "ServerBusy", kind: ErrTransient}
}

func hang(ctx context.Context) error {
	<-ctx.Done()
	return &StorageError{Op: "renew lease", detail: "request timed out", kind: ErrTransient, err: ctx.Err()}
}

type keepAliveRun struct {
	ctx      context.Context
	done     chan error
	stop     context.CancelFunc
	start    Grant
	renewals *scriptedRenew
}

func runKeepAlive(t *testing.T, m *termRunner, behave func(context.Context) error) *keepAliveRun {
	s := m.lease.config()
	r := &scriptedRenew{behave: behave}
	now := time.Now()
	g := Grant{LeaseID: "id", Sent: now, Expires: now.Add(s.LeaseDuration), bootSent: clock.SinceBoot()}
	r.lastSent = now
	ctx, cancel := context.WithCancelCause(context.Background())
	fuse := newSafetyFuse(g.safetyDeadline(s.StopMargin), cancel, clock.SinceBoot)
	stopCtx, stop := context.WithCancel(context.Background())
	run := &keepAliveRun{ctx: ctx, done: make(chan error, 1), stop: stop, start: g, renewals: r}
	go func() {
		run.done <- m.keepAlive(stopCtx, g, fuse, termStop{cancel, cancel}, r.renew(s.LeaseDuration), &termState{})
	}()
	t.Cleanup(func() {
		stop()
		<-run.done
		fuse.stop()
		cancel(nil)
	})
	return run
}

func TestHealthyRenewalsKeepTheTermAlive(t *testing.T) {
	m := fastTiming()
	run := runKeepAlive(t, m, ok)
	time.Sleep(3 * m.lease.config().LeaseDuration)
	assert.NoError(t, run.ctx.Err(), "healthy renewals must not end the term")
	run.renewals.mu.Lock()
	calls := run.renewals.calls
	run.renewals.mu.Unlock()
	// 4.5 s / 300 ms = 15 renewals on schedule.
	assert.InDelta(t, 15, calls, 5)
}

func TestTransientFailuresShorterThanTheDeadlineDoNotEndTheTerm(t *testing.T) {
	m := fastTiming()
	run := runKeepAlive(t, m, ok)
	time.Sleep(400 * time.Millisecond)
	run.renewals.set(transient)
	time.Sleep(500 * time.Millisecond) // well inside lease - margin = 1.2 s
	run.renewals.set(ok)
	time.Sleep(time.Second)
	assert.NoError(t, run.ctx.Err())
}

func TestPersistentFailuresCancelAtTheSafetyDeadline(t *testing.T) {
	for name, behave := range map[string]func(context.Context) error{
		"failing": transient,
		"hanging": hang, // a renewal still in flight at the deadline
	} {
		t.Run(name, func(t *testing.T) {
			m := fastTiming()
			s := m.lease.config()
			run := runKeepAlive(t, m, ok)
			time.Sleep(450 * time.Millisecond)
			run.renewals.set(behave)
			<-run.ctx.Done()
			cancelled := time.Now()
			require.ErrorIs(t, context.Cause(run.ctx), ErrRenewDeadline)

			run.renewals.mu.Lock()
			lastSent := run.renewals.lastSent
			run.renewals.mu.Unlock()
			deadline := lastSent.Add(s.LeaseDuration - s.StopMargin)
			assert.False(t, cancelled.Before(deadline), "cancelled %v before the deadline", deadline.Sub(cancelled))
			assert.Less(t, cancelled.Sub(deadline), 250*time.Millisecond, "cancelled late")
			assert.True(t, cancelled.Before(lastSent.Add(s.LeaseDuration)), "cancelled after the lease could expire")
			require.ErrorIs(t, <-run.done, ErrRenewDeadline)
			run.done <- nil // for the cleanup
		})
	}
}

func TestLostLeaseCancelsAtOnce(t *testing.T) {
	m := fastTiming()
	run := runKeepAlive(t, m, ok)
	time.Sleep(100 * time.Millisecond)
	run.renewals.set(func(context.Context) error {
		return &StorageError{Op: "renew lease", StatusCode: 409, ErrorCode: "LeaseIdMismatchWithLeaseOperation", kind: ErrLeaseLost}
	})
	set := time.Now()
	<-run.ctx.Done()
	assert.ErrorIs(t, context.Cause(run.ctx), ErrLeaseLost)
	// The next renewal is due one RenewInterval after the first grant.
	assert.Less(t, time.Since(set), m.lease.config().RenewInterval+250*time.Millisecond)
}

// A renewal that succeeds after the deadline, before the fuse's timer has
// run (it may be late on a loaded machine), must not extend the term.
func TestLateSuccessDoesNotReviveTheTerm(t *testing.T) {
	var cancelled []error
	var mu sync.Mutex
	cancel := func(err error) { mu.Lock(); cancelled = append(cancelled, err); mu.Unlock() }
	f := newSafetyFuse(at(time.Now().Add(time.Hour)), cancel, clock.SinceBoot)
	defer f.stop()
	f.mu.Lock()
	f.deadline.mono = time.Now().Add(-time.Millisecond) // passed, and the timer has not fired
	f.mu.Unlock()
	assert.False(t, f.extend(at(time.Now().Add(time.Hour))), "a deadline that has passed cannot be extended")
	select {
	case <-f.blown:
	default:
		t.Fatal("extend after the deadline must blow the fuse")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, cancelled, 1)
	assert.ErrorIs(t, cancelled[0], ErrRenewDeadline)
}

func TestFuseFiresAtTheExtendedDeadline(t *testing.T) {
	fired := make(chan time.Time, 1)
	start := time.Now()
	f := newSafetyFuse(at(start.Add(100*time.Millisecond)), func(error) { fired <- time.Now() }, clock.SinceBoot)
	defer f.stop()
	require.True(t, f.extend(at(start.Add(300*time.Millisecond))))
	at := <-fired
	assert.False(t, at.Before(start.Add(300*time.Millisecond)), "fired at the old deadline")
	assert.Less(t, at.Sub(start), 400*time.Millisecond)
}

func TestStoppedFuseNeverFires(t *testing.T) {
	fired := make(chan struct{}, 1)
	f := newSafetyFuse(at(time.Now().Add(20*time.Millisecond)), func(error) { fired <- struct{}{} }, clock.SinceBoot)
	f.stop()
	select {
	case <-fired:
		t.Fatal("a stopped fuse fired")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestJitterStaysWithinTheInterval(t *testing.T) {
	d := time.Second
	seen := map[bool]bool{}
	for range 1000 {
		j := clock.Jitter(d)
		require.GreaterOrEqual(t, j, 3*d/4)
		require.LessOrEqual(t, j, d)
		seen[j < 7*d/8] = true
	}
	assert.Len(t, seen, 2, "jitter should spread over the range")
}

func TestFailureLogIsRateLimited(t *testing.T) {
	var buf syncBuffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	var f failureLog
	for range 100 {
		f.failed(l, "failing")
	}
	f.recovered(l, "recovered")
	assert.Equal(t, 1, strings.Count(buf.String(), "msg=failing"))
	assert.Equal(t, 1, strings.Count(buf.String(), "msg=recovered"))
	assert.Contains(t, buf.String(), "failures=100")
}

// at is the moment t on both of the fuse's clocks, for tests that do not
// fake the boot clock.
func at(t time.Time) deadline { return deadline{mono: t, boot: clock.SinceBoot() + time.Until(t)} }

// A host suspended past the deadline wakes with Go's monotonic clock behind
// the server's: the fuse blows on the clock that counted the sleep.
func TestFuseBlowsWhenTheHostSleptPastTheDeadline(t *testing.T) {
	var slept atomic.Int64
	boot := func() time.Duration { return time.Duration(slept.Load()) }
	bootAt := func(t time.Time) deadline { return deadline{mono: t, boot: boot() + time.Until(t)} }
	fired := make(chan time.Time, 1)
	f := newSafetyFuse(bootAt(time.Now().Add(time.Hour)), func(error) { fired <- time.Now() }, boot)
	defer f.stop()
	require.True(t, f.extend(bootAt(time.Now().Add(2*time.Hour))), "awake, the deadline can move")

	woke := time.Now()
	slept.Add(int64(3 * time.Hour)) // the monotonic clock did not move
	select {
	case at := <-fired:
		assert.Less(t, at.Sub(woke), 5*fuseCheckEvery, "blown at the first check after waking")
	case <-time.After(10 * time.Second):
		t.Fatal("the fuse did not blow after the host slept past its deadline")
	}
	assert.False(t, f.extend(bootAt(time.Now().Add(time.Hour))), "a blown fuse stays blown")
}

// A renewal confirmed after waking from a sleep past the deadline does not
// revive the term, even before the check has run.
func TestLateSuccessAfterSleepDoesNotReviveTheTerm(t *testing.T) {
	var slept atomic.Int64
	boot := func() time.Duration { return time.Duration(slept.Load()) }
	var causes atomic.Int32
	f := newSafetyFuse(deadline{mono: time.Now().Add(time.Hour), boot: time.Hour}, func(error) { causes.Add(1) }, boot)
	defer f.stop()
	slept.Add(int64(2 * time.Hour))
	assert.False(t, f.extend(deadline{mono: time.Now().Add(time.Hour), boot: 3 * time.Hour}))
	assert.Equal(t, int32(1), causes.Load())
}

// A host suspended while a renewal was in flight: the server may have
// processed the renewal just after it was sent, so the boot-clock deadline
// counts from the send, and the sleep during the round trip uses it up.
func TestSleepDuringARenewalCountsAgainstItsDeadline(t *testing.T) {
	var slept atomic.Int64
	boot := func() time.Duration { return time.Duration(slept.Load()) }
	const lease, margin = 15 * time.Second, 3 * time.Second
	grant := func(sent time.Time, bootSent time.Duration) Grant {
		return Grant{Sent: sent, Expires: sent.Add(lease), bootSent: bootSent}
	}
	blown := make(chan time.Time, 1)
	f := newSafetyFuse(grant(time.Now(), boot()).safetyDeadline(margin), func(error) { blown <- time.Now() }, boot)
	defer f.stop()

	slept.Add(int64(5 * time.Second))
	sent, bootSent := time.Now(), boot() // boot 5 s: deadline 17 s
	slept.Add(int64(6 * time.Second))    // suspended before the answer was read
	require.True(t, f.extend(grant(sent, bootSent).safetyDeadline(margin)), "boot 11 s: within the first deadline, 12 s")
	woke := time.Now()
	slept.Add(int64(7 * time.Second)) // boot 18 s: past 17 s, though only 13 s after the answer was read
	select {
	case at := <-blown:
		assert.Less(t, at.Sub(woke), 5*fuseCheckEvery)
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline was counted from the answer, not from the send")
	}
}

// A renewal's boot-clock deadline is its send time's, not its answer's.
func TestRenewalDeadlineIsStampedAtSend(t *testing.T) {
	g := Grant{Sent: time.Now(), bootSent: 7 * time.Second}
	g.Expires = g.Sent.Add(15 * time.Second)
	d := g.safetyDeadline(3 * time.Second)
	assert.Equal(t, 19*time.Second, d.boot)
	assert.Equal(t, g.Sent.Add(12*time.Second), d.mono)
}

// What happens between taking the lease and starting the func counts once
// the func runs: renewals that failed meanwhile, and a lease lost meanwhile.
func TestHealthKeepsWhatHappenedBeforeTheFuncStarted(t *testing.T) {
	m := fastTiming()
	s := m.lease.config()
	t.Run("renewals failing", func(t *testing.T) {
		m.health.beginTerm()
		m.health.renewResult(transient(context.Background()))
		m.health.funcStarted()
		defer m.health.endTerm()
		time.Sleep((s.LeaseDuration-s.StopMargin)/2 + 100*time.Millisecond)
		assert.ErrorContains(t, m.healthy(), "renewals failing")
	})
	t.Run("lease lost", func(t *testing.T) {
		m.health.beginTerm()
		leaderCtx, cancel := context.WithCancelCause(context.Background())
		cancel(ErrRenewDeadline) // both contexts end before the func starts
		funcDone := make(chan struct{})
		watched := make(chan struct{})
		go func() { defer close(watched); m.watchFunc(leaderCtx, leaderCtx, funcDone) }()
		time.Sleep(50 * time.Millisecond)
		m.health.funcStarted() // and it starts anyway, and runs on
		assert.Eventually(t, func() bool { return m.healthy() != nil }, s.StopMargin+time.Second, 20*time.Millisecond)
		close(funcDone)
		<-watched
		m.health.endTerm()
	})
}

// A process frozen (or a host asleep) between taking a lease and starting
// its func may resume past the deadline before the fuse's timers fire: the
// check made just before the call blows the fuse, and the func is not
// started. (Found by the shard chaos run: a SIGSTOP between a shard's record
// and its func's start, thawed after another instance took the shard.)
func TestNoFuncStartsPastTheDeadline(t *testing.T) {
	var slept atomic.Int64
	boot := func() time.Duration { return time.Duration(slept.Load()) }
	var causes atomic.Int32
	f := newSafetyFuse(deadline{mono: time.Now().Add(time.Hour), boot: time.Hour}, func(cause error) {
		assert.ErrorIs(t, cause, ErrRenewDeadline)
		causes.Add(1)
	}, boot)
	defer f.stop()
	require.True(t, f.ahead(), "an hour ahead on both clocks")
	slept.Add(int64(2 * time.Hour)) // asleep past the deadline; the timers have not fired
	assert.False(t, f.ahead())
	assert.Equal(t, int32(1), causes.Load(), "blown at the check")
	assert.False(t, f.ahead(), "and stays blown")

	g := newSafetyFuse(deadline{mono: time.Now().Add(-time.Millisecond), boot: time.Hour}, func(error) {}, func() time.Duration { return 0 })
	defer g.stop()
	assert.False(t, g.ahead(), "past on the monotonic clock")
}
