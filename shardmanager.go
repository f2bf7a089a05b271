package leaderelection

import (
	"context"
	"errors"
	"time"

	"github.com/blobelect/leaderelection/internal/clock"
)

// A session's manager (manage): the loop that, pass after pass, judges the
// sessions, balances, claims and hands over, and runs the shards, until the
// session ends; and what it keeps from one pass to the next (shardManager).

// manage is a session's func (its term runs it under the session's lease): it
// runs the shards until the session's context ends, then stops them all and
// returns once every shard func has returned and its lease is released.
func (o *ShardOwner) manage(ctx context.Context, s *session) (err error) {
	state, _ := ctx.Value(termKey{}).(*termState)
	sm := &shardManager{o: o, s: s, ctx: ctx, stopNow: LeaseContext(ctx), watch: newSessionWatch(),
		shardListing: shardListing{anomalies: map[string]unleasedSince{}, owners: map[string]shardHolder{}},
		candidates:   candidates{cands: map[string]candidate{}, freeSince: map[string]time.Time{}},
		balancing:    balancing{grewAt: map[string]time.Time{}, lastOwned: map[string]int{}},
		fuse:         state.fuse,
		deadline:     func() time.Time { return state.fuse.current() },
		handoffs:     handoffs{adoptSlots: make(chan struct{}, adoptParallel), out: newOutbox()},
		ownTerms:     ownTerms{terms: map[ownTerm]bool{}, highest: map[string]int64{}},
		heldList:     heldList{heldLast: "\x00"}} // not a list: the first, even empty, is written
	// The shard funcs' contexts end when the session's lease context does,
	// and, when the caller ends Run, only once the session has handed on
	// what it could (leave).
	shardsCtx, stopShards := context.WithCancelCause(context.WithoutCancel(ctx))
	defer context.AfterFunc(sm.stopNow, func() { stopShards(context.Cause(sm.stopNow)) })()
	sm.shardsCtx = shardsCtx
	if t, ok := TermFromContext(ctx); ok {
		sm.sessionTerm = t.Number
	}
	sm.releases, sm.endReleases = context.WithCancel(sm.stopNow)
	defer sm.endReleases()
	o.state.setCurrent(s)
	defer func() {
		cause := context.Cause(ctx)
		switch {
		case err != nil:
			cause = err
		case o.state.panicking():
			cause = errShardPanicked
		case cause == nil:
			cause = context.Canceled
		}
		// With a lease ID file, the caller's cancel keeps the session and
		// its shards for the next process (sessionfile.go): nothing is
		// handed on, and no shard is released.
		sm.s.keep.Store(sm.s.term.hooks.ending != nil && err == nil && !o.state.panicking() && sm.stopNow.Err() == nil)
		if err == nil && !o.state.panicking() && sm.stopNow.Err() == nil && !sm.s.keep.Load() {
			sm.leave()
		}
		stopShards(cause)
		sm.handoffs.watching.Wait() // adopts no more
		// Once every shard func has returned, the releases have one
		// RequestTimeout in all, whatever the number of shards: those of
		// the shards just stopped, then the leftovers. A release not sent
		// in time only leaves a lease that the session's end frees (its
		// shards are claimed once it is dead), or, for a leftover that no
		// record of ours names, that a claimer breaks after a lease
		// duration. The session's own release follows, in a window of its
		// own (the term's end: termrun.go, endWindow).
		sm.funcs.Wait()
		cut := time.AfterFunc(o.settings.RequestTimeout, sm.endReleases)
		defer cut.Stop()
		sm.runs.Wait()
		sm.endHeld()
		close(sm.handoffs.out.closed) // every transfer has posted its note
		sm.handoffs.pacing.Wait()
		sm.releaseLeftovers(sm.releases)
		sm.reportTook()
		o.reportStopped(true)
		switch c := context.Cause(sm.stopNow); {
		case c == nil:
		case gone(c):
			o.sawDeletion("the session's renewal found its blob gone")
		case errors.Is(c, ErrRenewDeadline), errors.Is(c, ErrLeaseLost):
			o.sawCutOff()
		}
		var mgrErr error // a permanent error, kept for Run; not the session's end by its blob's deletion
		if err != nil && !errors.Is(err, errSessionGone) {
			mgrErr = err
		}
		if p, panicked := o.state.endSession(mgrErr); panicked {
			panic(p)
		}
	}()
	o.storage.reached.Store(true)
	o.fleetMemory.hadRecord.Store(true)
	sm.handoffs.pacing.Add(1)
	go sm.deliver(sm.releases)
	sm.handoffs.pacing.Add(1)
	go sm.warm(sm.releases)
	return sm.loop()
}

