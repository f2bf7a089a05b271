package leaderelection

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/blobelect/leaderelection/internal/clock"
)

// When the leader's context is cancelled, and why that moment is safe.
//
// The server starts a lease's clock when it processes an acquire or renew,
// and that is never earlier than the moment we sent the request. So a lease
// last extended by a request sent at time S cannot expire on the server
// before S + LeaseDuration: no other instance can acquire it before then. We
// cancel the leader's context at
//
//	deadline = S + LeaseDuration - StopMargin
//
// where S is the send time of the last request the server confirmed with our
// lease ID, read from Go's monotonic clock (time.Now carries it; wall-clock
// jumps do not move it), and checked as well on a clock that counts the time
// a host spends suspended (see safetyFuse); both readings are taken before
// the request is sent. The fuse below cancels the context at that moment
// from a timer of its own, whether or not a renewal is still in flight: a
// renewal that answers after the deadline does not revive the term. And the
// func is started only if the deadline is still ahead on both clocks, read
// just before the call (safetyFuse.ahead): a process frozen between taking
// the lease and starting its func must not start it on thawing, before its
// timers have fired (the shard chaos run caught one doing so). The
// StopMargin is what the leader func has to notice ctx.Done() and stop, and
// it absorbs a timer firing late on a loaded machine and the tiny rate
// difference between our clock and the server's.
//
// A stop comes in two stages, and only the second is about the lease. The
// leader func's own context is also cancelled when the caller's context is,
// or when the func stalls: that means "please stop", and the lease is still
// ours (after a caller's cancel it is renewed until the func returns, so the
// func may wind down for as long as it needs). What means "stop now", the
// lease may pass to another instance (the deadline above, a lost lease, a
// renewal refused for good), cancels the lease context as well
// (LeaseContext), which the caller's cancellation does not touch. The rule
// that keeps two funcs from acting at once is therefore: the func, and all
// it started, stops acting within StopMargin of the lease context's end. A
// func that returns within StopMargin of its own context's end keeps the
// rule without knowing it, as that context ends no later than the lease
// context; a func that goes on winding down after its context ended must
// watch LeaseContext(ctx). The lease is released only after the func has
// returned, and the lease context ends before that release is sent. A
// release not sent, or not answered, as a shutdown's time runs out (it is
// bounded: see RequestTimeout) is safe: nothing acts under the lease any
// more, which only expires (or, for a shard, is freed once its session is
// dead); and a release that reaches the server late ends no later lease, as
// a lease ID whose release went unanswered is never proposed again.
//
// What this does not cover: a process that is frozen (SIGSTOP, a paused VM)
// across its deadline cannot run its cancellation until it thaws; a leader
// func that ignores its context keeps running; and an operator's break with
// a period shorter than the lease duration shortens the lease on the server
// (see SafeBreakPeriod). None of these can be fixed from inside the process;
// fencing tokens (the term) let downstream systems reject such a leader's
// writes.
//
// For the term to fence, it never repeats or goes down. A holder records the
// previous number + 1, conditional on the blob's ETag, under its lease, so
// two terms never share a number; and it continues from the higher of the
// blob's number and the highest it has seen there itself; a blob created
// again is seeded with that (or with a higher term the instance sent a
// record of, whose answer it may never have had), raised by every instance
// that saw, or sent a record of, more, and taken only once the leader that
// missed the deletion has stopped and read it (recreated.go). A shard's
// blob is not watched by every instance, so whoever takes one created again
// records a term above every term any session's record says its instance
// saw, or sent a record of, on any shard, too (shardfloors.go).
// So a blob or container deleted under a running fleet does not restart
// the count. A number that does not read, or cannot grow,
// is never continued: no func runs on that blob until an operator repairs
// the record (record.go). What cannot be kept: a blob deleted while no
// instance that saw its terms runs, or created again first by one that never
// saw them; and, as the wait for a blob created again is a time, a deletion
// whose only witnesses of the last term get no raise onto the blob created
// again (a read and a conditional write, or an acquire, a read and a write
// under the lease) before its creator's wait is over (recreated.go).
//
// A deletion also ends a lease without its holder's knowing: the server
// forgets it. A holder cut off from storage then acts on to its deadline,
// so whoever takes the blob created again first waits out the lease it
// knows the last term's holder declared, timed as a follower times an ETag
// lease's silence (recreated.go). This fails only with the term's rule
// above, under the same deletions: a blob created again first by an
// instance that saw none of its terms, a last term no running instance
// read, or witnesses of it that get no raise onto the blob before its
// creator's wait is over. Then the old holder's func and the new one may
// both act until the old holder's deadline, at most its LeaseDuration
// after the deletion.
//
// An ETag lease (a LeaseDuration D outside Azure's 15 to 60 s) is an
// infinite blob lease, which the server never expires: the followers do,
// with the same arithmetic (silence.go). The holder renews by writing its
// term record under its lease ID, which the server accepts only while the
// lease is ours, and which changes the blob's ETag (no lease operation
// does). Only such a write, confirmed, extends the term; the func starts
// after the first (the term record). A write sent at S is processed after S;
// a follower sees the ETag it made in an answer received at R, later still,
// and breaks the lease only when that ETag has stood for D on its own
// monotonic clock, at or after R + D, and only on condition (If-Match) that
// the ETag is still that one: a holder that wrote again since has changed
// it, and the break fails. D is the duration the holder declared in the
// record of that same answer, never the follower's own. The holder stopped
// at S + D - StopMargin for its last confirmed write (a later write that the
// server processed, unconfirmed, only delays the break), so it has stopped
// StopMargin before any break can succeed. The same fuse and CLOCK_BOOTTIME
// apply to it; a follower's clock that stops while its host sleeps only
// counts the silence short, and breaks later. Breaking a lease whose holder
// has not yet written is safe at any moment (the ETag, and the duration, are
// an earlier writer's): that holder's func has not started, and its first
// write fails on the broken lease. Each renewal is also conditional on the
// ETag its writer's previous confirmed write left, so a write the server
// processes late can never put an older term back.
//
// Followers never break a fixed, native lease, so a fleet that mixes kinds
// stays safe, and a break that finds the lease released (409) just lets the
// follower acquire it. The D a follower times is the one the record declares
// only when it reads as a duration some setting can declare (3 s to 24 h);
// anything else counts as 24 h (record.go). That is safe as no holder of
// ours declares more, and needed by none: a holder of ours writes its whole
// record, a valid one, before its func starts, so an ETag whose record does
// not read was made by another writer, and its holder, if any, has not
// started its func. The clocks of holder and follower may run apart by 0.1%
// of D (NTP normally keeps each within 0.05% of true): StopMargin is at
// least D/100, of which that is a tenth. What an ETag lease adds to the
// limits above: no break period (60 s at most) covers a longer lease, so the
// safe operator break is the followers' rule (BreakWhenSilent); and Azure
// accepts writes under the lease ID while a lease is breaking, so a holder
// learns of a break with a period only when it ends.
//
// Every blob says what it is for (its role, record.go: a mutex's lease, a
// session, a shard), from its creation and in every record, and no owner
// takes or breaks a blob of another role: a mutex's followers, Break and
// BreakWhenSilent leave a session's and a shard's alone, and a ShardOwner
// leaves alone a mutex's blob, and any native lease, under its prefix. So
// the rules below, and the rule above, each apply only to leases of their
// own kind, whatever names owners were given. (A blob that says nothing, of
// a version before roles, keeps the rules it had.)
//
// Sessions and shards (ShardOwner) build on this: a session is an ETag
// lease, and its fuse is every shard's. Their argument (claims, a container
// deleted under the fleet, handovers, a session resumed after a restart) is
// at the top of shards.go.
//
// A preferred leader (WithPriority, prefer.go) changes only who takes the
// lease next, never when. A leader that sees a waiting contender of higher
// priority asks its func to stop, as a caller's cancel does; the lease is
// renewed until the func has returned, then the term is marked ended,
// naming that contender, and the lease released, as at any graceful stop.
// The contender takes the free lease by an acquire as any, and records its
// term (number + 1) before its func starts; the other followers leave a
// lease so handed for a moment before they try for it, which decides
// nothing either: whoever acquires first leads, as without priorities. A
// candidate's blob (its priority, and a native lease that says it lives)
// is not the mutex's, and no follower breaks or takes it.
//
// A mutex over a quorum of accounts (NewQuorumMutex, quorum.go) holds one
// such lease per account, and leads while it holds a majority: its deadline
// is the one above for the majority-th latest S of the accounts it holds,
// so that it stops before any majority can pass; its term is read from the
// majority it holds, which meets every earlier term's, and stored on a
// majority before its func starts. The argument is at the top of quorum.go,
// with what a preferred leader and a restart in place (below) add there.
//
// Resuming after a restart (WithLeaseIDFile, resume.go) acquires a lease
// that has not expired, with the ID its previous holder used. That is safe
// because the previous holder is dead: the new process proposes the ID only
// while it holds the file's exclusive flock, and the kernel drops a
// process's lock only once all its threads have exited, so no leader func of
// the old process still runs. Requests the dead process had already sent may
// still reach the server later; with this ID they can only be acquires and
// renewals, which extend the lease we now hold (an acquire sets the lease's
// duration to the one it asks for, but every acquire ever sent under one ID
// asks for the same one: the ID is derived from the file's and the duration
// asked, a native lease's seconds or infinite, fileLeaseID, so a process
// started again asking for another proposes another ID, and a late acquire
// of its predecessor's never turns our lease into a shorter one, nor an
// ETag lease's infinite one into one that expires under a holder that renews
// it by writes, nor a native one into an infinite one that followers break
// as silent), and term writes, which are
// conditional on the blob's ETag and so cannot overwrite a newer term. (An
// ETag lease's renewal is such a write too: conditional on the ETag its
// writer's last confirmed write left, which our new term record has
// changed.) Never a release: the file moves on to a fresh ID, durably,
// before any release is sent. The new process records a new term (number +
// 1) under the lease before its func starts, so the term still fences, and
// from then on the deadline above applies to its own renewals. The lock
// proves a process dead, not work it handed to others (child processes,
// remote jobs): as after any failover, the term is what fences those. And it
// proves nothing across hosts: network filesystems (NFS, SMB) may lose a
// lock across a server or client failure, and a file shared by two hosts, or
// copied, lets two live processes hold one ID; hence one local filesystem,
// one host.

