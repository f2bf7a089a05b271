package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// BlobDistributedMutex runs a leader func on exactly one of many instances at
// a time, using a lease on one blob. Build it with [NewBlobDistributedMutex]
// and call RunTaskWhenMutexAcquired.
type BlobDistributedMutex struct {
	lease   *BlobLeaseManager
	fn      func(ctx context.Context) error
	logger  *slog.Logger
	running atomic.Bool
}

// NewBlobDistributedMutex validates settings and returns a mutex that runs fn
// while it holds the lease. Every invalid setting is reported (see
// [BlobSettings.Validate]); a nil fn is an error too. No network call is made.
func NewBlobDistributedMutex(settings BlobSettings, fn func(ctx context.Context) error, opts ...Option) (*BlobDistributedMutex, error) {
	var errs []error
	if fn == nil {
		errs = append(errs, errors.New("leaderelection: the leader func is nil"))
	}
	if err := settings.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	lm, err := NewBlobLeaseManager(settings, opts...)
	if err != nil {
		return nil, err
	}
	return &BlobDistributedMutex{lease: lm, fn: fn, logger: lm.logger}, nil
}

// LeaseManager returns the manager of the mutex's lease, for inspection and
// operator actions.
func (m *BlobDistributedMutex) LeaseManager() *BlobLeaseManager { return m.lease }

// RunTaskWhenMutexAcquired contends for the lease until ctx is done, and runs
// the leader func each time it wins. It returns ctx.Err() when ctx is done, or
// an error matching [ErrPermanent] when storage refuses us for good (bad
// credentials, missing permissions); transient storage failures are retried
// forever with capped, jittered backoff.
//
// Each term, the func runs under a context derived from ctx. That context is
// cancelled when ctx is, when the lease is lost, or at the safety deadline
// (see [BlobSettings.StopMargin]); [context.Cause] says which, matching
// [ErrLeaseLost] or [ErrRenewDeadline] for the last two. The lease is
// renewed until the func returns, and released only then. When the func
// returns, nil or an error (which is logged, and does not stop the loop), the
// term ends, the lease is released, and this instance contends again after
// 1 to 1.25 RetryIntervals (a waiting follower, which retries within one,
// takes over first): the func may run again, here or on another instance. A
// panic in the func releases the lease and propagates.
//
// The func is never started while an earlier run of it is still running.
// A func that ignores its cancelled context is logged at Error level every
// StopMargin until it returns; after a lost lease another instance may lead
// meanwhile.
//
// No goroutine started by RunTaskWhenMutexAcquired outlives it. Calling it
// again while it runs returns [ErrAlreadyRunning].
func (m *BlobDistributedMutex) RunTaskWhenMutexAcquired(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer m.running.Store(false)

	s := m.lease.settings
	backoff := s.RetryInterval
	maxBackoff := max(s.RetryInterval, s.LeaseDuration)
	var failing failureLog
	wait := time.Duration(0)
	for sleep(ctx, wait) {
		g, err := m.lease.Acquire(ctx)
		switch {
		case err == nil:
			failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
			backoff = s.RetryInterval
			if ctx.Err() != nil {
				m.releaseQuietly(ctx) // won just as the caller gave up
				break
			}
			if err := m.lead(ctx, g); err != nil {
				return err
			}
			// Followers retry within one RetryInterval; waiting a little
			// longer lets one of them take over, rather than this instance,
			// whose func just ended (perhaps failing), winning again.
			wait = s.RetryInterval + s.RetryInterval/4 - jitter(s.RetryInterval/4)
		case ctx.Err() != nil:
			// The acquire may have succeeded on the server with its answer
			// cut off: give the lease back so a follower need not wait out
			// a whole lease duration.
			m.releaseQuietly(ctx)
		case errors.Is(err, ErrLeaseHeld):
			failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
			m.logger.Debug("leaderelection: lease held by another instance", "container", s.Container, "blob", s.Blob)
			backoff = s.RetryInterval
			wait = jitter(s.RetryInterval)
		case errors.Is(err, ErrPermanent):
			m.logger.Error("leaderelection: giving up: storage refused the lease request", "container", s.Container, "blob", s.Blob, "error", err)
			return err
		default:
			failing.failed(m.logger, "leaderelection: cannot reach the lease; retrying with backoff", "container", s.Container, "blob", s.Blob, "error", err)
			wait = jitter(backoff)
			backoff = min(2*backoff, maxBackoff)
		}
	}
	return ctx.Err()
}