// begin starts what a session does once it may run shards (mayRun): a
// resumed session first takes back the shards its previous process held
// (takeBack), before it claims or adopts anything; then it reads the notes
// of the shards handed to it.
func (sm *shardManager) begin() {
	sm.begun = true
	if sm.s.resumed {
		sm.takeBack()
	}
	sm.handoffs.watching.Add(1)
	go sm.watchNotes()
}

// mayRun reports whether this session may run shards yet: once every other
// live session's record says that its instance knows a lease duration at
// least as long as this session's (wire.MetaLongest: the longest any session it
// listed declared). Until then this session claims, adopts and takes back
// nothing. A deletion of the container makes every instance that saw it
// wait for the longest lease duration it knows before it claims a shard
// blob created again (shardfloors.go): every instance live when this session
// began to run shards knows this session's, so none claims one before this
// session's shard funcs have stopped. Sessions of one lease duration never
// wait: each knows its own. A record of an older version, which does not
// say, is not waited for.
func (sm *shardManager) mayRun(view sessionView) bool {
	D := sm.o.settings.LeaseDuration
	var behind []string
	for _, id := range view.live {
		if k, ok := view.knows[id]; ok && id != sm.s.id && k < D {
			behind = append(behind, id)
		}
	}
	if len(behind) == 0 {
		return true
	}
	if !sm.toldBehind {
		sm.toldBehind = true
		sm.o.logger.Info("leaderelection: this session's lease duration is longer than other live sessions' instances know of; it runs no shard until their records say they know it",
			"container", sm.o.settings.Container, "prefix", sm.o.prefix, "leaseDuration", D, "sessions", behind)
	}
	return false
}

func (sm *shardManager) loop() error {
	o, s := sm.o, sm.o.settings
	var failing failureLog
	backoff := s.RetryInterval
	maxBackoff := max(s.RetryInterval, min(s.LeaseDuration, maxLeaseDuration))
	wait := time.Duration(0)
	for o.pause(sm.ctx, wait) && !o.state.panicking() {
		wait = clock.Jitter(s.RetryInterval)
		view, err := o.judgeSessions(sm.ctx, sm.s, sm.watch, &wait)
		if err == nil && !sm.begun && sm.mayRun(view) {
			sm.begin()
		}
		if err == nil && sm.begun {
			err = sm.balance(view, &wait)
		}
		o.reportSlow()
		o.reportStopped(false)
		switch {
		case err == nil:
			failing.recovered(o.logger, "leaderelection: storage reachable again", "container", s.Container, "prefix", o.prefix)
			backoff = s.RetryInterval
		case sm.ctx.Err() != nil:
			return nil
		case errors.Is(err, errSessionGone):
			o.logger.Warn("leaderelection: this session's blob is gone with its container; ending the session", "container", s.Container, "prefix", o.prefix,
				"session", sm.s.id)
			return err
		case errors.Is(err, ErrPermanent):
			o.logger.Error("leaderelection: giving up: storage refused a request", "container", s.Container, "prefix", o.prefix, "error", err)
			return err
		default:
			failing.failed(o.logger, "leaderelection: cannot list the sessions or shards; retrying with backoff", "container", s.Container, "prefix", o.prefix, "error", err)
			wait = clock.Jitter(backoff)
			backoff = min(2*backoff, maxBackoff)
		}
	}
	return nil
}