// deadline is one moment read on two clocks: Go's monotonic clock, and the
// clock that counts suspended time (see safetyFuse).
type deadline struct {
	mono time.Time
	boot time.Duration
	sent time.Time // the send time of the confirmed request that set it (for the metrics)
}

// safetyDeadline is when a term extended by g must stop acting: g.Sent +
// LeaseDuration - margin, on both clocks, each read when the request was
// sent. Reading the boot clock at the answer instead would push the
// deadline back by a suspend during the round trip.
func (g Grant) safetyDeadline(margin time.Duration) deadline {
	left := g.Expires.Sub(g.Sent) - margin
	return deadline{mono: g.Sent.Add(left), boot: g.bootSent + left, sent: g.Sent}
}

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
	mu       sync.Mutex
	deadline deadline
	boot     clock.Boot
	timer    *time.Timer
	check    *time.Timer
	done     bool // blown or stopped: the timers must not act again
	blown    chan struct{}
	cancel   context.CancelCauseFunc
}

// fuseCheckEvery is how often the fuse reads the clock that counts
// suspended time: how late, at most, a host that slept past its deadline
// cancels after waking.
const fuseCheckEvery = 250 * time.Millisecond

// newSafetyFuse arms a fuse that cancels at d, read on the monotonic clock
// and on boot (the lease manager's: CLOCK_BOOTTIME but in tests).
func newSafetyFuse(d deadline, cancel context.CancelCauseFunc, boot clock.Boot) *safetyFuse {
	f := &safetyFuse{deadline: d, boot: boot, cancel: cancel, blown: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timer = time.AfterFunc(time.Until(d.mono), f.fire)
	f.check = time.AfterFunc(fuseCheckEvery, f.checkBoot)
	return f
}

func (f *safetyFuse) fire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	if d := time.Until(f.deadline.mono); d > 0 {
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
	if f.boot() >= f.deadline.boot {
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
func (f *safetyFuse) extend(d deadline) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.passedLocked() {
		return false
	}
	if d.mono.After(f.deadline.mono) {
		// The timer re-arms itself when it fires at the old deadline.
		f.deadline.mono = d.mono
	}
	f.deadline.boot = max(f.deadline.boot, d.boot)
	if d.sent.After(f.deadline.sent) {
		f.deadline.sent = d.sent
	}
	return true
}

// ahead reports whether the deadline is still ahead on both clocks, and
// blows the fuse if it is not: a func is started only if it is, checked
// just before the call, as a process frozen (or a host asleep) after the
// lease was taken may resume past the deadline before the timers fire.
func (f *safetyFuse) ahead() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.passedLocked()
}

// passedLocked reports whether the fuse is blown or stopped, or its deadline
// has passed on either clock, in which case it blows it.
func (f *safetyFuse) passedLocked() bool {
	if f.done {
		return true
	}
	if !time.Now().Before(f.deadline.mono) || f.boot() >= f.deadline.boot {
		f.blowLocked()
		return true
	}
	return false
}

// current returns the deadline in force, on the monotonic clock.
func (f *safetyFuse) current() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadline.mono
}

