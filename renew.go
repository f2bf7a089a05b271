package leaderelection

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// When the leader's context is cancelled, and why that moment is safe.
//
// The server starts a lease's clock when it processes an acquire or renew, and
// that is never earlier than the moment we sent the request. So a lease last
// extended by a request sent at time S cannot expire on the server before
// S + LeaseDuration: no other instance can acquire it before then. We cancel
// the leader's context at
//
//	deadline = S + LeaseDuration - StopMargin
//
// where S is the send time of the last request the server confirmed with our
// lease ID, read from Go's monotonic clock (time.Now carries it; wall-clock
// jumps do not move it), and checked as well on a clock that counts the time
// a host spends suspended (see safetyFuse). The fuse below cancels the
// context at that moment from a timer of its own, whether or not a renewal
// is still in flight: a
// renewal that answers after the deadline does not revive the term. The
// StopMargin is what the leader func has to notice ctx.Done() and stop, and
// it absorbs a timer firing late on a loaded machine and the tiny rate
// difference between our clock and the server's.
//
// What this does not cover: a process that is frozen (SIGSTOP, a paused VM)
// across its deadline cannot run its cancellation until it thaws; a leader
// func that ignores its context keeps running; and an operator's break with
// a period shorter than the lease duration shortens the lease on the server
// (see SafeBreakPeriod). Neither can be fixed from
// inside the process; fencing tokens (the term) let downstream systems reject
// such a leader's writes.
//
// Resuming after a restart (WithLeaseIDFile, resume.go) acquires a lease that
// has not expired, with the ID its previous holder used. That is safe because
// the previous holder is dead: the new process proposes the ID only while it
// holds the file's exclusive flock, and the kernel drops a process's lock
// only once all its threads have exited, so no leader func of the old process
// still runs. Requests the dead process had already sent may still reach the
// server later; with this ID they can only be acquires and renewals, which
// extend the lease we now hold, and term writes, which are conditional on
// the blob's ETag and so cannot overwrite a newer term. Never a release: the
// file moves on to a fresh ID, durably, before any release is sent. The new
// process records a new term (number + 1) under the lease before its func
// starts, so the term still fences, and from then on the deadline above
// applies to its own renewals. The lock proves a process dead, not work it
// handed to others (child processes, remote jobs): as after any failover,
// the term is what fences those. And it proves nothing across hosts: network
// filesystems (NFS, SMB) may lose a lock across a server or client failure,
// and a file shared by two hosts, or copied, lets two live processes hold one
// ID; hence one local filesystem, one host.

// safetyFuse cancels a term's context at a deadline that each successful
// renewal may push later. Once blown it stays blown.
//
// Go's monotonic clock stops on Linux while the host is suspended, but the
// server's does not: a host that slept past the deadline would wake with a
// timer that still has the whole sleep to run. So the fuse also holds the
// deadline on a clock that counts suspended time (CLOCK_BOOTTIME; elsewhere
// the wall clock), checks it every fuseCheckEvery, and blows on whichever
// clock reaches the deadline first.
type safetyFuse struct {
	mu           sync.Mutex
	deadline     time.Time
	bootDeadline time.Duration // the deadline on boot's clock
	boot         func() time.Duration
	timer        *time.Timer
	check        *time.Timer
	done         bool // blown or stopped: the timers must not act again
	blown        chan struct{}
	cancel       context.CancelCauseFunc
}

// fuseCheckEvery is how often the fuse reads the clock that counts
// suspended time: how late, at most, a host that slept past its deadline
// cancels after waking.
const fuseCheckEvery = 250 * time.Millisecond

func newSafetyFuse(deadline time.Time, cancel context.CancelCauseFunc) *safetyFuse {
	return newSafetyFuseClock(deadline, cancel, sinceBoot)
}

func newSafetyFuseClock(deadline time.Time, cancel context.CancelCauseFunc, boot func() time.Duration) *safetyFuse {
	f := &safetyFuse{deadline: deadline, boot: boot, cancel: cancel, blown: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bootDeadline = boot() + time.Until(deadline)
	f.timer = time.AfterFunc(time.Until(deadline), f.fire)
	f.check = time.AfterFunc(fuseCheckEvery, f.checkBoot)
	return f
}

func (f *safetyFuse) fire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	if d := time.Until(f.deadline); d > 0 {
		// The deadline was extended after the timer was set: sleep again.
		f.timer.Reset(d)
		return
	}
	f.blowLocked()
}

func (f *safetyFuse) checkBoot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	if f.boot() >= f.bootDeadline {
		f.blowLocked()
		return
	}
	f.check.Reset(fuseCheckEvery)
}

func (f *safetyFuse) blowLocked() {
	f.done = true
	f.timer.Stop()
	f.check.Stop()
	f.cancel(ErrRenewDeadline)
	close(f.blown)
}

// extend moves the deadline to d if that is later. It reports false, and
// blows the fuse, if the current deadline has already passed: a renewal that
// succeeds too late must not revive a term whose context may be cancelled.
func (f *safetyFuse) extend(d time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return false
	}
	if !time.Now().Before(f.deadline) || f.boot() >= f.bootDeadline {
		f.blowLocked()
		return false
	}
	if d.After(f.deadline) {
		// The timer re-arms itself when it fires at the old deadline.
		f.deadline, f.bootDeadline = d, f.boot()+time.Until(d)
	}
	return true
}