// lead runs one term: the leader func under a context that the renewal loop
// cancels, then the release. It returns a non-nil error only when contention
// must stop (a permanent storage error).
func (m *BlobDistributedMutex) lead(ctx context.Context, g Grant) error {
	s := m.lease.settings
	leaderCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fuse := newSafetyFuse(g.Expires.Add(-s.StopMargin), cancel)
	// Renewal outlives the caller's cancellation: it stops when the func has
	// returned.
	stopCtx, stopRenewing := context.WithCancel(context.WithoutCancel(ctx))
	funcDone := make(chan struct{})
	since := time.Now()
	m.logger.Info("leaderelection: became leader", "container", s.Container, "blob", s.Blob, "leaseID", g.LeaseID)

	var wg sync.WaitGroup
	var renewErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		renewErr = m.keepAlive(stopCtx, g, fuse, cancel, m.lease.Renew)
	}()
	go func() {
		defer wg.Done()
		m.watchFunc(leaderCtx, funcDone)
	}()

	// end runs once the func is no longer running, whether it returned or
	// panicked: only then is the lease released.
	end := func(returned bool) {
		close(funcDone)
		cancel(errTermEnded)
		stopRenewing()
		wg.Wait()
		fuse.stop()
		if !errors.Is(renewErr, ErrLeaseLost) {
			m.releaseQuietly(ctx)
		}
		reason := "func returned"
		switch {
		case !returned:
			reason = "func panicked"
		case renewErr != nil:
			reason = renewErr.Error()
		case ctx.Err() != nil:
			reason = "caller cancelled"
		}
		m.logger.Info("leaderelection: stopped leading", "container", s.Container, "blob", s.Blob,
			"reason", reason, "led", time.Since(since).Round(time.Millisecond))
	}
	returned := false
	defer func() {
		if !returned {
			end(false) // the panic goes on once the lease is released
		}
	}()

	err := m.fn(leaderCtx)
	returned = true
	end(true)
	switch {
	case err != nil && context.Cause(leaderCtx) == errTermEnded:
		m.logger.Warn("leaderelection: leader func returned an error; lease released", "container", s.Container, "blob", s.Blob, "error", err)
	case err != nil:
		m.logger.Debug("leaderelection: leader func returned after its context was cancelled", "error", err)
	}
	if errors.Is(renewErr, ErrPermanent) {
		return renewErr
	}
	return nil
}

// errTermEnded cancels the leader's context once its func has returned.
var errTermEnded = errors.New("leaderelection: term ended")

// watchFunc logs loudly while the func keeps running after its context was
// cancelled: it breaks the contract that keeps leaders from overlapping.
func (m *BlobDistributedMutex) watchFunc(leaderCtx context.Context, funcDone <-chan struct{}) {
	select {
	case <-funcDone:
		return
	case <-leaderCtx.Done():
	}
	s := m.lease.settings
	cancelled := time.Now()
	t := time.NewTicker(s.StopMargin)
	defer t.Stop()
	for {
		select {
		case <-funcDone:
			return
		case <-t.C:
			m.logger.Error("leaderelection: leader func still running after its context was cancelled; it must return when ctx is done, or two leaders may act at once",
				"container", s.Container, "blob", s.Blob, "cancelledFor", time.Since(cancelled).Round(time.Millisecond),
				"cause", fmt.Sprint(context.Cause(leaderCtx)))
		}
	}
}

// releaseQuietly gives the lease back, best effort: if it fails the lease
// expires on its own. It runs even when ctx is cancelled (a fast handover on
// shutdown is the point).
func (m *BlobDistributedMutex) releaseQuietly(ctx context.Context) {
	if err := m.lease.Release(context.WithoutCancel(ctx)); err != nil {
		m.logger.Warn("leaderelection: could not release the lease; it will expire by itself",
			"container", m.lease.container, "blob", m.lease.blob, "error", err)
	}
}