// lastSent returns the send time of the last confirmed request that set the
// deadline: the acquire, a renewal, or an ETag lease's record write.
func (f *safetyFuse) lastSent() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadline.sent
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
// renew is r.lease.Renew, or a fake in unit tests of this timing logic;
// term is the running term, for stall detection.
// It stops the term with the reason and returns it; nil means stop was
// called while the lease was still ours. It keeps renewing after the caller's
// context is cancelled: the lease stays held while the leader func winds
// down, and is released only after it returns.
func (r *termRunner) keepAlive(stop context.Context, first Grant, fuse *safetyFuse, ts termStop,
	renew func(context.Context) (Grant, error), term *termState) error {
	s := r.lease.config()
	retryDelay := s.retryDelay()
	next := first.Sent.Add(s.RenewInterval)
	var failing failureLog
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		var asked chan<- error // a renewal asked for now (renewSoon), and told its outcome
		select {
		case <-stop.Done():
			return nil
		case <-fuse.blown:
			r.logger.Warn("leaderelection: lease not renewed before its safety deadline; leader context cancelled",
				"container", s.Container, "blob", s.Blob, "failedRenewals", failing.count)
			return ErrRenewDeadline
		case <-timer.C:
		case asked = <-r.hooks.renewSoon:
		}
		if stall := r.stall; stall > 0 && term.started.Load() && term.sinceBeat() > stall {
			// Stop renewing: the lease stays ours until the fuse blows at
			// the deadline the last renewal set, and valid for StopMargin
			// after that, so the func has as long to stop acting as after
			// any other cancellation.
			ts.pleaseStop(ErrStalled)
			r.logger.Warn("leaderelection: leader func stalled; leader context cancelled, renewals stopped",
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
			r.metrics.renewed(time.Since(sent), outcome(err, "ok"))
			r.health.renewResult(err)
		}
		if asked != nil {
			asked <- err // buffered
		}
		switch {
		case err == nil:
			if !fuse.extend(g.safetyDeadline(s.StopMargin)) {
				continue // the fuse blew while the renewal was in flight; the select reports it
			}
			failing.recovered(r.logger, "leaderelection: lease renewal recovered", "container", s.Container, "blob", s.Blob)
			next = g.Sent.Add(s.RenewInterval)
		case stop.Err() != nil:
			return nil
		case errors.Is(err, ErrLeaseLost):
			cause := &leaseLostError{err: err}
			ts.stopNow(cause)
			r.logger.Warn("leaderelection: lease lost; leader context cancelled", "container", s.Container, "blob", s.Blob, "error", err)
			return cause
		case errors.Is(err, ErrPermanent):
			ts.stopNow(err)
			r.logger.Error("leaderelection: lease renewal failed permanently; leader context cancelled", "container", s.Container, "blob", s.Blob, "error", err)
			return err
		default:
			failing.failed(r.logger, "leaderelection: lease renewal failed; retrying until the safety deadline",
				"container", s.Container, "blob", s.Blob, "deadlineIn", time.Until(fuse.current()).Round(time.Millisecond), "error", err)
			next = time.Now().Add(retryDelay)
		}
		timer.Reset(time.Until(next))
	}
}

// termStop tells a term to stop, in two stages. pleaseStop cancels only the
// leader func's context: the caller cancelled, or the func stalled, and the
// lease is still ours. stopNow cancels the lease context too (see
// [LeaseContext]): the lease may pass to another instance.
type termStop struct {
	pleaseStop context.CancelCauseFunc
	stopNow    context.CancelCauseFunc
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