// current returns the deadline in force.
func (f *safetyFuse) current() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadline
}

// stop disarms the fuse without cancelling anything.
func (f *safetyFuse) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	f.timer.Stop()
	f.check.Stop()
}

// keepAlive renews the lease on schedule until stop is done (the leader func
// returned), the fuse blows, or the lease is lost or a permanent error occurs.
// renew is m.lease.Renew, or a fake in unit tests of this timing logic;
// term is the running term, for stall detection.
// It cancels the term with the reason and returns it; nil means stop was
// called while the lease was still ours. It keeps renewing after the caller's
// context is cancelled: the lease stays held while the leader func winds
// down, and is released only after it returns.
func (m *BlobDistributedMutex) keepAlive(stop context.Context, first Grant, fuse *safetyFuse, cancel context.CancelCauseFunc,
	renew func(context.Context) (Grant, error), term *termState) error {
	s := m.lease.settings
	retryDelay := max(s.RenewInterval/5, 100*time.Millisecond)
	next := first.Sent.Add(s.RenewInterval)
	var failing failureLog
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-stop.Done():
			return nil
		case <-fuse.blown:
			m.logger.Warn("leaderelection: lease not renewed before its safety deadline; leader context cancelled",
				"container", s.Container, "blob", s.Blob, "failedRenewals", failing.count)
			return ErrRenewDeadline
		case <-timer.C:
		}
		if stall := m.opts.stallTimeout; stall > 0 && term.started.Load() && term.sinceBeat() > stall {
			// Stop renewing: the lease stays valid for at least the stop
			// margin after the deadline the fuse would have used, so the
			// func has as long to return as after any other cancellation.
			cancel(ErrStalled)
			m.logger.Warn("leaderelection: leader func stalled; leader context cancelled, renewals stopped",
				"container", s.Container, "blob", s.Blob, "sinceHeartbeat", term.sinceBeat().Round(time.Millisecond))
			return ErrStalled
		}

		// The renewal may not run past the safety deadline: after it, its
		// answer no longer matters.
		ctx, cancelCall := context.WithDeadline(stop, fuse.current())
		sent := time.Now()
		g, err := renew(ctx)
		cancelCall()
		if stop.Err() == nil {
			m.metrics.renewed(time.Since(sent), outcome(err, "ok"))
			m.health.renewResult(err)
		}
		switch {
		case err == nil:
			if !fuse.extend(g.Expires.Add(-s.StopMargin)) {
				continue // the fuse blew while the renewal was in flight; the select reports it
			}
			failing.recovered(m.logger, "leaderelection: lease renewal recovered", "container", s.Container, "blob", s.Blob)
			next = g.Sent.Add(s.RenewInterval)
		case stop.Err() != nil:
			return nil
		case errors.Is(err, ErrLeaseLost):
			cause := &leaseLostError{err: err}
			cancel(cause)
			m.logger.Warn("leaderelection: lease lost; leader context cancelled", "container", s.Container, "blob", s.Blob, "error", err)
			return cause
		case errors.Is(err, ErrPermanent):
			cancel(err)
			m.logger.Error("leaderelection: lease renewal failed permanently; leader context cancelled", "container", s.Container, "blob", s.Blob, "error", err)
			return err
		default:
			failing.failed(m.logger, "leaderelection: lease renewal failed; retrying until the safety deadline",
				"container", s.Container, "blob", s.Blob, "deadlineIn", time.Until(fuse.current()).Round(time.Millisecond), "error", err)
			next = time.Now().Add(retryDelay)
		}
		timer.Reset(time.Until(next))
	}
}

// leaseLostError is the context cause when the server says the lease is no
// longer ours. It matches ErrLeaseLost.
type leaseLostError struct{ err error }

func (e *leaseLostError) Error() string { return e.err.Error() }
func (e *leaseLostError) Unwrap() error { return e.err }

// failureLog rate-limits warnings about a run of failures: the first is
// logged, then at most one a minute with a count, and the recovery once.
type failureLog struct {
	count    int
	since    time.Time
	lastWarn time.Time
	unlogged int
}

const failureLogEvery = time.Minute

func (f *failureLog) failed(l *slog.Logger, msg string, args ...any) {
	now := time.Now()
	if f.count == 0 {
		f.since = now
	}
	f.count++
	if f.count > 1 && now.Sub(f.lastWarn) < failureLogEvery {
		f.unlogged++
		return
	}
	l.Warn(msg, append(args, "failures", f.count, "failingFor", now.Sub(f.since).Round(time.Millisecond))...)
	f.lastWarn, f.unlogged = now, 0
}

func (f *failureLog) recovered(l *slog.Logger, msg string, args ...any) {
	if f.count > 0 {
		l.Info(msg, append(args, "failures", f.count, "failedFor", time.Since(f.since).Round(time.Millisecond))...)
	}
	*f = failureLog{}
}

// jitter returns a duration drawn uniformly from [3/4 d, d]: a fleet started
// together drifts apart, and no wait exceeds d.
func jitter(d time.Duration) time.Duration {
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// behind returns a duration drawn uniformly from [d, 5/4 d]: long enough
// that a follower retrying every d at most gets there first.
func behind(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/4+1))
}

// sleep waits for d or until ctx is done, and reports whether it slept the
// whole time.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
